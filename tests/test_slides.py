"""`make slides`: the deck builds from slides/journal_club.py and the committed figures, opens offline (nothing
fetched from the network, every figure inside the HTML, reveal.js beside it), reads from the back of a room (a
1280 × 720 slide, text ≥ 24 px, figures drawn for the slide), and its numbers are the verdict's under the inference
rule (docs/verdict.md): every status, p and interval on a slide is the one scripts/verdict.py computes."""
import base64
import html as html_lib
import json
import math
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
TEMPLATE = REPO / "slides" / "template" / "scrl_deck" / "index.html.j2"
DECK = REPO / "slides" / "journal_club.py"
MIN_PX = 24  # the smallest text, in pixels of the 1280 × 720 slide (the deck was about 13 px before)


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


@pytest.fixture(scope="module")
def built_deck(tmp_path_factory):
    """`make slides` into a folder of its own, once for this file's tests: (that folder, the finished process)."""
    out = tmp_path_factory.mktemp("deck")
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "make_slides.py"), "--out", str(out)],
                       capture_output=True, text=True, cwd=REPO, timeout=600)
    return out, r


@pytest.mark.slow
def test_deck_builds_offline_with_the_verdicts_numbers(built_deck):
    tmp_path, r = built_deck
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    html = (tmp_path / "journal_club.slides.html").read_text()
    slides = int(re.search(r"\((\d+) slides\)", r.stdout).group(1))
    # a 30-minute journal club wants 10-17 (the reward verdict is two slides, one message each, since its 11 rows ran
    # off a 720 px slide; the article's regime, notebook 16, has its own)
    assert 10 <= slides <= 17, f"{slides} slides: a 30-minute journal club wants 10-17"
    assert f"a {slides}-slide journal-club deck" in (REPO / "README.md").read_text(), "the README's slide count is stale"
    # offline: no script, stylesheet or image from elsewhere (CSS comments may name a site)
    external = re.findall(r"""(?:src|href)\s*=\s*["'](https?:)?//""", html)
    assert not external, "the deck loads something from the network"
    assert (tmp_path / "reveal.js" / "dist" / "reveal.js").exists()
    assert 'src="reveal.js/dist/reveal.js"' in html
    assert html.count("data:image/png;base64,") >= 8, "figures are not embedded"
    assert not local_references(html, tmp_path), f"missing beside the deck: {local_references(html, tmp_path)}"
    assert "def show(" not in html and "def load(" not in html, "code cells leaked into the deck"
    import verdict
    import verdict_page

    import scrl_min

    rs = verdict.tested_rows()
    fam02 = [r for r in rs if r["family"] == "02"]
    table = table_rows(html)
    for r in fam02:  # the headline table: each claim's numbers, Holm-level interval, Holm p and status, by the rule
        lo, hi, _ = verdict.holm_interval(r)
        cells = [f"{verdict_page.fmt(r['mean'])} ± {r['ci95']:.3f}", f"[{lo:+.3f}, {hi:+.3f}]",
                 scrl_min.p_text(r["p_holm"]), verdict_page.short_status(r).replace("**", "")]
        assert any(row[0].startswith(r["contrast"] + " ") and row[1:] == cells for row in table), \
            f"the headline table has no row {r['contrast']}: {cells}"
    text = deck_text(html)
    c13 = [r for r in verdict.confirmatory_rows() if r["family"] == "13 A"]  # the confirmatory slide's table
    allowed = {scrl_min.p_text(r["p_holm"]) for r in fam02 + verdict.slope_rows() + c13 if r["p_holm"] is not None}
    allowed |= {scrl_min.p_text(r["p_holm"]) for r in verdict.gradient_rows(verdict._load("10_gradient_test.json"))}
    quoted = re.findall(r"Holm p (?:is )?(< 0\.001|\d\.\d{3})", text)
    assert quoted, "the deck quotes no Holm p"
    stray = [p for p in quoted if p not in allowed]
    assert not stray, f"Holm p values on the deck that the rule does not give: {stray}"
    assert "57 contrasts" not in text and "page-wide" not in text, "the deck quotes the page-wide Holm family"
    for r in verdict.slope_rows():  # the slope slide: numbers and status by the rule
        assert (f"{r['contrast']}: {verdict_page.fmt(r['mean'], d=2)} ± {r['ci95']:.2f} per tenfold KL; Holm p "
                f"{scrl_min.p_text(r['p_holm'])}") in text
    # the verdict slides: every claim's status, as the README's table gives it (rendered from the committed verdict
    # JSON, which test_verdict checks is what the collector makes now)
    for c in verdict_page.claims(json.loads((verdict.FIG / "verdict.json").read_text())):
        assert c["short_status"].replace("**", "") in text, c["claim"]
    assert f"pooled over {len(verdict.replicate_dirs('02'))} CPU models (12 seeds)" in text
    for width, png_width in images(html):  # drawn for the slide: 2 dots per displayed pixel, not a notebook PNG
        assert png_width == 2 * width, f"a figure of {png_width} px shown at {width} px: not drawn for the slide"
        assert width <= 1240, f"a figure {width} px wide does not fit the 1280 px slide"


