"""`make slides`: the deck builds from slides/journal_club.py and the committed figures, opens offline (nothing
fetched from the network, every figure inside the HTML, reveal.js beside it), and its numbers are the verdict's."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


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
    assert "def figure(" not in html, "code cells leaked into the deck"
    sys.path.insert(0, str(REPO / "scripts"))
    import verdict

    rows = verdict.with_tests(verdict.rows())
    sc_plain = next(r for r in rows if r["source"] == "02" and r["contrast"] == "sc − plain")
    assert f"{sc_plain['mean']:+.3f} ± {sc_plain['ci95']:.3f}" in html
