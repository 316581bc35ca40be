"""JupyterLab as `make lab` starts it (`jupyter lab --config=scripts/jupyter_lab_config.py`, at the repository root,
so that jupytext reads jupytext.toml and pairs every notebook with its .py).

A notebook saved from this JupyterLab with outputs other than those `make reproduce` committed loses its
`scrl_min_run` record (scripts/run_notebooks.py, `drop_stale_provenance`): it no longer claims that command made it.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_notebooks import drop_stale_provenance  # noqa: E402

c = get_config()  # noqa: F821  (defined by Jupyter when it loads this file)
c.ContentsManager.pre_save_hook = drop_stale_provenance
