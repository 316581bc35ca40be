"""`make slides`: the deck builds from slides/journal_club.py and the committed figures, opens offline (nothing
fetched from the network, every figure inside the HTML, reveal.js beside it), and its numbers are the verdict's."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))


def local_references(html: str, root: Path) -> list:
    """Every file the deck at `root` asks for (script src, stylesheet href, CSS @import and url()), followed through
    the stylesheets it loads, that is missing; data: URIs and anchors excluded."""
    missing, seen = [], set()
    todo = [(root / "deck.html", ref) for ref in re.findall(r"""<(?:script|link)\b[^>]*?(?:src|href)\s*=\s*["']([^"']+)""", html)]
    while todo:
        base, ref = todo.pop()
        if ref.startswith(("data:", "#")) or (base, ref) in seen:
            continue
        seen.add((base, ref))
        path = (base.parent / ref.split("#")[0].split("?")[0]).resolve()
        if not path.is_file():
            missing.append(f"{ref} (asked for by {base.relative_to(root)})")
        elif path.suffix == ".css":
            css = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
            refs = re.findall(r"""@import\s+(?:url\()?\s*["']?([^"')\s;]+)""", css)
            refs += re.findall(r"""url\(\s*["']?([^"')]+)""", css)
            todo += [(path, r) for r in refs]
    return missing


def test_every_file_the_deck_asks_for_is_shipped(tmp_path):
    """The deck's page through the real exporter and template (a one-slide notebook, no kernel), written with
    reveal.js beside it as `make slides` writes it: every script, stylesheet (the theme included) and file a
    stylesheet imports is there, and nothing comes from the network."""
    import nbformat
    import make_slides

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A slide", metadata={"slideshow": {
        "slide_type": "slide"}})])
    html, _ = make_slides.exporter().from_notebook_node(nb, resources={"metadata": {"name": "test"}})
    path = make_slides.write(html, tmp_path)
    assert f'reveal.js/dist/theme/{make_slides.THEME}.css' in html, "the deck names no theme"
    missing = local_references(html, path.parent)
    assert not missing, "the deck asks for files that are not shipped: " + ", ".join(missing)
    assert not re.findall(r"""(?:src|href)\s*=\s*["'](?:https?:)?//""", html), "the deck loads from the network"


@pytest.mark.slow
def test_deck_builds_offline_with_the_verdicts_numbers(tmp_path):
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "make_slides.py"), "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    html = (tmp_path / "journal_club.slides.html").read_text()
    slides = int(re.search(r"\((\d+) slides\)", r.stdout).group(1))
    assert 10 <= slides <= 15, f"{slides} slides: a 30-minute journal club wants 10-15"
    # offline: no script, stylesheet or image from elsewhere (CSS comments may name a site)
    external = re.findall(r"""(?:src|href)\s*=\s*["'](https?:)?//""", html)
    assert not external, "the deck loads something from the network"
    assert (tmp_path / "reveal.js" / "dist" / "reveal.js").exists()
    assert 'src="reveal.js/dist/reveal.js"' in html
    assert html.count("data:image/png;base64,") >= 8, "figures are not embedded"
    assert not local_references(html, tmp_path), f"missing beside the deck: {local_references(html, tmp_path)}"
    assert "def figure(" not in html, "code cells leaked into the deck"
    import verdict

    rows = verdict.with_tests(verdict.rows())
    sc_plain = next(r for r in rows if r["source"] == "02" and r["contrast"] == "sc − plain")
    assert f"{sc_plain['mean']:+.3f} ± {sc_plain['ci95']:.3f}" in html
