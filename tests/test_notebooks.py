"""Notebooks: house rules, the parameters-file check, and a headless smoke run of every notebook."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from scrl_min.core import PROBE_TOL

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
RUNNER = [sys.executable, str(REPO / "scripts" / "run_notebooks.py")]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_house_rules(path):
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one parameters cell"
    for line in tagged[0].source.splitlines():
        if "=" in line.split("#")[0]:
            assert "  # " in line, f"parameter without a trailing comment: {line!r}"
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "!pip" not in code and "%pip" not in code and "from_pretrained(\"Qwen" not in code
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit notebooks clean"
    assert nb.cells[0].cell_type == "markdown" and "CPU" in nb.cells[0].source  # states hardware + time


def test_ci_parameters_name_real_parameters():
    table = yaml.safe_load((REPO / "notebooks" / "ci_parameters.yaml").read_text())
    sys.path.insert(0, str(REPO / "scripts"))
    import run_notebooks

    for stem, params in table.items():
        run_notebooks.check_parameters(REPO / "notebooks" / f"{stem}.ipynb", params)


def test_misspelled_parameter_fails_before_anything_runs(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("02_fp8_arms:\n  step: 3\n")
    r = subprocess.run(RUNNER + ["--params", str(bad), "--out-dir", str(tmp_path / "out")],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode != 0
    assert "unknown parameter(s) ['step']" in r.stderr + r.stdout
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    bad.write_text("99_nope:\n  steps: 3\n")
    r = subprocess.run(RUNNER + ["--params", str(bad)], capture_output=True, text=True, cwd=REPO)
    assert r.returncode != 0 and "unknown notebook(s) ['99_nope']" in r.stderr + r.stdout


@pytest.mark.slow
def test_all_notebooks_run_headlessly_with_ci_parameters(tmp_path):
    shutil.rmtree(REPO / "runs" / "ci", ignore_errors=True)
    r = subprocess.run(RUNNER + ["--params", str(REPO / "notebooks" / "ci_parameters.yaml"),
                                 "--out-dir", str(tmp_path)], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    figs = REPO / "runs" / "ci" / "figures"
    for path in NOTEBOOKS:
        assert (tmp_path / path.name).exists()
        pngs = sorted(figs.glob(f"{path.stem[:3]}*.png"))  # figures are named NN_...
        assert pngs and all(p.stat().st_size > 10_000 for p in pngs), f"{path.stem}: no figure"
        for png in pngs:  # the numbers behind each figure, saved beside it
            assert json.loads(png.with_suffix(".json").read_text())
    final = json.loads((figs / "02_fp8_arms.json").read_text())["final"]
    assert {"raw, σ=0.1/bf16", "raw, σ=0.1/sc", "grpo, σ=0.1/plain", "raw, FP8 only (σ=0)/sc"} <= set(final)
    topk = json.loads((figs / "03_topk_estimator.json").read_text())
    for name, res in topk["settings"].items():  # k = V is always measured last: the estimator is exact there
        by_k = res["by_k"]
        assert by_k["k"][-1] == topk["vocab_size"], name
        assert by_k["rel_err_l1_mean"][-1] < 1e-9 and by_k["param_rel_err"][-1] < 1e-6, name
        assert abs(by_k["head_mass_mean"][-1] - 1) < 1e-9, name
        assert all(0 < e for e in by_k["rel_err_l1_mean"][:-1]), f"{name}: a truncated head is not exact"
    # 04: mean |log p − log q| per sampler. torch bf16 is the trainer up to float32 round-off (bf16
    # checkpoint, float32 compute; measured ≤ 1e-6); FP8 and then weight noise add real mismatch; vLLM
    # bf16 is bf16 rounding: far above torch bf16, inside its push verification's allowance, below FP8
    # (by 2.3x to 5x over seeds 0-3 at the CI size). vLLM numerics not run must say why.
    mm = json.loads((figs / "04_sampler_mismatch.json").read_text())
    assert {"vLLM bf16", "vLLM fp8_kv", "vLLM fp8"} <= set(mm["samplers"]) | set(mm["not_measured"])
    assert all(mm["not_measured"].values())
    assert ("vLLM fp8_kv" in mm["samplers"]) == (mm["hardware"]["avx512_or_amx"]
                                                 or mm["hardware"]["vllm_platform"] == "gpu")
    for T in mm["parameters"]["temperatures"]:
        err = {name: s["by_temperature"][f"{T:g}"]["abs_dlogp_mean"] for name, s in mm["samplers"].items()}
        noisy = next(name for name in err if name.startswith("torch fp8 + σ"))
        assert err["torch bf16"] < 1e-5, err
        assert 100 * err["torch bf16"] < err["torch fp8"] < err[noisy], err
        assert 100 * err["torch bf16"] < err["vLLM bf16"] < min(PROBE_TOL["bf16"], err["torch fp8"]), err
