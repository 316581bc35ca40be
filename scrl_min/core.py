"""scrl-min: score centering for RL with a mismatched sampler. The method, in one file.

The algorithm (Marek & Ryabinin, "Score Centering Stabilizes Off-policy RL", arXiv:2609.20807)
------------------------------------------------------------------------------------------------
An RL step has two engines: a *sampler* that draws completions from q (an inference engine: here the
policy with FP8 or int4 decoder Linears, optionally with persistent weight noise or stale weights) and
a *trainer* that holds the policy p_θ in float32 and computes the gradient. At one prefix h, with
a ~ q, detached advantage A and trainer score s_a = ∇θ log p_θ(a|h), the usual update splits as

    E_q[A s] = Cov_q(A, s) + E_q[A] · μ,        μ = E_q[s] = Σ_a (q_a − p_a) s_a
               ^^^^^^^^^^^   ^^^^^^^^^^
               signal        drift (zero on-policy, a steady pull of p toward q under mismatch)

Score centering replaces s by s − μ. With a detached per-token importance weight w = f(p/q) the
per-token loss is (sg = stop-gradient)

    ℓ_t = − sg(A_t) · [ sg(f(r_y)) · log p(y_t) − Σ_{v∈H} sg(c_v) · log p(v) ]           (eq. SC)

where H is the sampler's top-k head, the unseen tail is modeled as q_v ≈ ρ p_v, and

    ρ = (1 − Σ_H q_v)_+ / max(1 − Σ_H p_v, ε),   m_v = q_v f(p_v/q_v),   α = ρ f(1/ρ),   c_v = m_v − α p_v.

Reading order (top to bottom): `Rollout` (what a sampler hands the loss) · `importance_weight` and
`tail_alpha` (f and α, the paper's table) · `centering_coefficients` (ρ, m, α, c) ·
`score_centered_pg_loss` (eq. SC) · `centering_term` (the part a PG loss adds to become SC) ·
`reduce_loss` · `compute_advantages` · `trainer_logprobs` (log p at y_t and at H) · `drift_and_signal`
(the split above, measured exactly) · `StepConfig` and `rl_step` (one RL step, in numbered steps) · loss
options (PPO clip, sequence level, exact support: off the main path) · input checks (`validate_rollout`, the
loss's). docs/method.md derives every equation used here.

Deviations from the paper and from a production trainer (numbered, on purpose)
  1. The default sampler (torch_sampler.py) is this same PyTorch model with its decoder Linear layers in
     FP8 (e4m3 weights with per-channel scales, e4m3 activations with per-token scales); the LM head
     stays in bf16 as in vLLM's FP8 checkpoints. `VLLMSampler` is the real engine with the same
     contract. Because FP8 at a few million parameters is a small mismatch, a persistent relative
     weight noise (drawn once, as in the paper's own small runs) is the severity knob: sampler weight
     = trainer weight · (1 + σ ε). Other real numerics are named sampler formats (FP8 e5m2, int8,
     int4 group-wise) and an FP8 KV cache, emulated in float32.
  2. One optimizer step per rollout batch (no PPO epochs), SGD by default as in the paper's small runs.
  3. The task is "distinct Python names" (task.py: prompts, the verifier's reward, the model's location),
     not Countdown: a 3.7M-parameter model cannot learn arithmetic search, and this task's best policy is
     high-entropy, which keeps the mismatch (and so the drift) alive for the whole run.
  4. The advantage mode is an experimental axis: raw rewards (REINFORCE, no baseline), ±1-style signed
     rewards, GRPO group-normalized, or the paper's recipe (±1-style, centred per group, no std
     scaling). The drift is E_q[A]·μ, so its size depends on the mode.
  5. With V = 2,048 the sampler's full q is at hand, so each step can also log the exact drift and
     signal (`drift_and_signal`), which no production trainer can afford.

Beside this file, one per reason to change: logprobs.py (log p without the (tokens × V) logits in
memory), task.py (the task and the policy's location), formats.py, torch_sampler.py and vllm_engine.py (the
samplers that produce a `Rollout`), driver.py (configs, the Trainer, runs, the CLI), stats.py, trl.py. They
import this file, never the reverse; it imports only errors.py, logprobs.py and task.py (the reward of
`rl_step`'s step 2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from .errors import RolloutError, ScrlError
from .logprobs import _index_dtype, completion_logits, gather_logprobs
from .task import task_rewards

EMPTY_LOGP = -9000.0  # head log-probs at or below this (the -9999 stand-in, -inf) mark an empty slot
RHO_EPS = 1e-6  # floor of the trainer's tail mass in ρ's denominator
TAIL_TOL = 1e-5  # a sampler tail mass below this counts as zero (float32 rounding of Σ_H q)
SAME_LOGP_TOL = 1e-6  # an id given twice must carry one log-prob: |Δ| ≤ this · max(1, |log q|) (float32)
MAX_LOG_RATIO = 20.0  # |log r| is clipped here before exp, so weights stay finite (e^20 ≈ 4.9e8)
WEIGHTINGS = ("none", "is", "tis", "mis", "icepop")  # f(r): see importance_weight
LEVELS = ("token", "sequence")  # where the importance weight applies: per token, or per sequence (GSPO)
ADVANTAGE_MODES = ("raw", "signed", "grpo", "centered")  # see compute_advantages
# The loss's defaults, declared once (the functions below and TrainConfig take them from here)
WEIGHTING = "none"  # f(r) = 1: no importance weight
TIS_CAP = 2.0  # C of TIS: f(r) = min(r, C)
MIS_BAND = (0.5, 5.0)  # [lo, hi] of MIS / IcePop: the ratios r = p/q a token's weight keeps


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The rollout contract: what a sampler hands the loss
# ═════════════════════════════════════════════════════════════════════════════════════════════════
@dataclass
class Rollout:
    """What a sampler returns for B sequences of at most T generated tokens (dense tensors).

    prompt_ids (B, P) long, left-padded; prompt_mask (B, P) bool; completion_ids (B, T) long;
    completion_mask (B, T) bool (True at sampled tokens, EOS included; False after it);
    sampler_logp (B, T) float32, log q(y_t) at the sampling temperature; head_ids (B, T, k) long, the
    sampler's top-k ids; head_logp (B, T, k) float32, their log q (full-vocabulary normalized at the
    sampling temperature, -inf in empty slots). Every generated position holds exactly min(k, V)
    valid, distinct head entries; fewer (at least one) only where the sampler drew from an exact,
    filtered support (`validate_rollout(..., exact_support=True)`). The sampled token's log q, when
    its id is in the head too, is the same number in both places.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    sampler_logp: torch.Tensor
    head_ids: torch.Tensor
    head_logp: torch.Tensor
    full_logq: Optional[torch.Tensor] = None  # (B, T, V) float32 log q over the vocabulary, if asked


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The loss (eq. SC)
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def importance_weight(log_ratio: torch.Tensor, weighting: str, tis_cap: float = TIS_CAP,
                      mis_band: tuple = MIS_BAND) -> torch.Tensor:
    """f(r) of the paper's head/tail coefficient table, from log r = log p − log q.

    log_ratio: any shape, any float dtype (NaN counts as r = e^-20). Returns the same shape, float32,
    always finite: log r is clipped to ±MAX_LOG_RATIO before exp.

    none: 1 · is: r · tis: min(r, C) · mis: r·1[lo ≤ r ≤ hi] · icepop: 1[lo ≤ r ≤ hi]
    ("icepop" keeps the *unit* weight inside the band; "mis" keeps r itself.) Raises ScrlError for an
    unknown weighting.
    """
    lr = log_ratio.float().clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    lr = torch.where(torch.isnan(lr), torch.full_like(lr, -MAX_LOG_RATIO), lr)
    r = lr.exp()
    lo, hi = mis_band
    in_band = (lr >= math.log(lo)) & (lr <= math.log(hi))
    if weighting == "none":
        return torch.ones_like(r)
    if weighting == "is":
        return r
    if weighting == "tis":
        return r.clamp(max=tis_cap)
    if weighting == "mis":
        return torch.where(in_band, r, torch.zeros_like(r))
    if weighting == "icepop":
        return in_band.float()
    raise ScrlError(f"unknown weighting {weighting!r}; choose one of {WEIGHTINGS}")


