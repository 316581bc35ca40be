"""JupyterLab as `make lab` starts it, headless: the contents manager JupyterLab saves through (jupytext's, over
jupyter_server's), rooted at a copy of the repository layout, with make lab's pre-save hook.

Opening either file of a pair shows the outputs, saving either writes both, an edit made through one survives a
later save of the other, and a notebook saved with new outputs drops its `make reproduce` record. What needs a
browser (JupyterLab's own dialogs, autosave) is not covered here."""
import asyncio
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import run_notebooks  # noqa: E402

STEM = "01_signal_and_drift"


def test_make_lab_roots_jupyterlab_at_the_repository_with_the_hook():
    make = (REPO / "Makefile").read_text()
    line = next(l for l in make.splitlines() if "jupyter lab" in l and not l.startswith("#"))
    assert "notebooks" not in line.split("jupyter lab", 1)[1], "JupyterLab must start at the repository root"
    assert "--config=scripts/jupyter_lab_config.py" in line
    conf = (REPO / "scripts" / "jupyter_lab_config.py").read_text()
    assert "pre_save_hook = drop_stale_provenance" in conf


@pytest.fixture
def lab(tmp_path):
    from jupytext import AsyncTextFileContentsManager

    (tmp_path / "notebooks").mkdir()
    shutil.copy(REPO / "jupytext.toml", tmp_path)
    for ext in (".ipynb", ".py"):
        shutil.copy(REPO / "notebooks" / f"{STEM}{ext}", tmp_path / "notebooks")
    cm = AsyncTextFileContentsManager(root_dir=str(tmp_path))
    cm.pre_save_hook = run_notebooks.drop_stale_provenance
    return cm, tmp_path


def run(coro):
    return asyncio.run(coro)


def test_either_file_of_a_pair_opens_with_outputs_and_saves_both(lab):
    cm, root = lab
    ipynb, py = f"notebooks/{STEM}.ipynb", f"notebooks/{STEM}.py"
    model = run(cm.get(py, type="notebook"))  # "Open With → Jupytext Notebook" on the .py
    nb = model["content"]
    assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "the .py opened without outputs"
    sha = nb.metadata["scrl_min_run"]["outputs_sha256"]
    first_md = next(c for c in nb.cells if c.cell_type == "markdown")
    first_md.source += "\n\nAn edit made in the .py tab."
    run(cm.save(dict(type="notebook", content=nb), py))
    on_disk = nbformat.read(root / ipynb, as_version=4)
    assert "An edit made in the .py tab." in (root / py).read_text()
    assert any("An edit made in the .py tab." in c.source for c in on_disk.cells), "the .ipynb missed the edit"
    assert on_disk.metadata["scrl_min_run"]["outputs_sha256"] == sha, "same outputs: the record stays"
    assert any(c.get("outputs") for c in on_disk.cells if c.cell_type == "code"), "saving the .py lost the outputs"

    model = run(cm.get(ipynb, type="notebook"))  # then the .ipynb tab: run a cell, save
    nb = model["content"]
    assert any("An edit made in the .py tab." in c.source for c in nb.cells)
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.get("outputs"))
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="a new output\n")]
    run(cm.save(dict(type="notebook", content=nb), ipynb))
    on_disk = nbformat.read(root / ipynb, as_version=4)
    assert "An edit made in the .py tab." in (root / py).read_text(), "saving the .ipynb lost the .py edit"
    assert "scrl_min_run" not in on_disk.metadata, "new outputs still claim `make reproduce` made them"
    assert on_disk.metadata["kernelspec"]["name"] == "python3"


def test_the_record_survives_an_open_and_save_without_changes(lab):
    cm, root = lab
    ipynb = f"notebooks/{STEM}.ipynb"
    before = nbformat.read(root / ipynb, as_version=4).metadata["scrl_min_run"]
    model = run(cm.get(ipynb, type="notebook"))
    run(cm.save(dict(type="notebook", content=model["content"]), ipynb))
    assert nbformat.read(root / ipynb, as_version=4).metadata["scrl_min_run"] == before
