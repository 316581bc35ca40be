"""An AVX2-only x86 CPU, as torch's Python-side checks see it: for timing `make test` on a CPU with AVX-512.

Python imports this at start-up when its folder is on PYTHONPATH, in every process (pytest's workers, papermill's
kernels, vLLM's engine). It makes torch.cpu's AVX-512, AVX-512-BF16, VNNI and AMX checks answer False, so vLLM loads
its `_C_AVX2` kernels and `scrl_min.driver.cpu_record` reports "avx2" (`torch.cpu.get_capabilities()` is left as it
is: neither reads it). Environment variables make torch's ATen kernels, oneDNN and MKL choose their AVX2 code
(docs/development.md, "Timings"):

    PYTHONPATH=$PWD/scripts/avx2_emulation ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 \\
        MKL_ENABLE_INSTRUCTIONS=AVX2 make test

What it changes is which kernels torch, oneDNN, MKL and vLLM choose. It does not pin numpy's own dispatch or its
OpenBLAS, and it does not emulate another CPU's cores, clocks, caches or memory. A torch without one of the checks
below stops it at import, naming the check.
"""
import sys


class _TorchCpuAsAVX2:
    """A meta-path finder that runs `torch.cpu` as usual, then replaces its ISA checks."""

    CHECKS = ("_is_avx512_supported", "_is_avx512_bf16_supported", "_is_vnni_supported", "_is_amx_tile_supported",
              "_is_amx_fp16_supported")

    def find_spec(self, name, path, target=None):
        if name != "torch.cpu":
            return None
        spec = next((s for s in (f.find_spec(name, path, target) for f in sys.meta_path
                                 if f is not self and hasattr(f, "find_spec")) if s is not None), None)
        if spec is None:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            for check in self.CHECKS:
                if not hasattr(module, check):
                    raise ImportError(f"avx2_emulation: torch.cpu has no {check} in this torch; update CHECKS")
                setattr(module, check, lambda: False)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _TorchCpuAsAVX2())