def tail_alpha(rho: torch.Tensor, weighting: str, tis_cap: float = TIS_CAP,
               mis_band: tuple = MIS_BAND) -> torch.Tensor:
    """α = ρ · f(1/ρ): the tail's weighted mass per unit of trainer tail mass (same table).

    rho: any shape, >= 0, finite; returns the same shape and dtype. none: ρ · is: 1 · tis: min(1, Cρ)
    · mis: 1[1/hi ≤ ρ ≤ 1/lo] · icepop: ρ · 1[1/hi ≤ ρ ≤ 1/lo]. Raises ScrlError for an unknown
    weighting.
    """
    lo, hi = mis_band
    band = ((rho >= 1.0 / hi) & (rho <= 1.0 / lo)).float()
    if weighting == "none":
        return rho
    if weighting == "is":
        return torch.ones_like(rho)
    if weighting == "tis":
        return (tis_cap * rho).clamp(max=1.0)
    if weighting == "mis":
        return band
    if weighting == "icepop":
        return rho * band
    raise ScrlError(f"unknown weighting {weighting!r}; choose one of {WEIGHTINGS}")


def centering_coefficients(logp_head, sampler_logp_head, mask, weighting: str = WEIGHTING,
                           tis_cap: float = TIS_CAP, mis_band: tuple = MIS_BAND, tail_tol=None):
    """The coefficients c_v of eq. SC on the sampler's head H, and ρ, from detached log-probs.

    Args:
      logp_head:         (B, T, k) trainer log-probs at the head ids (only their values are used)
      sampler_logp_head: (B, T, k) sampler top-k log-probs; −inf or <= EMPTY_LOGP marks an empty slot
      mask:              (B, T) bool, the loss-carrying tokens (c = 0 elsewhere)
      weighting, tis_cap, mis_band: f of `importance_weight`
      tail_tol:          a sampler tail 1 − Σ_H q at or below this is zero (ρ = 0). Default: the
                         rounding of Σ_H q (`tail_rounding`); `math.inf` for an exact support
    Returns:
      (c (B, T, k) float32, 0 at empty slots and off the mask; diag: dict of (B, T) float32 tensors
      rho ρ, rho_at_bound (1.0 where ρ's denominator was floored at RHO_EPS while the sampler tail
      counts: ρ is then a bound, not an estimate), head_mass_q Σ_H q, head_mass_p Σ_H p).
    Float32 whatever the input dtype; device follows the inputs. docs/method.md, "The top-k estimator".
    """
    zeros = torch.zeros_like(sampler_logp_head, dtype=torch.float32)  # (B, T, k)
    valid = sampler_logp_head > EMPTY_LOGP  # v ∈ H: an empty slot (−inf, −9999) is outside it
    use = valid & mask[..., None]  # coefficients only at loss-carrying tokens
    lq = torch.where(valid, sampler_logp_head.float(), zeros)
    # q_v and p_v, v ∈ H (`where`, never 0 · −inf)
    q = torch.where(valid, lq.exp(), zeros)
    lp = torch.where(valid, logp_head.detach().float(), zeros)
    p = torch.where(valid, lp.exp(), zeros)
    head_q, head_p = q.sum(-1), p.sum(-1)  # Σ_H q, Σ_H p (B, T)
    # the sampler's tail counts as empty when 1 − Σ_H q is within rounding of 0 (k = V, all mass in H)
    tol = tail_rounding(q, lq, sampler_logp_head.dtype) if tail_tol is None else tail_tol
    no_tail = ((1.0 - head_q) <= tol) if tail_tol != math.inf else torch.ones_like(head_q, dtype=torch.bool)
    # ρ = (1 − Σ_H q)_+ / max(1 − Σ_H p, ε)
    rho = torch.where(no_tail, 0.0, (1.0 - head_q) / (1.0 - head_p).clamp(min=RHO_EPS))
    # m_v = q_v f(p_v / q_v)
    m = torch.where(use, q * importance_weight(lp - lq, weighting, tis_cap, mis_band), zeros)
    # α = ρ f(1/ρ)
    alpha = tail_alpha(rho, weighting, tis_cap, mis_band)
    # c_v = m_v − α p_v
    c = torch.where(use, m - alpha[..., None] * p, zeros)
    rho_at_bound = (~no_tail & (1.0 - head_p < RHO_EPS)).float()
    return c, dict(rho=rho, rho_at_bound=rho_at_bound, head_mass_q=head_q, head_mass_p=head_p)


