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


def test_results_tables_are_the_committed_json():
    """Every results table in docs/results.md is what scripts/results_table.py makes from figures/*.json."""
    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    import results_table

    page = (REPO / "docs" / "results.md").read_text()
    made = results_table.blocks()
    assert "02" in made
    for name, text in made.items():
        assert f"<!-- results:{name} -->\n{text}\n<!-- /results:{name} -->" in page, (
            f"docs/results.md's results:{name} table differs from figures/: run python scripts/results_table.py --write")


def test_verdict_page_is_the_committed_json():
    """docs/verdict.md's claims, KL ladder and forest table are what scripts/verdict.py makes from figures/*.json,
    and the forest plot's numbers beside it are the same rows."""
    import json
    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    import verdict

    page = (REPO / "docs" / "verdict.md").read_text()
    rows = verdict.with_tests(verdict.rows())
    for name, text in verdict.blocks(rows).items():
        assert f"<!-- verdict:{name} -->\n{text}\n<!-- /verdict:{name} -->" in page, (
            f"docs/verdict.md's verdict:{name} block differs from figures/: run python scripts/verdict.py --write")
    saved = json.loads((REPO / "figures" / "verdict_forest.json").read_text())
    assert [(r["source"], r["setting"], r["contrast"]) for r in saved] == [(r["source"], r["setting"], r["contrast"])
                                                                          for r in rows]
    for a, b in zip(saved, rows):
        assert a["per_seed"] == b["per_seed"] and abs(a["p_holm"] - b["p_holm"]) < 1e-12
    readme = (REPO / "README.md").read_text()
    assert "docs/verdict.md" in readme[:3000], "the README's first screen links the verdict"
    for name, text in verdict.readme_blocks(rows).items():
        assert f"<!-- verdict:{name} -->\n{text}\n<!-- /verdict:{name} -->" in readme, (
            f"README.md's verdict:{name} block differs from figures/: run python scripts/verdict.py --write")


def test_a_claim_needs_both_cpu_models_runs():
    """A claim is reproduced only where the runs of both CPU models reproduce it (figures/other_cpu/ holds
    the other's JSON); the other CPU's numbers come from its own JSON, not from the committed run's."""
    import json
    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    import verdict

    rep, nr = "**reproduced**", "not resolved: the 95% interval contains 0"
    assert verdict.both_cpus(rep, rep).startswith("**reproduced**")
    assert verdict.both_cpus(rep, nr).startswith("not established")
    assert verdict.both_cpus(nr, rep).startswith("not established")
    assert verdict.both_cpus(nr, nr) == nr and verdict.both_cpus(rep, None) == rep
    other = verdict.OTHER_CPU / "11_severity_slope.json"
    assert other.exists(), "notebook 11's run on the other CPU model is committed"
    d2 = json.loads(other.read_text())
    rows = verdict.with_tests(verdict.rows())
    made = {c["claim"]: c for c in verdict.claims(rows, verdict.replicate_rows())}
    for name, v2 in d2["slopes"].items():
        c = made[f"SC's edge grows with the mismatch ({name} against log10 KL)"]
        assert f"on another CPU model {v2['slope']:+.3f} ± {v2['ci95']:.3f}" in c["number"]
        mine = json.loads((REPO / "figures" / "11_severity_slope.json").read_text())["slopes"][name]
        both = all(v["p_holm"] < 0.05 and v["slope"] > 0 for v in (mine, v2))
        one = any(v["p_holm"] < 0.05 and v["slope"] > 0 for v in (mine, v2))
        assert c["status"].startswith("**reproduced**") == both
        assert c["status"].startswith("not established") == (one and not both)
