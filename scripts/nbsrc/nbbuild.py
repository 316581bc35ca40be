"""Shared by the build_NN.py scripts: collect cells in order, write a clean notebook.

    from nbbuild import md, code, write
    md(r\"\"\"# Title ...\"\"\");  code("x = 1  # meaning, unit", tags=["parameters"]);  write("NN_name")
"""
from pathlib import Path

import nbformat as nbf

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
cells = []


def md(s: str) -> None:
    """Append a markdown cell."""
    cells.append(nbf.v4.new_markdown_cell(s.strip("\n")))


def code(s: str, tags=None) -> None:
    """Append a code cell (tags: e.g. ["parameters"] for papermill)."""
    c = nbf.v4.new_code_cell(s.strip("\n"))
    if tags:
        c.metadata["tags"] = tags
    cells.append(c)


def write(stem: str, replace: dict | None = None) -> Path:
    """Write notebooks/<stem>.ipynb: no outputs, kernelspec python3; `replace` edits markdown text."""
    nb = nbf.v4.new_notebook()
    nb.cells = cells
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                   "language_info": {"name": "python"}}
    for c in nb.cells:
        if c.cell_type == "markdown":
            for old, new in (replace or {}).items():
                c.source = c.source.replace(old, new)
    nbf.validate(nb)
    out = NOTEBOOKS / f"{stem}.ipynb"
    nbf.write(nb, out)
    print("wrote", out)
    return out
