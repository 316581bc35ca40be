"""Numbers that cannot go stale: every measured number in a notebook's results prose is bound to the JSON value (or
the printed output) it quotes, and the binding still holds (scripts/prose_numbers.py, notebooks/prose_numbers.yaml)."""
import copy
import importlib.util
import json
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("prose_numbers", REPO / "scripts" / "prose_numbers.py")
pn = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pn)
LOCK = yaml.safe_load(pn.LOCK.read_text())


def test_every_quoted_number_is_bound_and_rounds_to_its_source():
    problems = pn.check(LOCK)
    assert not problems, "\n".join(problems[:20]) + f"\n({len(problems)} in all; scripts/prose_numbers.py --update)"


def test_every_unbound_number_says_where_it_comes_from():
    todo = [f"{s}: {e['text']}" for s, es in LOCK.items() for e in es if "TODO" in e.get("unbound", "TODO x")
            and "unbound" in e]
    assert not todo, todo
    assert set(LOCK) == {stem for stem, _ in pn.notebooks()}, "a notebook with results prose has no bindings"


def test_quoted_numbers_skip_bounds_and_settings_and_read_signs_decimals_percent():
    nums = pn.quoted_numbers("plain − bf16 −0.190 ± 0.107 (p < 0.001, σ 0.1, lr 0.25), 3.36% and 1.5e-2 in 2.0.1")
    assert [(t, v, d, pct) for t, v, d, pct, _ in nums] == [("−0.190", -0.19, 3, False), ("0.107", 0.107, 3, False),
                                                            ("3.36%", 3.36, 2, True), ("1.5e-2", 0.015, 3, False)]
    assert pn.rounds_to(0.0336, 3.36, 2, True) and pn.rounds_to(-0.1904, -0.190, 3, False)
    assert not pn.rounds_to(-0.1906, -0.190, 3, False)


def test_binding_prefers_the_notebooks_own_json_over_the_verdicts():
    """A value in the notebook's own JSON wins over a verdict value of the same digits, even when the verdict's key
    path shares more words with the sentence (the forest's many numbers made coincidental first bindings)."""
    srcs = {"figures/99_x.json": {"arms": {"sc": {"final": 0.2132}}},
            pn.VERDICT: [{"mean": 0.2133, "ci95": 0.05}]}
    number = pn.quoted_numbers("pooled mean ci95 of the contrast +0.213")[0]
    assert pn.bind(number, srcs) == ("figures/99_x.json", ["arms", "sc", "final"])
    only_verdict = {"figures/99_x.json": {"arms": {"sc": {"final": 0.5}}}, pn.VERDICT: [{"mean": 0.2133}]}
    assert pn.bind(number, only_verdict) == (pn.VERDICT, [0, "mean"])


def _first_bound(kind):
    for stem, es in LOCK.items():
        for i, e in enumerate(es):
            if kind in e:
                return stem, i, e
    raise AssertionError(f"no binding of kind {kind}")


def test_the_check_fails_when_the_prose_changes_a_number(monkeypatch):
    """A quoted number edited by one unit in its last digit (or a number added) fails the check."""
    stem, i, e = _first_bound("json")
    nbs = dict(pn.notebooks())
    nb = copy.deepcopy(nbs[stem])
    last = e["text"][-1]
    edited = e["text"][:-1] + ("1" if last != "1" else "2")
    for cell in nb.cells:
        if cell.cell_type == "markdown" and e["before"] + e["text"] in cell.source:
            cell.source = cell.source.replace(e["before"] + e["text"], e["before"] + edited, 1)
            break
    else:
        raise AssertionError("binding context not found in the prose")
    monkeypatch.setattr(pn, "notebooks", lambda: [(s, nb if s == stem else n) for s, n in nbs.items()])
    problems = pn.check(LOCK)
    assert any(f"'{edited}'" in p for p in problems), problems[:5]
    last_markdown = [c for c in nb.cells if c.cell_type == "markdown"][-1]
    last_markdown.source += "\n\nA new number: 0.4242."  # added after the last binding: unbound
    assert any("quoted numbers" in p for p in pn.check(LOCK))


def test_the_check_fails_when_the_json_moves_under_the_prose(monkeypatch):
    """A rerun that changes a bound value beyond the quote's rounding fails the check (the prose quotes an older
    run); so does a printed output that no longer shows a number bound to it."""
    stem, i, e = _first_bound("json")
    srcs = copy.deepcopy(pn.sources(stem))
    parent = srcs[e["json"]]
    for k in e["path"][:-1]:
        parent = parent[k]
    parent[e["path"][-1]] = float(parent[e["path"][-1]]) + 7 * 10.0 ** -pn.quoted_numbers(e["text"])[0][2] + 1
    real = pn.sources
    monkeypatch.setattr(pn, "sources", lambda s: srcs if s == stem else real(s))
    problems = pn.check(LOCK)
    assert any("older run" in p and e["text"] in p for p in problems), problems[:5]
    monkeypatch.setattr(pn, "sources", real)
    stem, i, e = _first_bound("output_of_cell")
    nbs = dict(pn.notebooks())
    nb = copy.deepcopy(nbs[stem])
    for o in nb.cells[e["output_of_cell"]].outputs:
        if "text" in o:
            o["text"] = o["text"].replace(e["text"].lstrip("+−-"), "?")
    monkeypatch.setattr(pn, "notebooks", lambda: [(s, nb if s == stem else n) for s, n in nbs.items()])
    assert any("no longer shows it" in p for p in pn.check(LOCK))