def tail_rounding(q: torch.Tensor, lq: torch.Tensor, sampler_dtype: torch.dtype):
    """The rounding of the sampler's tail 1 − Σ_H q: a tail at or below it counts as zero, otherwise ρ
    would be rounding noise over rounding noise. TAIL_TOL (float32 summation of Σ_H q) for float32
    log-probs; log-probs coarser than float32 (bf16, float16) add their own rounding,
    Σ_H q_v (e^{u |log q_v|} − 1) per token (u: unit roundoff of their dtype). q, lq: (B, T, k)
    float32, 0 at empty slots. Returns a float or a (B, T) tensor. The trainer's dtype plays no part."""
    u = torch.finfo(sampler_dtype).eps / 2
    if u > torch.finfo(torch.float32).eps / 2:
        return TAIL_TOL + (q * torch.expm1(u * lq.abs())).sum(-1)
    return TAIL_TOL


def score_centered_pg_loss(logp, logp_head, sampler_logp, sampler_logp_head, advantages, mask, *,
                           weighting: str = WEIGHTING, centering: bool = True, tis_cap: float = TIS_CAP,
                           mis_band: tuple = MIS_BAND, **options):
    """Per-token score-centered policy-gradient loss (eq. SC in the module docstring).

    Args:
      logp:              (B, T)    trainer log-probs of the sampled tokens, at the sampling T (grad)
      logp_head:         (B, T, k) trainer log-probs at the sampler's head ids (grad)
      sampler_logp:      (B, T)    sampler log-probs of the sampled tokens
      sampler_logp_head: (B, T, k) sampler top-k log-probs, full-vocabulary normalized; -inf or
                                   <= -9000 marks an empty slot
      advantages:        (B,) or (B, T), detached here: sg(A)
      mask:              (B, T) bool, True at generated tokens that carry loss
      weighting:         "none" | "is" | "tis" | "mis" | "icepop" (see `importance_weight`)
      centering:         subtract the centering term Σ_H c_v log p(v)
      **options:         level="sequence" (GSPO-style weight), exact_support=True (top-k/top-p
                         samplers), old_logp/old_logp_head/ppo_clip (PPO clipping), tail_tol: off the
                         main path, see `score_centered_pg_loss_options` and docs/method.md
    Returns:
      (loss, diag): loss (B, T) float32, zero where mask is False, in score-function form
      −A · sg(weights) · log p (its gradient is the method's; its value is not a PPO surrogate); diag a
      dict of detached (B, T) float32 tensors: weight (the factor f(r_y) on the sampled token's score),
      log_ratio log(p_y/q_y), and those of `centering_coefficients` (rho, rho_at_bound, head_mass_q,
      head_mass_p), computed for every weighting so that the metrics log them for every arm.
    All coefficient arithmetic is float32 whatever the input dtype; nothing non-finite reaches the loss
    from -inf head slots or huge log-ratios; the device follows the inputs. Raises ScrlError, naming the
    sequence and position, on: a shape mismatch or a bad name; at a loss-carrying position, a
    non-finite sampler log-prob of the sampled token or a NaN in its sampler head (a broken row, not
    an empty slot); with centering, a sampler head with no valid slot (nothing to center with).
    """
    if options:
        return score_centered_pg_loss_options(logp, logp_head, sampler_logp, sampler_logp_head, advantages,
                                              mask, weighting=weighting, centering=centering,
                                              tis_cap=tis_cap, mis_band=mis_band, **options)
    mask = _check_loss_inputs(logp, logp_head, sampler_logp, sampler_logp_head, mask, weighting,
                              needs_head=centering)
    # sg(A_t), (B, T), 0 off the mask (masked positions carry nothing, not even NaN)
    A = torch.where(mask, _per_token(advantages, *mask.shape).detach().float(), 0.0)
    # log r_y = log p(y_t) − log q(y_t), detached, clipped to ±MAX_LOG_RATIO so exp stays finite
    log_ratio = torch.where(mask, (logp.detach().float() - sampler_logp.float())
                            .clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO), 0.0)  # (B, T)
    # w_y = f(r_y)
    w_y = importance_weight(log_ratio, weighting, tis_cap, mis_band)
    # c_v, v ∈ H, and ρ
    c, diag = centering_coefficients(logp_head, sampler_logp_head, mask, weighting, tis_cap, mis_band)
    # sg(w_y) · log p(y_t)
    bracket = w_y * logp.float()
    if centering:
        # − Σ_{v∈H} sg(c_v) log p(v)
        bracket = bracket - _head_sum(c, logp_head, sampler_logp_head, mask)
    # ℓ_t = −sg(A_t) · [ sg(w_y) log p(y_t) − Σ_{v∈H} sg(c_v) log p(v) ]
    loss = torch.where(mask, -A * bracket, 0.0)
    return loss, dict(weight=w_y, log_ratio=log_ratio, **diag)


def centering_term(logp_head, sampler_logp_head, advantages, mask, *, weighting: str = WEIGHTING,
                   tis_cap: float = TIS_CAP, mis_band: tuple = MIS_BAND):
    """The centering term of eq. SC alone: sg(A_t) · Σ_{v∈H} sg(c_v) · log p(v), per token.

    A policy-gradient loss whose per-token term is −sg(A_t) · sg(f(r_y)) · log p(y_t) (TRL's, for one)
    becomes score centering by adding this: ℓ_SC = ℓ_PG + centering_term (the same gradient as
    `score_centered_pg_loss`; the values agree up to float round-off). Needs no log p(y_t).

    Args: logp_head (B, T, k) trainer log-probs at the head ids (grad); sampler_logp_head (B, T, k);
    advantages (B,) or (B, T); mask (B, T) bool; weighting, tis_cap, mis_band: the f of the policy term.
    Returns (term (B, T) float32, 0 off the mask; diag of `centering_coefficients`). Raises ScrlError
    on shapes, a NaN sampler head slot or an empty head at a loss-carrying position.
    """
    if mask.dim() != 2 or logp_head.dim() != 3 or logp_head.shape[:2] != mask.shape:
        raise ScrlError(f"logp_head {tuple(logp_head.shape)} and mask {tuple(mask.shape)}: expected (B, T, k) "
                        f"and (B, T)")
    if weighting not in WEIGHTINGS:
        raise ScrlError(f"unknown weighting {weighting!r}; choose one of {WEIGHTINGS}")
    B, T = mask.shape
    mask = _check_head(logp_head, sampler_logp_head, mask.bool(), needs_head=True)
    A = torch.where(mask, _per_token(advantages, B, T).detach().float(), 0.0)
    c, diag = centering_coefficients(logp_head, sampler_logp_head, mask, weighting, tis_cap, mis_band)
    return torch.where(mask, A * _head_sum(c, logp_head, sampler_logp_head, mask), 0.0), diag


