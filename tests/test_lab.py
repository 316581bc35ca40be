"""JupyterLab as `make lab` starts it. Headless: the contents manager JupyterLab saves through (the one
scripts/jupyter_lab_config.py configures: jupytext's, over jupyter_server's, with make lab's pre-save hook), rooted
at a copy of the repository layout; and the real server started by the Makefile's recipe, its settings read back
through JupyterLab's settings API.

Opening either file of a pair shows the outputs, saving either writes both, an edit made through one survives a
later save of the other, a notebook saved with new outputs drops its `make reproduce` record, a pair whose .py
changed on disk opens with the .py's cells and the .ipynb's outputs (what JupyterLab's "Revert" loads), autosave is
off and the server starts without the project's own warnings. What needs a browser (JupyterLab's own dialogs) is
not covered here."""
import asyncio
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest
from conftest import free_port  # tests/conftest.py: a TCP port free now

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import run_notebooks  # noqa: E402

STEM = "01_signal_and_drift"
DOCMANAGER = "@jupyterlab/docmanager-extension:plugin"


def lab_config():
    """The traitlets config `jupyter lab --config=scripts/jupyter_lab_config.py` loads."""
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader("jupyter_lab_config.py", path=str(REPO / "scripts")).load_config()


def lab_recipe(lab_args: str = "") -> list:
    """The command `make lab LAB_ARGS=...` runs, as the Makefile spells it (`make -n`; setup not remade)."""
    r = subprocess.run(["make", "-s", "-n", "-o", ".venv/.installed", "lab", f"LAB_ARGS={lab_args}"],
                       capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if "jupyter lab" in l]
    assert len(lines) == 1, f"make -n lab printed {r.stdout!r}: expected one `jupyter lab` command"
    return shlex.split(lines[0])


def test_make_lab_roots_jupyterlab_at_the_repository_with_the_hook():
    cmd = lab_recipe()
    assert cmd[0].endswith("jupyter") and cmd[1] == "lab"
    assert not any("notebooks" in a for a in cmd[2:]), "JupyterLab must start at the repository root"
    assert "--config=scripts/jupyter_lab_config.py" in cmd
    assert lab_recipe("--port 8890 --no-browser")[-3:] == ["--port", "8890", "--no-browser"], (
        "make lab must pass LAB_ARGS on to jupyter lab")
    from jupytext import AsyncTextFileContentsManager

    cls = lab_config().ServerApp.contents_manager_class
    assert issubclass(cls, AsyncTextFileContentsManager), f"{cls}: JupyterLab would not pair notebooks"
    cm = cls(root_dir=str(REPO))
    assert run_notebooks.drop_stale_provenance in cm._pre_save_hooks, "make lab's contents manager has no hook"
    settings = Path(lab_config().LabApp.app_settings_dir)
    overrides = json.loads((settings / "overrides.json").read_text())
    assert overrides[DOCMANAGER]["autosave"] is False, f"{settings}/overrides.json leaves autosave on"


@pytest.fixture
def lab(tmp_path):
    (tmp_path / "notebooks").mkdir()
    shutil.copy(REPO / "jupytext.toml", tmp_path)
    for ext in (".ipynb", ".py"):
        shutil.copy(REPO / "notebooks" / f"{STEM}{ext}", tmp_path / "notebooks")
    cm = lab_config().ServerApp.contents_manager_class(root_dir=str(tmp_path))
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


def set_mtime(path: Path, t: float) -> None:
    os.utime(path, (t, t))


