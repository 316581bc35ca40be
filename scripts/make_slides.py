"""Build the journal-club deck (`make slides`): slides/journal_club.py → runs/slides/journal_club.slides.html.

    python scripts/make_slides.py [--out runs/slides]

The presenter notebook `slides/journal_club.py` (jupytext py:percent) is executed at the repository root, so
its numbers come from the committed `figures/*.json` (through `scripts/verdict.py`) and its figures from
`figures/*.png`, embedded in the HTML. A cell tagged `slide` starts a slide; code cells show only their outputs.
nbconvert's reveal.js exporter writes the deck with `slides/template/scrl_deck` (reveal.js from the folder
beside the deck, nothing from a CDN), and `slides/reveal.js` (reveal.js 4.6.1, MIT) is copied next to it: the
folder opens offline in any browser. Raises SystemExit naming the cell when a cell of the deck fails.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "slides" / "journal_club.py"


def build(out: Path) -> tuple:
    """Execute the presenter notebook and write the deck into `out`; returns (path of the HTML, number of slides)."""
    import jupytext
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    from nbconvert import SlidesExporter

    nb = jupytext.read(SOURCE)
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        cell.metadata["slideshow"] = {"slide_type": "slide" if "slide" in tags else "-"}
    try:
        NotebookClient(nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(REPO)}}).execute()
    except CellExecutionError as e:
        raise SystemExit(f"{SOURCE.relative_to(REPO)}: a cell failed while building the deck:\n{e}") from None
    exporter = SlidesExporter(template_name="scrl_deck", extra_template_basedirs=[str(REPO / "slides" / "template")],
                              reveal_url_prefix="reveal.js", exclude_input=True, exclude_input_prompt=True,
                              exclude_output_prompt=True)
    html, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": "scrl-min: score centering"}})
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "slides" / "reveal.js", out / "reveal.js", dirs_exist_ok=True)
    path = out / "journal_club.slides.html"
    path.write_text(html)
    return path, sum(c.metadata["slideshow"]["slide_type"] == "slide" for c in nb.cells)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "slides", help="folder of the deck")
    args = ap.parse_args(argv)
    path, n = build(args.out.resolve())
    print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path} ({n} slides); open it in a browser")
    return 0


if __name__ == "__main__":
    sys.exit(main())