# Run in the built deck by a headless Chromium: at a 1280 × 720 window (the projector's), each slide in turn, every
# line of text (its line boxes, not its paragraph's box) and every figure against the navigation arrows and the slide
# number that reveal.js shows in the bottom-right corner, and against the slide's edges. Written into the page as
# the body's data-layout attribute, which --dump-dom prints.
LAYOUT_PROBE = """<script>
function scrlLayout() {
  const deck = document.querySelector(".reveal");
  deck.style.width = "1280px"; deck.style.height = "720px";  // the window --dump-dom gives is smaller
  Reveal.layout();
  const shown = e => { const s = getComputedStyle(e); return s.display !== "none" && s.visibility !== "hidden"; };
  const out = [];
  document.querySelectorAll(".reveal .slides > section").forEach((section, i) => {
    Reveal.slide(i);
    const marks = Array.from(document.querySelectorAll(".reveal .controls button, .reveal .slide-number"))
      .filter(shown).map(e => e.getBoundingClientRect()).filter(r => r.width > 0);
    const boxes = [];
    const walk = document.createTreeWalker(section, NodeFilter.SHOW_TEXT);
    for (let t = walk.nextNode(); t; t = walk.nextNode()) {
      if (!t.textContent.trim()) continue;
      const range = document.createRange();
      range.selectNodeContents(t);
      for (const r of range.getClientRects()) boxes.push([r, t.textContent.trim().slice(0, 50)]);
    }
    section.querySelectorAll("img").forEach(e => boxes.push([e.getBoundingClientRect(), "a figure"]));
    const problems = [];
    for (const [r, what] of boxes) {
      if (r.width === 0 || r.height === 0) continue;
      if (marks.some(m => r.left < m.right && r.right > m.left && r.top < m.bottom && r.bottom > m.top))
        problems.push("under the navigation: " + what);
      if (r.bottom > 720 || r.right > 1280) problems.push("off the slide: " + what);
    }
    out.push({slide: i + 1, marks: marks.length, problems: problems});
  });
  document.body.setAttribute("data-layout", JSON.stringify(out));
}
window.addEventListener("load", () => { if (Reveal.isReady()) scrlLayout(); else Reveal.on("ready", scrlLayout); });
</script>"""
CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


def layout_problems(deck: Path) -> dict:
    """{slide number: what runs under the navigation arrows or the slide number, or off the 1280 × 720 slide} for the
    deck built in `deck`, measured by CHROMIUM with LAYOUT_PROBE."""
    html = (deck / "journal_club.slides.html").read_text()
    end = html.rindex("</body>")
    probe = deck / "layout_probe.html"
    probe.write_text(html[:end] + LAYOUT_PROBE + html[end:])
    r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,720",
                        "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
                       capture_output=True, text=True, timeout=120)
    found = re.search(r'data-layout="([^"]*)"', r.stdout)
    assert found, f"the layout probe did not run: {r.stderr[-1000:]}"
    slides = json.loads(html_lib.unescape(found.group(1)))
    assert slides and all(s["marks"] >= 2 for s in slides), f"the probe found no arrows or slide number: {slides}"
    return {s["slide"]: s["problems"] for s in slides if s["problems"]}


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="measures the slides' layout in a headless Chromium, which is not "
                                              "installed (apt-get install chromium)")