def _head_sum(c, logp_head, sampler_logp_head, mask):
    """Σ_{v∈H} c_v log p(v), (B, T): log p only at valid, loss-carrying slots (never 0 · −inf)."""
    use = (sampler_logp_head > EMPTY_LOGP) & mask[..., None]
    return (c * torch.where(use, logp_head.float(), torch.zeros_like(c))).sum(-1)


def reduce_loss(per_token: torch.Tensor, mask: torch.Tensor, reduction: str = "token_mean",
                denominator: Optional[float] = None) -> torch.Tensor:
    """Scalar loss from a (B, T) per-token loss.

    token_mean: Σ loss / Σ mask (or / `denominator`: the token count of the whole accumulated batch,
    so micro-batches sum to the one-batch gradient) · seq_mean: mean over sequences of their token
    mean · constant: Σ loss / denominator (Dr. GRPO). Raises ScrlError on an unknown reduction.
    """
    mask = mask.bool()
    if reduction == "token_mean":
        return per_token.sum() / (denominator if denominator else mask.sum().clamp(min=1))
    if reduction == "seq_mean":
        per_seq = per_token.sum(-1) / mask.sum(-1).clamp(min=1)
        return per_seq.sum() / (denominator if denominator else per_token.shape[0])
    if reduction == "constant":
        if not denominator:
            raise ScrlError("reduction='constant' needs a denominator (e.g. batch × max tokens)")
        return per_token.sum() / denominator
    raise ScrlError(f"unknown reduction {reduction!r}; choose token_mean, seq_mean or constant")


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Advantages
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def compute_advantages(rewards: torch.Tensor, group_size: int, mode: str) -> torch.Tensor:
    """Advantages (N,) from rewards (N,) ordered as consecutive GRPO groups of `group_size`.

    raw: A = r · signed: A = 2r − 1 · grpo: A = (r − mean_G r) / (std_G r + 1e-4) · centered: the
    paper's recipe, ±1-style rewards 2r − 1 centred per group without std scaling (as Dr. GRPO),
    A = (2r − 1) − mean_G(2r − 1) = 2 (r − mean_G r). Raises ScrlError.
    """
    if mode == "raw":
        return rewards.clone()
    if mode == "signed":
        return 2.0 * rewards - 1.0
    if mode in ("grpo", "centered"):
        if group_size < 2 or rewards.numel() % group_size:
            raise ScrlError(f"{mode} advantages need groups of >= 2 that split the {rewards.numel()} "
                            f"rewards, got group_size {group_size}")
        g = rewards.view(-1, group_size)  # (groups, G)
        if mode == "grpo":
            return ((g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + 1e-4)).view(-1)
        signed = 2.0 * g - 1.0  # centered: (2r − 1) − mean_G(2r − 1)
        return (signed - signed.mean(1, keepdim=True)).view(-1)
    raise ScrlError(f"unknown advantage mode {mode!r}; choose one of {ADVANTAGE_MODES}")


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Trainer log-probs: log p at the sampled token and at the head
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def trainer_logprobs(model, ro: Rollout, temperature: float, full: bool = False):
    """Trainer log-probs at the sampling temperature: (logp (B, T), logp_head (B, T, k)), with grad;
    with full=True also the whole vocabulary's log p (B, T, V), detached, for measurements.

    log p(v) = z_v / T − logsumexp(z / T) at v = y_t and v ∈ H, from the policy's logits z over the
    completion (`logprobs.completion_logits`: each distinct prompt run once, its KV cache shared by
    the rows of its GRPO group; `gather_logprobs`: a chunk of rows at a time).
    """
    logits = completion_logits(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids,
                               ro.completion_mask)  # (B, T, V): row t scores completion token t
    both = torch.cat([ro.completion_ids[..., None], ro.head_ids], dim=-1)  # (B, T, 1 + k)
    lp = gather_logprobs(logits, both, temperature)
    if full:
        return lp[..., 0], lp[..., 1:], torch.log_softmax(logits.detach().float() / temperature, -1)
    return lp[..., 0], lp[..., 1:]


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Measuring the split: drift and signal, exactly over the vocabulary
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def drift_and_signal(full_logq: torch.Tensor, full_logp: torch.Tensor, ids: torch.Tensor,
                     adv: torch.Tensor, mask: torch.Tensor, group_size: int) -> dict:
    """The drift/signal split of the policy-gradient step in logit space, measured exactly over the
    vocabulary (V is small enough here to hold the sampler's and the trainer's full distributions).

    Per generated token the plain step's logit-space score is A (e_y − p) = A (e_y − q) + A (q − p):
    the centered part, whose expectation over y ~ q is the signal Cov_q(A, e_y), and the drift part,
    whose expectation is E_q[A] · (q − p). Inputs: full_logq, full_logp (B, T, V) float32 log q and
    log p at the sampling temperature; ids (B, T) sampled tokens; adv (B,) advantages; mask (B, T);
    rows ordered as consecutive GRPO groups of `group_size`. Returns floats:

    drift_norm   mean over tokens of |A| ‖q − p‖₂: the drift's size per token (its expectation is
                 ‖E_q[A](q − p)‖ when A ≥ 0, raw rewards; an upper bound otherwise)
    drift_first, signal_first  at the first completion token, where the G rollouts of a group share
                 the prefix: unbiased estimates (U-statistics over pairs i ≠ j of the group) of
                 ‖E_q[A] (q − p)‖² and ‖Cov_q(A, e_y)‖², averaged over groups, then the square root
                 (0 where the estimate of the square is negative)
    tv_qp        mean over tokens of ½ ‖q − p‖₁ (total variation), kl_qp  mean of KL(q‖p), exact
    entropy_p, entropy_q  mean over tokens of the trainer's and the sampler's entropy, nats, exact
    """
    q, p, m = full_logq.exp(), full_logp.exp(), mask
    diff = q - p  # (B, T, V)
    A = adv[:, None].expand_as(ids)  # (B, T)
    out = dict(drift_norm=(A.abs() * diff.norm(dim=-1))[m].mean().item(),
               tv_qp=(0.5 * diff.abs().sum(-1))[m].mean().item(),
               kl_qp=(q * (full_logq - full_logp)).sum(-1)[m].mean().item(),
               entropy_p=-(p * full_logp).nan_to_num().sum(-1)[m].mean().item(),
               entropy_q=-(q * full_logq).nan_to_num().sum(-1)[m].mean().item())
    G = group_size
    if G >= 2 and ids.shape[0] % G == 0:
        e_y = torch.zeros_like(q[:, 0]).scatter_(-1, ids[:, :1], 1.0)  # (B, V) first token
        X = (adv[:, None] * (e_y - q[:, 0])).view(-1, G, q.shape[-1])  # signal samples per group
        Y = (adv[:, None] * diff[:, 0]).view(-1, G, q.shape[-1])  # drift samples per group

        def pair_mean_sq(Z):  # Σ_{i≠j} Z_i·Z_j / (G (G − 1)), per group: unbiased ‖E Z‖²
            return ((Z.sum(1).pow(2).sum(-1) - Z.pow(2).sum((1, 2))) / (G * (G - 1))).mean().item()

        out["drift_first"] = math.sqrt(max(0.0, pair_mean_sq(Y)))
        out["signal_first"] = math.sqrt(max(0.0, pair_mean_sq(X)))
    return out


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# One RL step
# ═════════════════════════════════════════════════════════════════════════════════════════════════
@dataclass(frozen=True)
class StepConfig:
    """What one RL step reads. No defaults of its own: the driver builds it from a run's `TrainConfig`
    (`TrainConfig.step_config`), whose fields hold the defaults and checks."""

    group_size: int  # G: completions per prompt (a GRPO group), consecutive in the batch
    advantage_mode: str  # raw | signed | grpo | centered (`compute_advantages`)
    max_new_tokens: int  # completion length budget, tokens
    names_target: int  # distinct Python names that earn the full reward 1.0 (`distinct_names_reward`)
    temperature: float  # sampling temperature T; the trainer divides its logits by the same
    weighting: str  # f(r): none | is | tis | mis | icepop (`importance_weight`)
    centering: bool  # subtract the centering term Σ_H c_v log p(v) (eq. SC)
    tis_cap: float  # C of TIS
    mis_band: tuple  # [lo, hi] of MIS / IcePop
    weight_level: str  # token: f(r) per token · sequence: one GSPO-style f(s_i) per sequence
    max_grad_norm: float  # clip the global gradient norm here; 0: no clipping
    constant_reward: Optional[float]  # every completion earns this (no signal, pure drift); None: the verifier


