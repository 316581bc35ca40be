"""Every relative link in README.md and docs/*.md resolves: the file it names exists, and a `#anchor` matches a
heading of the file it points into, slugged as GitHub slugs headings (lower case, punctuation dropped, spaces to
hyphens, a repeated heading suffixed -1, -2, ...). Links to other sites are not fetched; code spans and fenced
code blocks are not links."""
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
HTML = re.compile(r"""<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.I)


def prose(text: str) -> str:
    """The text with fenced code blocks and code spans blanked (their line count kept)."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return CODE_SPAN.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: markup reduced to its text, lower case, every character that is not
    a letter, digit, space, hyphen or underscore dropped, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link or image: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set:
    """The anchors GitHub gives the headings of a Markdown file (ATX `#` headings outside code blocks)."""
    seen: dict = {}
    out = set()
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), path.read_text())
    for m in re.finditer(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", text, flags=re.M):
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    out |= set(re.findall(r"""<a\s+(?:name|id)\s*=\s*["']([^"']+)["']""", text))
    return out


def links(path: Path):
    """(line number, target) of every link in a Markdown file."""
    text = prose(path.read_text())
    for pattern in (INLINE, REFERENCE, HTML):
        for m in pattern.finditer(text):
            yield text.count("\n", 0, m.start()) + 1, m.group(1)


def broken(path: Path, root: Path = REPO) -> list:
    """What is wrong with each relative link of `path`, one line each, naming the file, line and target."""
    bad = []
    for line, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.I) or target.startswith("//"):
            continue  # another site, mailto:, ...: not checked here
        where = f"{path.relative_to(root)}:{line}: ({target})"
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{where}: {dest.relative_to(root) if dest.is_relative_to(root) else dest} does not exist")
            continue
        if not dest.is_relative_to(root):
            bad.append(f"{where}: points outside the repository")
            continue
        if not anchor:
            continue
        if dest.suffix == ".md":
            if unquote(anchor) not in anchors(dest):
                bad.append(f"{where}: no heading of {dest.relative_to(root)} has the anchor #{anchor}")
        elif not re.fullmatch(r"L\d+(-L\d+)?", anchor):
            bad.append(f"{where}: #{anchor} is not a line anchor (#L12 or #L12-L30) of a non-Markdown file")
    return bad


def test_slugs_follow_githubs_rules():
    assert slug("Which numbers hold where") == "which-numbers-hold-where"
    assert slug("The notebooks, in the order a presenter teaches them") == (
        "the-notebooks-in-the-order-a-presenter-teaches-them")
    assert slug("`make lab`: ports and headless") == "make-lab-ports-and-headless"
    assert slug("Score centering (eq. SC) — why E_q[A]·μ?") == "score-centering-eq-sc--why-e_qaμ"
    assert slug("[The verdict](docs/verdict.md)") == "the-verdict"


def test_the_checker_finds_a_dangling_file_and_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# A page\n\n## Same\n\n## Same\n\n```\n[in code](nowhere.md)\n```\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#same-1) [ok](a.md#a-page) `[code](x.md)` [ok](#here)\n\n## Here\n\n"
                    "[no file](missing.md) [no anchor](a.md#same-2) ![no image](fig.png) [web](https://x.org/y#z)\n")
    found = broken(page, root=tmp_path)
    assert len(found) == 3, found
    assert "missing.md does not exist" in found[0] and "b.md:5:" in found[0]
    assert "#same-2" in found[1]
    assert "fig.png does not exist" in found[2]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(page):
    assert list(links(page)) or page.name != "README.md", "no link found in README.md: the parser is broken"
    bad = broken(page)
    assert not bad, "dangling links:\n" + "\n".join(bad)


CITATION = re.compile(r'(README(?:\.md)?|docs/\w+\.md)`?,? (?:section )?"([^"]+)"')


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_section_cited_by_name_exists(page):
    """`docs/trl.md, "Cost"` and `README, "Metrics"` in prose are links too: the section must exist."""
    bad = []
    for m in CITATION.finditer(page.read_text()):
        name, section = m.groups()
        target = REPO / ("README.md" if name.startswith("README") else name)
        if not target.exists() or slug(section) not in anchors(target):
            line = page.read_text().count("\n", 0, m.start()) + 1
            bad.append(f"{page.relative_to(REPO)}:{line}: cites section \"{section}\" of {name}, which has none")
    assert not bad, "\n".join(bad)


def reading_order() -> list:
    """The README's notebooks by part: [(part, [file number, ...]), ...], from its section's tables."""
    readme = (REPO / "README.md").read_text()
    start = readme.index("\n## The notebooks, in three parts")
    section = readme[start:readme.index("\n## ", start + 3)]
    parts = re.split(r"^\*\*(.+?)\*\*.*$", section, flags=re.M)[1:]
    return [(title, re.findall(r"^\| `(\d\d)_\w+` \|", body, flags=re.M)) for title, body in zip(parts[::2], parts[1::2])]


def test_one_reading_order_in_the_readme_and_docs_notebooks():
    order = reading_order()
    assert [title.split(":")[0] for title, _ in order] == ["The idea", "The experiments", "In production"], order
    numbers = [n for _, ns in order for n in ns]
    assert len(numbers) == len(set(numbers)), f"a notebook is listed twice in the README's reading order: {numbers}"
    on_disk = {p.name[:2] for p in (REPO / "notebooks").glob("[0-9][0-9]_*.py")}
    assert on_disk <= set(numbers), f"notebooks missing from the README's reading order: {sorted(on_disk - set(numbers))}"
    page = (REPO / "docs" / "notebooks.md").read_text()
    m = re.search(r"^The notebooks, in the README's reading order \(.*?\):\n(.+?)\n\n", page, flags=re.M | re.S)
    assert m, "docs/notebooks.md no longer states the reading order"
    groups = [re.findall(r"\b\d\d\b", g) for g in m.group(1).split(";")]
    assert groups == [ns for _, ns in order], f"docs/notebooks.md orders the notebooks {groups}, the README {order}"