def test_no_slide_runs_under_the_navigation_arrows(built_deck):
    """At the projector's 1280 × 720, no line of text or figure of any slide reaches under reveal.js's navigation
    arrows or slide number in the bottom-right corner, or off the slide (slides 6 and 15's captions did)."""
    deck, r = built_deck
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    problems = layout_problems(deck)
    assert not problems, f"slides whose text or figures run under the navigation or off the slide: {problems}"


def deck_text(html: str) -> str:
    """The deck's visible text: tags removed, entities and non-breaking spaces resolved, whitespace collapsed."""
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)
    body = re.sub(r"</?(?:strong|em|code|b|i|a|span)\b[^>]*>", "", body)  # inline: no space
    return re.sub(r"\s+", " ", html_lib.unescape(re.sub(r"<[^>]+>", " ", body)).replace("\u00a0", " "))


def table_rows(html: str) -> list:
    """Every table row of the deck as its cells' text."""
    rows = []
    for tr in re.findall(r"<tr>(.*?)</tr>", html, flags=re.S):
        rows.append([deck_text(c).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", tr, flags=re.S)])
    return rows


def images(html: str) -> list:
    """(displayed width, PNG width in pixels) of every embedded PNG."""
    out = []
    for tag in re.findall(r"<img\b[^>]*>", html):
        src = re.search(r'src="data:image/png;base64,([^"]+)"', tag)
        width = re.search(r'width="(\d+)"', tag)
        assert src and width, f"an image without an embedded PNG or a width: {tag[:120]}"
        png = base64.b64decode(src.group(1)[:64])
        out.append((int(width.group(1)), struct.unpack(">I", png[16:20])[0]))
    return out


def test_deck_text_is_large_enough_to_project():
    """The deck's page is a 1280 × 720 slide (so its CSS pixels are a 1280 × 720 projector's), and every font size
    its stylesheet sets is at least MIN_PX pixels, in px (an em size would scale from the theme's, unchecked)."""
    tpl = TEMPLATE.read_text()
    init = re.search(r"Reveal\.initialize\(\{(.*?)\}\);", tpl, flags=re.S).group(1)
    assert re.search(r"\bwidth:\s*1280\b", init) and re.search(r"\bheight:\s*720\b", init), \
        "the slide is not 1280 × 720"
    css = re.search(r"<style>(.*?)</style>", tpl, flags=re.S).group(1)
    sizes = re.findall(r"font-size:\s*([\d.]+)(px|em|rem|%|pt)?", css)
    assert sizes, "the deck's stylesheet sets no font size"
    for value, unit in sizes:
        assert unit == "px", f"font-size {value}{unit}: give the deck's sizes in px"
        assert float(value) >= MIN_PX, f"font-size {value}px is below {MIN_PX} px"
    for sel in ("p", "li", "td", "th"):  # body text and tables have a size of their own
        assert re.search(rf"\.jp-RenderedHTMLCommon {sel}\b[^{{]*\{{[^}}]*font-size", css), f"no size for {sel}"


def test_deck_figures_are_drawn_for_the_slide():
    """The deck draws its figures from the JSON at PX pixels per inch with labels of LABEL_PT points (≥ MIN_PX px),
    and embeds no notebook PNG (drawn for a page, their labels are about 8 px on a slide)."""
    import ast

    src = DECK.read_text()
    consts = {n.targets[0].id: n.value.value for n in ast.parse(src).body
              if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Constant)}
    assert consts["LABEL_PT"] * consts["PX"] / 72 >= MIN_PX, "figure labels smaller than the text"
    assert "filename=" not in src and ".png" not in src, "the deck embeds a PNG file"


def test_deck_reads_the_verdicts_json_and_imports_only_scrl_min():
    """Every status, p and interval on the deck comes from figures/verdict.json, which scripts/verdict.py writes under
    the rule (test_verdict checks it is current); the deck imports no script and nothing from tests/."""
    import json

    import verdict
    import verdict_page

    src = DECK.read_text()
    assert 'FIG / "verdict.json"' in src
    assert "import verdict" not in src and "sys.path" not in src and "tests/" not in src
    imports = {m for m in re.findall(r"^(?:from|import) (\w+)", src, flags=re.M)}
    assert imports <= {"ast", "io", "json", "re", "pathlib", "matplotlib", "numpy", "IPython", "scrl_min"}, imports
    data = json.loads((verdict.FIG / "verdict.json").read_text())
    rs = verdict.tested_rows()
    for r, saved in zip(rs, data["rows"]):  # the saved interval is verdict.holm_interval's, within the row's family
        if r["family"] is not None and "p_holm_given" not in r:
            assert saved["holm_interval"] == pytest.approx(list(verdict.holm_interval(r)), rel=1e-12)
            assert saved["short_status"] == verdict_page.short_status(r)


def test_holm_interval_decides_as_holm_steps():
    """verdict.holm_interval (scrl_min.stats' Holm step, carried by each row): in each family of the rule, the
    interval at step k is the (1 − 2a) t interval with a = α/(m − k), and its claim-side end clears the threshold exactly when p < a; where Holm's adjusted p is below
    α the interval clears (the deck's reading agrees with the status)."""
    from scipy import stats
    import verdict

    rs = verdict.tested_rows() + verdict.slope_rows()
    fams = {}
    for r in rs:
        if r["family"] is not None and "p_holm_given" not in r:
            fams.setdefault(r["family"], []).append(r)
    assert "02" in fams
    thresholds = {"greater": (0.0, None), "noninferior": (-verdict.MARGIN, None), "less": (None, 0.0),
                  "equivalent": (-verdict.MARGIN, verdict.MARGIN)}
    for fam, members in fams.items():
        by_p = sorted(members, key=lambda r: r["p"])
        for r in members:
            lo, hi, a = verdict.holm_interval(r)
            rank = next(k for k, x in enumerate(by_p) if x is r)
            assert math.isclose(a, verdict.ALPHA / (len(members) - rank)), (fam, r["contrast"], a, rank)
            h = stats.t.ppf(1 - a, r["n"] - 1) * r["sd"] / math.sqrt(r["n"])
            assert math.isclose(hi - r["mean"], h, rel_tol=1e-9) and math.isclose(r["mean"] - lo, h, rel_tol=1e-9)
            low, high = thresholds[r["kind"]]
            clears = (low is None or lo > low) and (high is None or hi < high)
            assert clears == (r["p"] < a), (fam, r["contrast"], r["p"], a, lo, hi)
            if r["p_holm"] < verdict.ALPHA:
                assert clears, (fam, r["contrast"])
    with pytest.raises(ValueError):
        verdict.holm_interval(next(r for r in verdict.tested_rows() if r["family"] is None))


def test_deck_follows_the_readmes_reading_order():
    """The slides name their notebooks ('(notebook NN)' in a slide's title) in the order the README's three parts
    list them (the idea, the experiments, in production), each once."""
    readme = (REPO / "README.md").read_text()
    part = readme[readme.index("## The notebooks, in three parts"):]
    part = part[:part.index("\n## ", 4)]
    order = re.findall(r"^\| `(\d\d)_", part, flags=re.M)
    assert len(order) == len(set(order)) >= 10, "the README's reading order was not found"
    deck = re.findall(r"^# ## .*?\(notebook (\d\d)\)", DECK.read_text(), flags=re.M)
    assert len(deck) >= 8 and len(deck) == len(set(deck)), f"slides name notebooks {deck}"
    assert all(n in order for n in deck), f"the deck names notebooks the README does not: {set(deck) - set(order)}"
    assert deck == sorted(deck, key=order.index), f"the deck's order {deck} is not the README's {order}"