def rl_step(policy, opt, sampler, tok, prompts: list, cfg: StepConfig, generator: torch.Generator,
            measure: bool = False) -> dict:
    """One RL step: rollout on the sampler → rewards → advantages → trainer log-probs → eq. SC →
    one optimizer step → weight sync to the sampler. The trainer (driver.py) owns the state.

    policy: the trainer's model (float32, updated in place); opt: its optimizer; sampler: any engine
    with `generate(...) -> Rollout` and `push_weights(state_dict)` (torch_sampler.py, vllm_engine.py);
    prompts: B token-id lists, GRPO groups of cfg.group_size consecutive copies; cfg: a `StepConfig`;
    generator: this step's sampling seed; measure: also log the exact drift and signal (needs the
    sampler's full q, `full_logq`: the torch sampler's).
    Returns the step's metrics (docs/api.md, "Metrics"): floats, rewards in [0, 1], KL in nats per token.
    Raises ScrlError on a non-finite loss, before the optimizer step (the policy is untouched).
    """
    eos, pad = tok.eos_token_id, tok.pad_token_id
    # 1. rollout on the sampler (FP8 / bf16, maybe noisy, maybe stale), with this step's seed
    if measure:  # with the sampler's whole q, for the exact drift and signal
        ro = sampler.generate(prompts, cfg.max_new_tokens, eos, pad, generator=generator, full_logq=True)
    else:
        ro = sampler.generate(prompts, cfg.max_new_tokens, eos, pad, generator=generator)
    # 2. rewards from the verifier (task.py), or one constant reward: Cov_q(A, s) = 0, plain's update is E_q[A]·μ
    if cfg.constant_reward is None:
        rewards = task_rewards(tok, ro, cfg.names_target)  # (B,)
    else:
        rewards = torch.full((len(ro.completion_ids),), float(cfg.constant_reward))  # (B,)
    # 3. advantages per mode
    adv = compute_advantages(rewards, cfg.group_size, cfg.advantage_mode)  # (B,)
    # 4. trainer log-probs at the sampling temperature
    policy.train()
    if measure:
        logp, logp_head, full_logp = trainer_logprobs(policy, ro, cfg.temperature, full=True)
    else:
        logp, logp_head = trainer_logprobs(policy, ro, cfg.temperature)
    # 5. the loss: eq. SC per token, its mean over generated tokens
    args = (logp, logp_head, ro.sampler_logp, ro.head_logp, adv, ro.completion_mask)
    f = dict(weighting=cfg.weighting, tis_cap=cfg.tis_cap, mis_band=tuple(cfg.mis_band))  # f(r)
    if cfg.weight_level == "token":
        per_token, d = score_centered_pg_loss(*args, centering=cfg.centering, **f)
    else:  # one GSPO-style weight per sequence, an option of the loss
        per_token, d = score_centered_pg_loss_options(*args, centering=cfg.centering, level=cfg.weight_level, **f)
    loss = reduce_loss(per_token, ro.completion_mask)
    if not torch.isfinite(loss):
        raise ScrlError(f"non-finite loss ({loss.item()})")
    # 6. one optimizer step
    opt.zero_grad(set_to_none=True)
    loss.backward()
    clip = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), clip)
    opt.step()
    # 7. weight sync to the sampler
    sampler.push_weights(policy.state_dict())
    # 8. metrics over generated tokens
    metrics = step_metrics(ro, rewards, adv, loss, grad_norm, d, cfg.mis_band)
    if measure:
        metrics.update(drift_and_signal(ro.full_logq, full_logp, ro.completion_ids, adv, ro.completion_mask,
                                        cfg.group_size))
    return metrics


