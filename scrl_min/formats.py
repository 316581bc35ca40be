"""Quantized numerics of a mismatched sampler: FP8, int8 and int4 formats of the decoder Linears
(`FORMATS`, `quantize`, `QuantLinear`) and the FP8 KV cache (`fp8_kv_cache`).

These rounding errors are what make the sampler's q differ from the trainer's p. Nothing in `core.py`
depends on this file; it changes when a format or a kernel's rounding does. The samplers
(`torch_sampler.py`, `vllm_engine.py`) use it.

Reading order: the grids and `FORMATS` · `quantize`, `dequantize` · `QuantLinear` · the FP8 KV cache
(`fp8_kv_round`, `fp8_kv_cache`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn

from .core import ScrlError

# sampler numerics: fp32 and bf16, and the quantized formats of the decoder Linears (`FORMATS`)
PRECISIONS = ("fp32", "bf16", "fp8", "fp8_e5m2", "int8", "int8_w8a8", "int4_g128", "int4_g32")
KV_CACHES = ("auto", "fp8_e4m3")  # the torch sampler's KV cache: float32, or FP8 as vLLM's (`fp8_kv_cache`)
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
    CPUs without FP8 instructions (about 4 ns an element on an Intel Xeon with AMX), so float8 codes are
    looked up in a 256-entry table of every bit pattern's value instead: the same numbers, 2-3x faster."""
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
