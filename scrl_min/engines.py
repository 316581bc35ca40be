"""Compatibility names for `scrl_min/trl.py` only, until its imports follow the split of engines.py into
`formats.py` (quantized formats, FP8 KV cache), `torch_sampler.py` and `vllm_engine.py`. Import from
those files (or from `scrl_min`); this file goes when trl.py no longer imports it.
"""
from .vllm_engine import PROBE_TEXT, _build_llm, _import_vllm, check_probe, probe_stats  # noqa: F401