def step_metrics(ro: Rollout, rewards, adv, loss, grad_norm, d: dict, mis_band) -> dict:
    """The metrics of one step (docs/api.md, "Metrics"), as floats: rewards (B,), advantages (B,), the scalar
    loss and gradient norm, the loss's diag d ((B, T) tensors), over the rollout's generated tokens."""
    m = ro.completion_mask
    lr_y = d["log_ratio"][m]  # log p − log q on sampled tokens
    r = lr_y.exp()
    lo, hi = mis_band
    return dict(
        reward=rewards.mean().item(), reward_std=rewards.std().item(),
        completion_len=m.sum(1).float().mean().item(), loss=loss.item(),
        kl_sampled=(-lr_y).mean().item(),  # k1 estimate of KL(q‖p) on sampled tokens
        kl_k3=(r - 1 - lr_y).mean().item(),  # k3 estimate, ≥ 0
        ratio_mean=r.mean().item(), ratio_min=r.min().item(), ratio_max=r.max().item(),
        ratio_out_of_band=((r < lo) | (r > hi)).float().mean().item(),
        head_mass_q=d["head_mass_q"][m].mean().item(), head_mass_p=d["head_mass_p"][m].mean().item(),
        rho_mean=d["rho"][m].mean().item(),
        rho_at_bound=d["rho_at_bound"][m].mean().item(),  # share of tokens whose ρ is a bound
        grad_norm=grad_norm.item(),
        adv_mean=adv.mean().item(),
    )


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Loss options, off the main path (docs/method.md, "Options of the loss")
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def score_centered_pg_loss_options(logp, logp_head, sampler_logp, sampler_logp_head, advantages, mask, *,
                                   weighting: str = WEIGHTING, centering: bool = True, tis_cap: float = TIS_CAP,
                                   mis_band: tuple = MIS_BAND, level: str = "token",
                                   exact_support: bool = False, old_logp=None, old_logp_head=None,
                                   ppo_clip: tuple = (0.2, 0.2), tail_tol: Optional[float] = None):
    """`score_centered_pg_loss` with its options (no notebook or trainer here uses them; TRL-style
    trainers and other samplers do). Arguments and returns as there, plus:

      level:          "token" (the table) · "sequence" (GSPO-style): one weight f(s_i) per sequence,
                      s_i = exp(mean_t log r_t) over its masked tokens, that multiplies the whole
                      per-token score, centering included; the centering coefficients are then
                      unweighted, c_v = q_v − ρ p_v
      exact_support:  the sampler drew from H itself (top-k/top-p filtering, or a head holding all the
                      mass): sampler_logp_head is normalized over H (Σ_H q = 1, checked), the trainer is
                      renormalized over H, p̃_v = p_v / Σ_H p, and centering is exact over H (ρ = 0). The
                      sampled token must be in H (`validate_rollout(..., exact_support=True)` checks it)
      old_logp, old_logp_head: (B, T), (B, T, k) trainer log-probs when the rollout was taken (PPO's
                      proximal policy). Given together, they turn on PPO-style clipping: π = p/p_old per
                      token (per sequence at level="sequence", as in GSPO), a token whose surrogate
                      min(πA, clip(π, 1−ε_lo, 1+ε_hi)A) is on its clipped branch carries no gradient, and
                      the others are scaled by π, centering included; the importance weights and the
                      coefficients then use p_old (decoupled PPO). With old = current (π = 1) the loss
                      equals the unclipped one
      ppo_clip:       (ε_lo, ε_hi) of the PPO clip, used only with old_logp
      tail_tol:       a sampler tail 1 − Σ_H q at or below this is zero (ρ = 0); default `tail_rounding`
    diag adds, with old_logp, ppo_ratio π and clipped (1.0 where the clip removed the token's gradient);
    its weight is then the total factor on the sampled token's score. Raises ScrlError as the main path,
    and with exact_support on a head whose sampler mass is not 1 or has no valid slot.
    """
    if (old_logp is None) != (old_logp_head is None):
        raise ScrlError("old_logp and old_logp_head go together (PPO clipping needs both)")
    if level not in LEVELS:
        raise ScrlError(f"unknown level {level!r}; choose one of {LEVELS}")
    mask = _check_loss_inputs(logp, logp_head, sampler_logp, sampler_logp_head, mask, weighting,
                              needs_head=centering or exact_support,
                              extra=[("old_logp", old_logp, mask.shape),
                                     ("old_logp_head", old_logp_head, logp_head.shape)])
    A = torch.where(mask, _per_token(advantages, *mask.shape).detach().float(), 0.0)  # sg(A)
    old = old_logp is not None
    lp_y, lp_cur = logp.float(), logp_head.float()  # the tensors that carry gradient
    # sg(log p): the policy inside weights and coefficients (p_old when PPO clipping is on)
    lp_ref_y = (old_logp if old else logp).detach().float()  # (B, T)
    lp_ref = (old_logp_head if old else logp_head).detach().float()  # (B, T, k)
    if exact_support:  # the sampler drew from H: p̃ = p / Σ_H p everywhere, ρ = 0
        lp_cur, lp_y, lp_ref, lp_ref_y = _renormalize_over_head(sampler_logp_head, mask, lp_cur, lp_y,
                                                                 lp_ref, lp_ref_y)
        tail_tol = math.inf
    log_ratio = torch.where(mask, (lp_ref_y - sampler_logp.float()).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO),
                            0.0)  # (B, T)
    # w_y = f(r_y) per token; or, at level="sequence", outer = f(s_i) on the whole score and w_y = 1
    w_y, outer, head_weighting = _token_or_sequence_weight(log_ratio, mask, weighting, level,
                                                           tis_cap, mis_band)
    if old:  # PPO: outer ← π · outer, or 0 where the clip flattens the surrogate (π = p / p_old)
        outer, pi, clipped = _ppo_clip(outer, A, lp_y, lp_ref_y, mask, level, ppo_clip)
    c, diag = centering_coefficients(lp_ref, sampler_logp_head, mask, head_weighting, tis_cap, mis_band,
                                     tail_tol)
    bracket = w_y * lp_y
    if centering:
        bracket = bracket - _head_sum(c, lp_cur, sampler_logp_head, mask)
    # ℓ_t = −sg(A_t) · sg(outer) · [ sg(w_y) log p(y_t) − Σ_H sg(c_v) log p(v) ]
    loss = torch.where(mask, -A * outer * bracket, 0.0)
    diag = dict(weight=(w_y * outer).detach(), log_ratio=log_ratio, **diag)
    if old:
        diag.update(ppo_ratio=pi.detach(), clipped=clipped.float())
    return loss, diag