def test_update_carries_a_binding_over_when_a_rerun_changes_only_the_digits(monkeypatch):
    """A rerun rewrites a sentence's digits: --update keeps each number's old path when its new value rounds to the
    new text, although another key (whose path shares more words with the sentence) holds the same digits by
    chance; a hand-written `unbound` reason whose number changed is marked for a rewrite, not kept silently."""
    import nbformat

    def notebook(prose):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("## What we saw\n\n" + prose)])
        nb.metadata["scrl_min_run"] = {}
        return nb

    before = "The reference ends at 0.484 ± 0.182 and plain at 0.057, 8.5 times less."
    after = "The reference ends at 0.364 ± 0.304 and plain at 0.020, 18.2 times less."
    data = {"final": {"bf16": {"eval_reward": {"mean": 0.484, "ci95": 0.182}}, "plain": {"eval_reward": {"mean": 0.057}}},
            "reference": {"ends": {"mean": 0.9}}}
    srcs = {"figures/99_x.json": data}
    monkeypatch.setattr(pn, "sources", lambda stem: srcs)
    monkeypatch.setattr(pn, "notebooks", lambda: [("99_x", notebook(before))])
    lock = pn.update({})
    lock["99_x"][-1]["unbound"] = "derived: 0.484 / 0.057"
    assert [e.get("path") for e in lock["99_x"]][:3] == [["final", "bf16", "eval_reward", "mean"],
                                                         ["final", "bf16", "eval_reward", "ci95"],
                                                         ["final", "plain", "eval_reward", "mean"]]
    # the rerun: new values, and a coincidental 0.364 under a key that shares more words with the sentence
    data["final"]["bf16"]["eval_reward"].update(mean=0.3641, ci95=0.3040)
    data["final"]["plain"]["eval_reward"]["mean"] = 0.0205
    data["reference"]["ends"]["mean"] = 0.364
    monkeypatch.setattr(pn, "notebooks", lambda: [("99_x", notebook(after))])
    new = pn.update(lock)["99_x"]
    assert [e["text"] for e in new] == ["0.364", "0.304", "0.020", "18.2"]
    assert [e.get("path") for e in new[:3]] == [e["path"] for e in lock["99_x"][:3]]
    assert new[3]["unbound"] == "TODO: rewrite for the new value; was: derived: 0.484 / 0.057"
    assert pn.check({"99_x": new}) == []


def test_suggest_writes_each_moved_number_as_the_prose_quotes_it(monkeypatch):
    """--suggest: after a rerun, each JSON-bound number whose value moved, rewritten with the quote's decimals,
    sign style (unicode minus, explicit +) and percent; numbers that still hold are not listed."""
    import nbformat

    assert [pn.requote(t, v) for t, v in [("+0.32", 0.3894), ("−1.7", -1.0853), ("0.484", 0.36415), ("3.6%", 0.0379),
                                          ("+2.2", -0.04), ("0.51", -0.713), ("-0.190", 0.2)]] == \
        ["+0.39", "−1.1", "0.364", "3.8%", "+0.0", "0.71", "0.200"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        "## What we saw\n\nplain − bf16 −0.190 ± 0.107, SC +0.213.")])
    nb.metadata["scrl_min_run"] = {}
    data = {"d": {"mean": -0.1904, "ci95": 0.107}, "sc": {"mean": 0.2132}}
    monkeypatch.setattr(pn, "sources", lambda stem: {"figures/99_x.json": data})
    monkeypatch.setattr(pn, "notebooks", lambda: [("99_x", nb)])
    lock = pn.update({})
    data["d"].update(mean=-0.25, ci95=0.1071)
    data["sc"]["mean"] = 0.31
    assert [(old, new) for _, old, new, _ in pn.suggestions(lock)] == [("−0.190", "−0.250"), ("+0.213", "+0.310")]


def test_the_prose_stays_within_its_budget_of_quoted_numbers():
    """A closing section quotes its claim rows and a few other numbers; the rest lives in the JSON and on the verdict
    page. All notebooks together: at most 250 quoted numbers (the lock's entries), at most 30 in any one notebook."""
    import yaml

    lock = yaml.safe_load((Path(__file__).resolve().parent.parent / "notebooks" / "prose_numbers.yaml").read_text())
    counts = {nb: len(entries) for nb, entries in lock.items()}
    assert sum(counts.values()) <= 250, counts
    assert max(counts.values()) <= 30, {nb: n for nb, n in counts.items() if n > 30}
