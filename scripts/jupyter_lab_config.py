"""JupyterLab as `make lab` starts it (`jupyter lab --config=scripts/jupyter_lab_config.py`, at the repository root,
so that jupytext reads jupytext.toml and pairs every notebook with its .py).

Committed notebook outputs are safe from this JupyterLab:

- autosave is off: `scripts/lab_settings/overrides.json` sets the default of JupyterLab's "Autosave Documents"
  (`@jupyterlab/docmanager-extension:plugin`, `autosave`) to false, so a notebook run here keeps its new outputs
  in the browser until you save it (Ctrl+S, or Save when closing the tab). A user setting still wins over this
  default: whoever turns autosave on in Settings gets it back.
- a notebook saved from here with outputs other than those `make reproduce` committed loses its `scrl_min_run`
  record (scripts/run_notebooks.py, `drop_stale_provenance`): it no longer claims that command made it.

The hook is registered by the contents manager itself (jupytext's, which this JupyterLab saves through) rather
than set as `ContentsManager.pre_save_hook`: jupyter_server warns "Overriding existing pre_save_hook" every time
that option is applied to a contents manager, and the jupytext server extension builds a second one, so the
option printed that warning twice at every start.
"""
import sys
from pathlib import Path

from jupytext import AsyncTextFileContentsManager

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run_notebooks import drop_stale_provenance  # noqa: E402


class ProjectContentsManager(AsyncTextFileContentsManager):
    """jupytext's contents manager (every notebook a pair) with make lab's pre-save hook registered."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_pre_save_hook(drop_stale_provenance)


c = get_config()  # noqa: F821  (defined by Jupyter when it loads this file)
# jupytext's contents manager from the start: the jupytext server extension sees it and builds no second one
c.ServerApp.contents_manager_class = ProjectContentsManager
# JupyterLab reads overrides.json (defaults for its settings) from the application settings directory
c.LabApp.app_settings_dir = str(HERE / "lab_settings")
