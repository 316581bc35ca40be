"""Score centering in TRL: `ScoreCenteringConfig` (a GRPOConfig) and `ScoreCenteringGRPOTrainer` (a GRPOTrainer).

The trainer keeps TRL's loss and adds the centering term of eq. SC (core.py) to it:

    loss = TRL's loss  +  reduce_like_TRL( −sg(A_t) · [ − Σ_{v∈H} sg(c_v) · log p(v) ] )

so TRL's policy-gradient term −A_t · sg(w_t) · log p(y_t) (with TRL's importance weight w_t) and the centering
term together have the gradient of `score_centered_pg_loss`, reduced like TRL's term for each `loss_type`.
Generation runs on the project's `TorchSampler` (FP8 emulated, persistent weight noise σ: a mismatched
sampler on CPU, no vLLM), which returns each token's sampler log-prob and its top-k head H.

TRL extension points used (trl==1.16.0, trl/trainer/grpo_trainer.py):
  `_generate_single_turn`            generation backend: TorchSampler → completion ids + sampler log-probs
  `_generate_and_score_completions`  adds the sampler's top-k head (ids, log q) to the batch TRL buffers
  `_compute_loss`                    TRL's loss + the centering term; metrics into `self._metrics`
TRL computes and applies its importance-sampling ratio only `if self.use_vllm and
self.vllm_importance_sampling_correction` (grpo_trainer.py lines 2644, 2660, 2860, 2908, 3146), so the trainer
sets `use_vllm = True` after TRL's __init__: it reads "a separate sampler" there, and every other `use_vllm`
branch (vLLM generation and weight sync, tools, rollout_func) is overridden or refused here.

This module imports TRL at the top; `import scrl_min` does not import it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from trl import GRPOConfig, GRPOTrainer

from .core import (ScrlError, TorchSampler, distinct_names_reward, lm_head_logprobs, reduce_loss,
                   score_centered_pg_loss)

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

    score_centering: bool = field(default=True, metadata={"help": "Add the score-centering term to the loss."})
    score_centering_top_k: int = field(default=128, metadata={
        "help": "Head size k: top-k sampler log-probs per generated token (min(k, vocab size) are used)."})
    sampler_precision: str = field(default="fp8", metadata={"help": "TorchSampler numerics: one of scrl_min.PRECISIONS."})
    sampler_noise_std: float = field(default=0.1, metadata={
        "help": "σ: persistent relative weight noise on the sampler (the mismatch knob); 0 turns it off."})
    sampler_fp8_backend: str = field(default="emulated", metadata={"help": "FP8 GEMMs: emulated | scaled_mm."})


def distinct_names_reward_func(completions, target: int = 12, **kwargs) -> list:
    """TRL reward function for the task (`distinct_names_reward`); completions as text or chat messages."""
    return [distinct_names_reward(c[-1]["content"] if isinstance(c, list) else c, target) for c in completions]


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
                      or self.environment_factories is not None}
        bad = [what for what, is_set in refuse.items() if is_set]
        if bad:
            raise ScrlError(f"ScoreCenteringGRPOTrainer does not support: {'; '.join(bad)}")
        self._is_setting()  # raises on an IS setting outside the weighting table
        model = self.accelerator.unwrap_model(self.model)
        self.sampler = TorchSampler(model.config, precision=a.sampler_precision,
                                    k=min(a.score_centering_top_k, model.config.vocab_size),
                                    temperature=self.temperature, noise_std=a.sampler_noise_std, seed=a.seed,
                                    fp8_backend=a.sampler_fp8_backend)
        self._sampler_generator = torch.Generator().manual_seed(a.seed)
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
        loss_in = (lp[..., 0], lp[..., 1:], inputs["sampling_per_token_logps"], inputs["sampler_head_logp"],
                   inputs["advantages"], mask)
        centered, diag = score_centered_pg_loss(*loss_in, centering=True, **kw)
        plain, _ = score_centered_pg_loss(*loss_in, centering=False, **kw)
        per_token = centered - plain  # −sg(A_t) · [ −Σ_H sg(c_v) log p(v) ]: the centering term alone, (B, T)
        if sequence_level:  # TRL's sequence ratio (B, 1) multiplies its whole per-token loss: centering too
            per_token = per_token * inputs["importance_sampling_ratio"]
        term = self._reduce_like_trl(per_token, mask, inputs)
        self._log_centering(term, diag, mask)
        return loss + term if self.args.score_centering else loss

    def _reduce_like_trl(self, per_token, mask, inputs):
        """Scalar from a (B, T) per-token loss, normalized as GRPOTrainer._compute_loss normalizes its policy
        term for `self.loss_type` (accumulation scaling included)."""
        train = self.model.training
        ga = self.current_gradient_accumulation_steps if train else 1.0
        B = per_token.shape[0]
        if self.loss_type == "grpo":  # mean over sequences of their token mean
            return reduce_loss(per_token, mask, "seq_mean") / ga
        if self.loss_type == "bnpo":  # token mean over the micro-batch
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
