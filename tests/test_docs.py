"""Every reference resolves: the method note that notebooks and tests cite is in the repository,
the README's file table names real files, and no text points outside the repository."""
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def tracked_text_files():
    names = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=REPO).stdout.split()
    return [REPO / n for n in names if n.endswith((".py", ".md", ".yaml", ".cfg", ".toml", ".ipynb"))]


def test_no_text_points_outside_the_repository():
    bad = []
    for path in tracked_text_files():
        if not path.exists() or path.name == "test_docs.py":  # this file spells the patterns out
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\.\./shared|\b[Ii]ssue \d|(?<![\w/])method\.md", line):
                bad.append(f"{path.relative_to(REPO)}:{i}: {line.strip()[:100]}")
    assert not bad, "\n".join(bad)


def test_the_method_note_has_the_sections_that_are_cited():
    note = (REPO / "docs" / "method.md").read_text()
    headings = set(re.findall(r"^## (.+)$", note, flags=re.M))
    cited = set()
    for path in tracked_text_files():
        if path.exists() and path.name != "method.md":
            cited |= set(re.findall(r'docs/method\.md`?,? (?:section )?"([^"]+)"', path.read_text()))
    assert cited, "nothing cites docs/method.md by section"
    assert cited <= headings, f"cited sections missing from docs/method.md: {cited - headings}"


def test_readme_file_table_names_real_files():
    readme = (REPO / "README.md").read_text()
    start = readme.index("## What is where")
    table = readme[start:readme.index("\n## ", start + 3)]
    paths = re.findall(r"^\| `([^`]+)` \|", table, flags=re.M)
    assert len(paths) > 10
    for p in paths:
        m = re.match(r"(.*)\{(.*)\}$", p)
        for q in ([m.group(1) + ext for ext in m.group(2).split(",")] if m else [p]):
            assert (REPO / q).exists(), f"README names {q}, which does not exist"


def test_every_parameter_count_in_the_text_is_the_models():
    """'3.7M-parameter', '3.7M parameters', '/ 3.7M' in any tracked text is the embedded model's count, rounded to
    0.1M (it said 3.6M in two files while the model has 3,672,832)."""
    import scrl_min

    policy, _ = scrl_min.load_policy(str(scrl_min.DEFAULT_MODEL_PATH))
    want = f"{sum(p.numel() for p in policy.parameters()) / 1e6:.1f}M"
    bad = []
    for path in tracked_text_files():
        if not path.exists() or path.suffix not in (".md", ".py") or path.name == "test_docs.py":
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            for m in re.finditer(r"\b(\d\.\d)M(?:-parameter| parameters|\b(?= ≈))", line):
                if m.group(0)[:len(want)] != want:
                    bad.append(f"{path.relative_to(REPO)}:{i}: {m.group(0)}")
    assert not bad, f"the model has {want} parameters:\n" + "\n".join(bad)


def test_readme_says_what_was_found_and_the_commands_on_its_first_screen():
    """The README's front door: at most 200 lines; within its first 60, the findings (one paragraph per regime: raw
    rewards, group-centred advantages), the short claims table (at most 12 rows) and the commands."""
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines"
    first = "\n".join(lines[:60])
    for needle in ("<!-- /verdict:findings -->", "**Raw rewards as advantages", "**Group-centred advantages",
                   "<!-- /verdict:readme -->", "make test", "make reproduce-full", "make slides"):
        assert needle in first, f"README.md's first 60 lines lack {needle!r}"
    table = first.split("<!-- verdict:readme -->")[1].split("<!-- /verdict:readme -->")[0].strip().splitlines()
    assert len(table) - 2 <= 12, f"the README's claims table has {len(table) - 2} rows"