def _renormalize_over_head(sampler_logp_head, mask, *log_probs):
    """exact_support: check Σ_H q = 1, then log p̃ = log p − logsumexp_H log p for each pair
    (head (B, T, k), sampled (B, T)) of trainer log-probs; rows with no valid slot get 0."""
    valid = sampler_logp_head > EMPTY_LOGP
    head_q = torch.where(valid, sampler_logp_head.float().exp(), 0.0).sum(-1)
    bad = mask & ((head_q - 1.0).abs() > 1e-3)
    if bad.any():
        raise ScrlError(f"exact_support needs the sampler head to hold all the mass, but Σ_H q = "
                        f"{head_q[bad][0].item():.4f} at {_first_bad(bad)}")
    out = []
    for lp_h, lp_s in zip(log_probs[0::2], log_probs[1::2]):
        lse = torch.logsumexp(torch.where(valid, lp_h, -torch.inf), -1)  # (B, T)
        lse = torch.where(torch.isfinite(lse), lse, 0.0)
        out += [torch.where(valid, lp_h - lse[..., None], torch.zeros_like(lp_h)), lp_s - lse]
    return out


def _token_or_sequence_weight(log_ratio, mask, weighting, level, tis_cap, mis_band):
    """(w_y (B, T), outer (B, T), the weighting the head coefficients use). Token level: w_y = f(r_y),
    outer = 1. Sequence level (GSPO-style): outer = f(s_i), s_i = exp(mean_t log r_t), w_y = 1, and
    the head coefficients are unweighted (c_v = q_v − ρ p_v)."""
    if level == "token":
        w_y = importance_weight(log_ratio, weighting, tis_cap, mis_band)
        return w_y, torch.ones_like(w_y), weighting
    B, T = log_ratio.shape
    seq_lr = log_ratio.sum(-1) / mask.sum(-1).clamp(min=1)  # (B,) mean log r over the sequence
    outer = importance_weight(seq_lr, weighting, tis_cap, mis_band)[:, None].expand(B, T)
    return torch.ones_like(outer), outer, "none"


def _ppo_clip(outer, A, lp_y, lp_ref_y, mask, level, ppo_clip):
    """Decoupled PPO clip: π = p / p_old per token (per sequence, GSPO, at level="sequence"). Where
    min(πA, clip(π, 1−ε_lo, 1+ε_hi)A) takes its flat branch the token carries no gradient; elsewhere
    outer is scaled by π. Returns (outer, π, clipped) as (B, T) tensors."""
    B, T = lp_y.shape
    log_pi = torch.where(mask, lp_y.detach() - lp_ref_y, 0.0).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    if level == "sequence":
        log_pi = (log_pi.sum(-1) / mask.sum(-1).clamp(min=1))[:, None].expand(B, T)
    pi = log_pi.exp()
    lo, hi = ppo_clip
    clipped = ((A > 0) & (pi > 1 + hi)) | ((A < 0) & (pi < 1 - lo))
    return torch.where(clipped, 0.0, outer * pi), pi, clipped


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Input checks, kept out of the method's way: the rollout contract, the loss's inputs
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def validate_rollout(ro: Rollout, vocab_size: int, exact_support: bool = False) -> None:
    """Check the sampler contract; raise RolloutError naming the first bad (sequence, position).

    Checks: ids inside [0, V); the sampled token's log-prob present (finite, not the -9999 stand-in),
    not NaN, <= 0 (rounding tolerance 1e-4); head log-probs not NaN, <= 0; no id twice in a head
    row; exactly min(k, V) valid head entries (k = head_ids.shape[-1], the size the engine was asked
    for; a log-prob at or below -9000 or -inf is an empty slot), or with exact_support at least one
    (a filtered support may be smaller than k); the sampled token's log-prob equal to its head
    entry's when it is in the head (within SAME_LOGP_TOL: one id, one log-prob); head mass
    Σ_H q <= 1 + 1e-3; with exact_support (the sampler drew from its head only), the sampled token is
    in its head row. Only generated positions (completion_mask) are checked.
    """
    m = ro.completion_mask
    k = ro.head_ids.shape[-1]

    def first(bad: torch.Tensor, what) -> None:  # what: a str, or (b, t) → str
        if bad.any():
            b, t = bad.nonzero()[0].tolist()[:2]
            what = what(b, t) if callable(what) else what
            raise RolloutError(f"rollout: {what} at sequence {b}, completion position {t}")

    first(m & ((ro.completion_ids < 0) | (ro.completion_ids >= vocab_size)), "sampled id outside "
          f"the vocabulary [0, {vocab_size})")
    first(m & torch.isnan(ro.sampler_logp), "NaN sampler log-prob")
    first(m & (~torch.isfinite(ro.sampler_logp) | (ro.sampler_logp <= EMPTY_LOGP)),
          "missing (non-finite or stand-in) sampler log-prob of the sampled token")
    first(m & (ro.sampler_logp > 1e-4), "positive sampler log-prob")
    valid = ro.head_logp > EMPTY_LOGP
    first(m & torch.isnan(ro.head_logp).any(-1), "NaN in the sampler's top-k log-probs")
    first(m & (valid & ((ro.head_ids < 0) | (ro.head_ids >= vocab_size))).any(-1),
          f"head id outside the vocabulary [0, {vocab_size})")
    first(m & (valid & (ro.head_logp > 1e-4)).any(-1), "positive log-prob in the sampler's head")
    first(m & _repeated_ids(ro.head_ids, valid, vocab_size), "duplicated id in the sampler's head")
    # exactly min(k, V) valid entries: a shorter head would be centered as if it were the asked one
    n_valid = valid.sum(-1)  # (B, T)
    need = torch.ones_like(n_valid) if exact_support else torch.full_like(n_valid, min(k, vocab_size))
    first(m & (n_valid == 0), "empty sampler head (no valid top-k log-prob: did the engine return an "
          "empty top-k list?)")
    first(m & (n_valid < need), lambda b, t: f"short sampler head: k={k} asked, {int(n_valid[b, t])} "
          f"valid, the rest empty (the engine capped or padded its log-probs: raise its "
          f"max_logprobs to >= {k})")
    head_mass = torch.where(valid, ro.head_logp.exp(), torch.zeros_like(ro.head_logp)).sum(-1)
    first(m & (head_mass > 1 + 1e-3), "sampler head mass above 1")
    # one id, one log-prob: the sampled token's log q again in its head entry
    y_at = valid & (ro.head_ids == ro.completion_ids[..., None])  # (B, T, k)
    y_lp = ro.sampler_logp[..., None]
    off = (ro.head_logp - y_lp).abs() > SAME_LOGP_TOL * y_lp.abs().clamp(min=1.0)
    first(m & (y_at & off).any(-1), lambda b, t: f"the sampled token's log-prob "
          f"{ro.sampler_logp[b, t].item():.7g} differs from its head entry's "
          f"{ro.head_logp[b, t][y_at[b, t]].item():.7g} (one id, two log-probs)")
    if exact_support:
        first(m & ~y_at.any(-1), "sampled token outside the sampler's head (exact_support)")


