"""Build the journal-club deck (`make slides`): slides/journal_club.py → runs/slides/journal_club.slides.html.

    python scripts/make_slides.py [--out runs/slides]

The presenter notebook `slides/journal_club.py` (jupytext py:percent) is executed at the repository root, so
its numbers come from the committed `figures/*.json` (statuses from `figures/verdict.json`, which
`scripts/verdict.py --write` makes) and its figures from
`figures/*.png`, embedded in the HTML. A cell tagged `slide` starts a slide; code cells show only their outputs.
nbconvert's reveal.js exporter writes the deck with `slides/template/scrl_deck` (reveal.js from the folder
beside the deck, nothing from a CDN), and `slides/reveal.js` (reveal.js 4.6.1, MIT) is copied next to it: the
folder opens offline in any browser. The theme is reveal.js's `white` (`slides/reveal.js/dist/theme/white.css`,
its web-font import removed so that nothing is fetched); nbconvert's default theme, `simple`, is not shipped.
Raises SystemExit naming the cell when a cell of the deck fails.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "slides" / "journal_club.py"
REVEAL = REPO / "slides" / "reveal.js"  # copied beside the deck as reveal.js/
THEME = "white"  # REVEAL/dist/theme/white.css; nbconvert would ask for simple.css, which is not shipped


def exporter():
    """nbconvert's reveal.js exporter as the deck uses it: the project's template, reveal.js and its theme from the
    folder beside the deck, code cells and prompts hidden."""
    from nbconvert import SlidesExporter

    return SlidesExporter(template_name="scrl_deck", extra_template_basedirs=[str(REPO / "slides" / "template")],
                          reveal_url_prefix="reveal.js", reveal_theme=THEME, exclude_input=True,
                          exclude_input_prompt=True, exclude_output_prompt=True)


def write(html: str, out: Path) -> Path:
    """Write the deck's HTML into `out` with reveal.js beside it; returns the HTML's path."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REVEAL, out / "reveal.js", dirs_exist_ok=True)
    path = out / "journal_club.slides.html"
    path.write_text(html)
    return path


def build(out: Path) -> tuple:
    """Execute the presenter notebook and write the deck into `out`; returns (path of the HTML, number of slides)."""
    import jupytext
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = jupytext.read(SOURCE)
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        cell.metadata["slideshow"] = {"slide_type": "slide" if "slide" in tags else "-"}
    try:
        NotebookClient(nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(REPO)}}).execute()
    except CellExecutionError as e:
        raise SystemExit(f"{SOURCE.relative_to(REPO)}: a cell failed while building the deck:\n{e}") from None
    html, _ = exporter().from_notebook_node(nb, resources={"metadata": {"name": "scrl-min: score centering"}})
    return write(html, out), sum(c.metadata["slideshow"]["slide_type"] == "slide" for c in nb.cells)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "slides", help="folder of the deck")
    args = ap.parse_args(argv)
    path, n = build(args.out.resolve())
    print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path} ({n} slides); open it in a browser")
    return 0


if __name__ == "__main__":
    sys.exit(main())
