"""The torch sampler: the policy itself as a rollout engine, with quantized decoder Linears
(`formats.py`), optional persistent weight noise σ and staleness s. It produces the input of the method
in `core.py`: a validated `Rollout` (completions, the sampler's log-prob of each sampled token, its
top-k head).

Reading order: `_WeightQueue` (weight sync shared with the vLLM sampler: staleness, its schedule, and noise) ·
`TorchSampler` (`push_weights`, `generate`).
"""
from __future__ import annotations

import copy
from collections import deque
from typing import Optional

import torch
import torch.nn as nn

from .core import Rollout, RolloutError, ScrlError, validate_rollout
from .formats import (FORMATS, FP8_BACKEND, FP8_GRIDS, KV_CACHES, PRECISIONS, QuantLinear, fp8_kv_cache,
                      reserved_kv_cache)
from .logprobs import _distinct_rows


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The torch sampler
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


STALENESS_SCHEDULES = ("constant", "refresh")  # how a stale sampler's weights lag the trainer's


class _WeightQueue:
    """Weight sync shared by the samplers: staleness s, on one of two schedules, and persistent
    relative weight noise σ (drawn once at the first push). Subclasses implement `_load(state_dict)`,
    which receives the stale, noisy weights.

    Push n carries the trainer's weights θ_n after n updates (push 0: the starting weights), and the
    step after push n samples with the weights the queue loaded:
      constant: θ_{max(0, n − s)}: the sampler always holds the weights of s pushes ago (lag s);
      refresh:  θ_{(s + 1)·⌊n / (s + 1)⌋}: its weights are refreshed every s + 1 pushes, so the lag
                cycles 0, 1, ..., s (the article's "staleness s"; its mean lag is s / 2).
    Either way the queue holds the pushes from the loaded one on (at most s + 1), and its first entry
    is the one loaded, so `queue_state` / `restore_queue` resume a run mid-cycle exactly."""

    def _init_queue(self, staleness: int, noise_std: float, seed: int, schedule: str = "constant") -> None:
        if staleness < 0:
            raise ScrlError(f"staleness must be >= 0, got {staleness}")
        if noise_std < 0:
            raise ScrlError(f"noise_std must be >= 0, got {noise_std}")
        if schedule not in STALENESS_SCHEDULES:
            raise ScrlError(f"unknown staleness schedule {schedule!r}; choose one of {STALENESS_SCHEDULES}")
        self.noise_std, self.staleness, self.seed = noise_std, staleness, seed
        self.staleness_schedule = schedule
        self._queue = deque(maxlen=staleness + 1)  # weights pushed, oldest (the loaded one) first
        self._noise = None

    def push_weights(self, state_dict: dict) -> None:
        """Receive the trainer's weights; load the ones the schedule gives (class docstring)."""
        refresh = self.staleness_schedule == "refresh" and len(self._queue) == self._queue.maxlen
        if refresh:  # s + 1 pushes since the last refresh: this push is the next one
            self._queue.clear()
        self._queue.append({k: v.detach().to("cpu", torch.float32, copy=True)
                            for k, v in state_dict.items()})
        if self.staleness_schedule == "constant" or len(self._queue) == 1:
            self._load(self._noisy(self._queue[0]))

    def queue_state(self) -> list:
        """The pushed weights still held (for checkpointing a stale sampler): the loaded ones first."""
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
    and staleness s (weights lag by s pushes; staleness_schedule "constant" or "refresh", see
    `_WeightQueue`).

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
                 fp8_backend: str = FP8_BACKEND, kv_cache: str = "auto", staleness_schedule: str = "constant"):
        from transformers import AutoModelForCausalLM

        if precision not in PRECISIONS:
            raise ScrlError(f"unknown sampler precision {precision!r}; choose one of {PRECISIONS}")
        if kv_cache not in KV_CACHES:
            raise ScrlError(f"unknown kv_cache {kv_cache!r}; choose one of {KV_CACHES}")
        if k < 1 or k > config.vocab_size:
            raise ScrlError(f"head size k={k} must be in [1, vocab size {config.vocab_size}]")
        if temperature <= 0:
            raise ScrlError(f"temperature must be > 0, got {temperature}")
        self._init_queue(staleness, noise_std, seed, staleness_schedule)
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
        B = len(prompts)
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