def _repeated_ids(ids: torch.Tensor, valid: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(..., k) ids and valid slots → (...) bool: the row names an id of [0, V) in two valid slots. One sort of the
    flat keys row · (V + k) + id (an empty or out-of-range slot j keyed V + j, so it repeats nothing), in int32 where
    the keys fit: about 3x faster than sorting each row on the CPUs measured."""
    k = ids.shape[-1]
    rows, width = math.prod(ids.shape[:-1]), vocab_size + k
    if k < 2:  # no two slots to repeat an id (k = 0: an empty head, refused by the caller's own check)
        return torch.zeros(ids.shape[:-1], dtype=torch.bool, device=ids.device)
    slot = torch.arange(k, device=ids.device)
    key = torch.where(valid & (ids >= 0) & (ids < vocab_size), ids, vocab_size + slot).reshape(rows, k)
    key = (key + torch.arange(rows, device=ids.device)[:, None] * width).reshape(-1)
    srt = key.to(_index_dtype(rows * width)).sort().values
    twice = srt[1:] == srt[:-1]
    out = torch.zeros(rows, dtype=torch.bool, device=ids.device)
    out[srt[1:][twice].long() // width] = True
    return out.view(ids.shape[:-1])


def _per_token(advantages, B: int, T: int):
    """Advantages (B,) or (B, T) as (B, T) (a view); raises ScrlError for another shape."""
    A = advantages[:, None] if advantages.dim() == 1 and advantages.shape[0] == B else advantages
    if not (A.dim() == 2 and A.shape[0] == B and A.shape[1] in (1, T)):
        raise ScrlError(f"advantages has shape {tuple(advantages.shape)}, expected ({B},) or ({B}, {T})")
    return A.expand(B, T)


def _check_loss_inputs(logp, logp_head, sampler_logp, sampler_logp_head, mask, weighting, needs_head,
                       extra=()):
    """Shapes, names, and the sampler's values at loss-carrying positions (a non-finite log q(y_t),
    a NaN head slot; with needs_head, a head with no valid slot): raises ScrlError naming the first.
    extra: more (name, tensor or None, expected shape) to check. Returns mask as (B, T) bool."""
    if logp.dim() != 2:
        raise ScrlError(f"logp has shape {tuple(logp.shape)}, expected (B, T)")
    B, T = logp.shape
    if logp_head.dim() != 3 or logp_head.shape[:2] != (B, T):
        raise ScrlError(f"logp_head has shape {tuple(logp_head.shape)}, expected ({B}, {T}, k)")
    for name, x, shape in [("sampler_logp", sampler_logp, (B, T)),
                           ("sampler_logp_head", sampler_logp_head, logp_head.shape),
                           ("mask", mask, (B, T)), *extra]:
        if x is not None and tuple(x.shape) != tuple(shape):
            raise ScrlError(f"{name} has shape {tuple(x.shape)}, expected {tuple(shape)}")
    if weighting not in WEIGHTINGS:
        raise ScrlError(f"unknown weighting {weighting!r}; choose one of {WEIGHTINGS}")
    mask = mask.bool()
    bad = mask & ~torch.isfinite(sampler_logp)  # NaN, ±inf: a broken row would become a weight
    if bad.any():
        b, t = bad.nonzero()[0].tolist()
        raise ScrlError(f"sampler_logp = {sampler_logp[b, t].item()} (log q of the sampled token) at "
                        f"{_first_bad(bad)}, a loss-carrying position: a broken sampler row "
                        f"(validate_rollout refuses it)")
    return _check_head(logp_head, sampler_logp_head, mask, needs_head)


def _check_head(logp_head, sampler_logp_head, mask, needs_head):
    """At loss-carrying positions: no NaN in the sampler head (−inf / <= EMPTY_LOGP slots are legal), and
    with needs_head at least one valid slot (else the token cannot be centered). Returns mask."""
    if tuple(sampler_logp_head.shape) != tuple(logp_head.shape):
        raise ScrlError(f"sampler_logp_head has shape {tuple(sampler_logp_head.shape)}, expected "
                        f"{tuple(logp_head.shape)}")
    bad = mask & torch.isnan(sampler_logp_head).any(-1)
    if bad.any():
        raise ScrlError(f"NaN in sampler_logp_head at {_first_bad(bad)}, a loss-carrying position: a "
                        f"broken sampler row (validate_rollout refuses it); an empty head slot is −inf "
                        f"or <= {EMPTY_LOGP:g}, never NaN")
    if needs_head:
        empty = mask & ~(sampler_logp_head > EMPTY_LOGP).any(-1)
        if empty.any():
            raise ScrlError(f"empty sampler head (no slot above {EMPTY_LOGP:g}) at "
                            f"{_first_bad(empty)}, a loss-carrying position: the token cannot be "
                            f"centered (did the engine return an empty top-k list?)")
    return mask


def _first_bad(bad: torch.Tensor) -> str:
    """'sequence b, position t' of the first True in a (B, T) bool tensor."""
    b, t = bad.nonzero()[0].tolist()[:2]
    return f"sequence {b}, position {t}"