def test_a_py_changed_on_disk_reopens_with_its_cells_and_the_outputs(lab):
    """The .py of an open pair changed on disk (an editor, `git pull`): jupytext dates the .ipynb by its newest
    input, so JupyterLab's "File Changed" dialog names the .ipynb. Revert (reopen) gives the .py's cells with the
    .ipynb's outputs; Overwrite would save the tab's older cells over both files."""
    cm, root = lab
    ipynb, py = root / "notebooks" / f"{STEM}.ipynb", root / "notebooks" / f"{STEM}.py"
    t0 = time.time() - 100
    set_mtime(ipynb, t0)
    opened = run(cm.get(f"notebooks/{STEM}.ipynb", content=False))["last_modified"]
    py.write_text(py.read_text().replace("# %% [markdown]\n", "# %% [markdown]\n# An edit made in an editor.\n#\n", 1))
    set_mtime(py, t0 + 60)
    model = run(cm.get(f"notebooks/{STEM}.ipynb", type="notebook"))
    assert model["last_modified"] > opened, "the .ipynb's date did not follow its .py: no dialog would warn"
    nb = model["content"]
    assert any("An edit made in an editor." in c.source for c in nb.cells), "reopening lost the .py's edit"
    assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "reopening lost the outputs"


def test_restoring_a_saved_notebook_takes_both_files_of_the_pair(lab):
    """After a save in JupyterLab (new outputs, an edited cell), restoring the .ipynb alone leaves the .py's
    edited cells older than it: jupytext refuses to open the pair, naming both files. Restoring both files, as the
    README says (`git checkout -- notebooks/NN_name.ipynb notebooks/NN_name.py`), opens with the record back."""
    cm, root = lab
    path = f"notebooks/{STEM}.ipynb"
    nb = run(cm.get(path, type="notebook"))["content"]
    next(c for c in nb.cells if c.cell_type == "code").source += "\nprint('edited in the lab')"
    run(cm.save(dict(type="notebook", content=nb), path))
    shutil.copy(REPO / path, root / path)  # "git checkout -- notebooks/NN_name.ipynb" alone
    set_mtime(root / path, time.time() + 60)
    from tornado.web import HTTPError

    with pytest.raises(HTTPError) as refused:
        run(cm.get(path, type="notebook"))
    assert f"{STEM}.py" in refused.value.log_message and f"{STEM}.ipynb" in refused.value.log_message
    shutil.copy(REPO / "notebooks" / f"{STEM}.py", root / "notebooks")  # ... and its .py
    nb = run(cm.get(path, type="notebook"))["content"]
    assert "scrl_min_run" in nb.metadata
    assert not any("edited in the lab" in c.source for c in nb.cells)


@pytest.mark.slow
def test_make_lab_serves_autosave_off_and_starts_without_the_projects_warnings(tmp_path):
    """`make lab`'s command, headless on a free port with LAB_ARGS, and with user settings, workspaces and runtime
    files in a temporary folder (so a developer's own settings neither decide nor change the result); the default
    that JupyterLab's browser side applies is read back from its settings API, then the server is stopped."""
    port, token = free_port(), "scrl-min-test-token"
    cmd = lab_recipe(f"--no-browser --port {port} --ServerApp.port_retries=0 --IdentityProvider.token={token} "
                     f"--LabApp.user_settings_dir={tmp_path / 'user'} --LabApp.workspaces_dir={tmp_path / 'ws'}")
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"))
    env.pop("PYTHONWARNINGS", None)  # as `make lab` runs it: Python's default filters
    log = tmp_path / "lab.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/lab/api/settings/{DOCMANAGER}"
        request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
        deadline, reply = time.time() + 180, None
        while reply is None:
            assert proc.poll() is None, f"jupyter lab exited ({proc.returncode}):\n{log.read_text()[-3000:]}"
            assert time.time() < deadline, f"jupyter lab did not answer within 180 s:\n{log.read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(request, timeout=10) as r:
                    reply = json.load(r)
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert reply["schema"]["properties"]["autosave"]["default"] is False, "the lab's autosave default is on"
    assert "autosave" not in reply["settings"], "a user setting decides autosave: the test is not isolated"
    text = log.read_text()
    assert "Serving notebooks from local directory: " + str(REPO) in text
    ours = [l for l in text.splitlines() if "pre_save_hook" in l or "UserWarning" in l or "scripts/" in l]
    assert not ours, "make lab printed warnings at start:\n" + "\n".join(ours)
