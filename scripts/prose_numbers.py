"""Bind every measured number quoted in a notebook's results prose to the JSON value it quotes.

    python scripts/prose_numbers.py            # check: every quoted number bound, every bound value rounds to it
    python scripts/prose_numbers.py --update   # (re)bind the numbers that changed, keep the rest, report unbound
    python scripts/prose_numbers.py --suggest  # after a rerun: each bound number's new value, written as quoted

The results prose is the markdown from a notebook's "## What we saw" / "## What the ... show(s)" heading to its end.
A quoted number is a decimal (0.213, −0.19, 3.36%, 1.5e-2; integers are counts and are not checked) that is not a
bound such as "p < 0.001". `notebooks/prose_numbers.yaml` binds each one, in the order they appear, to a value in
the notebook's own JSON (figures/NN_*.json, figures/replicates/<cpu>/NN_*.json) or the verdict's (figures/verdict_forest.json):
`{text, before, json, path}`; `path` is a list of keys and list indices. A number in no JSON but printed by one of
the notebook's own cells is bound to that cell's output (`output_of_cell`: the number as written must appear there).
A number in neither (a ratio of two quoted numbers, a figure from another notebook or the literature) carries
`unbound: <why>` instead, written by hand. The check (tests/test_prose_numbers.py) fails when a quoted number has no
binding (the prose changed: rerun with --update), when a binding's value no longer rounds to the quoted text (the
JSON changed under the prose: a rerun that needs its prose rewritten), or when a bound number's text changed.

Binding picks, among the JSON values that round to the number (the number's own decimals; a percentage is the
value × 100; a magnitude may quote |value|), one in the notebook's own JSON over one in the verdict's (its forest
holds hundreds of numbers, many coincidental matches), then the one whose key path shares the most words with the
80 characters before the number, then the shortest path; values inside long numeric lists (curves over steps) are
not used: a verdict value is bound only where the notebook's own JSON holds none (a pooled number quoting the
verdict while its own JSON holds the same digits by chance is one for a hand audit).
A rerun that moves a number keeps the sentence: `--update` then rebinds the new digits to the path their old entry
had (same key path, the context equal with every number masked) when that path's new value rounds to them, and
marks an `unbound` entry whose number changed for a hand rewrite (its old reason kept), instead of guessing again.
What this does not prove: that a first binding picked the value the sentence means (it is a best guess by context;
a wrong number written by hand can bind to a coincidental value). Its guarantee is the other way round: once bound,
a number cannot silently outlive a rerun that moves its value, and a number with no source must say why.
Settings (after σ, T, lr, k, C, α, margin) and bounds (after <, >, ≤, ≥, ≈) are not quoted numbers.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import nbformat
import yaml

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "notebooks" / "prose_numbers.yaml"
RESULTS_HEADING = re.compile(r"^#+\s*What (we saw|the [\w ]+ shows?)\b", re.M)
# a decimal or scientific number, optional sign (unicode minus too) and percent; not part of a word or a version
NUMBER = re.compile(r"(?<![\w.\-−/])([+\-−]?)"
                    r"(\d{1,3}(?:,\d{3})+\.\d+|\d+\.\d+(?:e[+\-−]?\d+)?|\d+e[+\-−]\d+)(%?)(?!\w|\.\d)")
BOUND_BEFORE = re.compile(r"(?:[<>≤≥≈~]|at most|below|above)\s*$")
# a setting, not a measurement: σ 0.1, T = 0.7, lr 0.25, k = 128, C = 2, α = 0.05, margin ±0.05
SETTING_BEFORE = re.compile(r"(?:σ|\b(?:T|lr|k|C|α|margin))\s*[=:]?\s*±?$")
MAX_LIST = 40  # numeric lists longer than this are curves over steps: their values are not bound


def results_prose(nb) -> str:
    """The markdown of the results section: from the first results heading to the end, cells joined by blank lines."""
    cells = [c.source for c in nb.cells if c.cell_type == "markdown"]
    start = next((i for i, src in enumerate(cells) if RESULTS_HEADING.search(src)), None)
    return "" if start is None else "\n\n".join(cells[start:])


def quoted_numbers(text: str) -> list:
    """[(text as written, value, decimals, percent, the 80 characters before)] of the measured numbers in `text`."""
    out = []
    for m in NUMBER.finditer(text):
        before = text[max(0, m.start() - 80):m.start()]
        if BOUND_BEFORE.search(before.replace("\n", " ")) or SETTING_BEFORE.search(before.replace("\n", " ")):
            continue
        sign, body, pct = m.groups()
        plain = body.replace(",", "").replace("−", "-")
        mant, _, exp = plain.partition("e")
        decimals = (len(mant.split(".")[1]) if "." in mant else 0) - (int(exp) if exp else 0)
        value = float(plain) * (-1 if sign in ("-", "−") else 1)
        out.append((m.group(0), value, decimals, bool(pct), before))
    return out


VERDICT = "figures/verdict_forest.json"


def sources(stem: str) -> dict:
    """{json file relative to the repo: its content} that a notebook's prose may quote."""
    files = sorted((REPO / "figures").glob(f"{stem[:2]}_*.json")) + sorted(
        (REPO / "figures" / "replicates").glob(f"*/{stem[:2]}_*.json")) + [REPO / VERDICT]
    return {str(f.relative_to(REPO)): json.loads(f.read_text()) for f in files if f.exists()}


def leaves(obj, path=()):
    """(path, value) of every number in a JSON tree, skipping numeric lists longer than MAX_LIST."""
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        yield path, float(obj)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, path + (k,))
    elif isinstance(obj, list):
        if len(obj) > MAX_LIST and all(isinstance(v, (int, float)) for v in obj):
            return
        for i, v in enumerate(obj):
            yield from leaves(v, path + (i,))


def rounds_to(value: float, quoted: float, decimals: int, pct: bool) -> bool:
    """Whether `value` (from the JSON) printed with the quote's decimals gives the quote (or its magnitude)."""
    v = value * 100 if pct else value
    tol = 0.5 * 10.0 ** -decimals * (1 + 1e-9) + 1e-12
    return abs(v - quoted) <= tol or abs(abs(v) - abs(quoted)) <= tol


def words(s: str) -> set:
    return {w for w in re.split(r"[^a-z0-9]+", s.lower()) if w and not w.isdigit()}


def bind(number, srcs: dict):
    """The best (json, path) whose value rounds to `number`, or None."""
    text, value, decimals, pct, before = number
    context, best = words(before[-80:]), None
    for name, data in srcs.items():
        for path, v in leaves(data):
            if rounds_to(v, value, decimals, pct):
                score = (name != VERDICT, len(context & words(" ".join(map(str, path)))), -len(path),
                         name.startswith("figures/0"))
                if best is None or score > best[0]:
                    best = (score, name, list(path))
    return None if best is None else (best[1], best[2])


def output_texts(nb) -> list:
    """The text outputs of each cell (index in nb.cells → text), with unicode minus written as '-'."""
    out = {}
    for i, c in enumerate(nb.cells):
        if c.cell_type == "code":
            out[i] = "\n".join(o.get("text") or "".join(o.get("data", {}).get("text/plain", ""))
                               for o in c.get("outputs", [])).replace("−", "-")
    return out


def in_output(text: str, outs: dict):
    """The first code cell whose printed output shows `text` as written (sign aside), or None."""
    bare = re.sub(r"^[+\-−]", "", text).replace("−", "-")
    pattern = re.compile(r"(?<![\w.])[+\-]?" + re.escape(bare) + r"(?![\w.])")
    return next((i for i, t in outs.items() if pattern.search(t)), None)


def value_at(data, path):
    for k in path:
        data = data[k]
    return data


def notebooks() -> list:
    """The notebooks with committed outputs and a results section."""
    out = []
    for p in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(p, as_version=4)
        if "scrl_min_run" in nb.metadata and results_prose(nb):
            out.append((p.stem, nb))
    return out


def binding_problem(entry: dict, number, srcs: dict, outs: dict):
    """Why a binding no longer holds for the quoted `number` (a `quoted_numbers` tuple), or None when it holds.
    srcs: the notebook's `sources`; outs: its `output_texts`. An `unbound` entry holds as long as its text does."""
    text, value, decimals, pct, _ = number
    if entry["text"] != text:
        return f"bound to '{entry['text']}': the prose changed, run --update"
    if "unbound" in entry:
        return None
    if "output_of_cell" in entry:
        cell = entry["output_of_cell"]
        return None if in_output(text, {cell: outs.get(cell, "")}) is not None else \
            f"cell {cell}'s output no longer shows it"
    if entry["json"] not in srcs:
        return f"{entry['json']} is gone"
    try:
        v = value_at(srcs[entry["json"]], entry["path"])
    except (KeyError, IndexError, TypeError):
        return f"{entry['json']} has no {entry['path']}"
    if not rounds_to(float(v), value, decimals, pct):
        return f"{entry['json']} {entry['path']} is now {v}: the prose quotes an older run"
    return None


def check(lock: dict) -> list:
    """Problems, one line each (empty when every quoted number is bound and still true)."""
    problems = []
    for stem, nb in notebooks():
        nums, entries, srcs = quoted_numbers(results_prose(nb)), lock.get(stem) or [], sources(stem)
        if len(nums) != len(entries):
            problems.append(f"{stem}: {len(nums)} quoted numbers, {len(entries)} bindings: the prose changed, "
                            f"run scripts/prose_numbers.py --update")
        outs = output_texts(nb)
        for number, e in zip(nums, entries):
            problem = binding_problem(e, number, srcs, outs)
            if problem:
                where = f"{stem}: '{number[0]}' after '…{number[4][-40:]}'".replace("\n", " ")
                problems.append(f"{where}: {problem}")
    return problems


def masked(s: str) -> str:
    """`s` with every number (digits, separators, sign) as '#': a context that survives a rerun's new digits."""
    return re.sub(r"[+\-−]?\d+(?:[.,]\d+)*(?:e[+\-−]?\d+)?%?", "#", s)


def same_sentence(entry: dict, before: str) -> bool:
    """Whether an old entry's 40-character context is `before`'s (80 characters) with only numbers changed: equal
    once masked, from the first whole word of the old context on (its first word may be cut)."""
    tail = masked(entry.get("before", ""))
    tail = tail[tail.find(" ") + 1:] if " " in tail else tail
    return bool(tail.strip()) and masked(before).endswith(tail)


def carried_over(entry: dict, number, srcs: dict, outs: dict):
    """The new entry for `number` from an old `entry` of the same sentence whose number changed, or None: a JSON
    binding keeps its path when that path's value rounds to the new text; an `unbound` one is marked for a hand
    rewrite with its old reason."""
    text, before = number[0], number[4]
    if "unbound" in entry:
        reason = entry["unbound"].removeprefix("TODO: rewrite for the new value; was: ")
        return dict(text=text, before=before[-40:], unbound=f"TODO: rewrite for the new value; was: {reason}")
    moved = {k: v for k, v in entry.items() if k in ("json", "path", "output_of_cell")}
    candidate = dict(text=text, before=before[-40:], **moved)
    return candidate if binding_problem(candidate, number, srcs, outs) is None else None


def update(lock: dict) -> dict:
    """Keep bindings that still hold (same text and context, `binding_problem` None; an `unbound` one only with its
    reason written); carry a binding over to the same sentence's new digits (`carried_over`); bind the others by
    context; mark the unbindable."""
    new = {}
    for stem, nb in notebooks():
        old, srcs, entries, outs = list(lock.get(stem) or []), sources(stem), [], output_texts(nb)
        for number in quoted_numbers(results_prose(nb)):
            text, value, decimals, pct, before = number
            keep = next((e for e in old if e["text"] == text and e.get("before") == before[-40:]), None)
            if keep is not None:
                old.remove(keep)
                if binding_problem(keep, number, srcs, outs) is None and "TODO" not in keep.get("unbound", ""):
                    entries.append(keep)
                    continue
            else:
                same = next((e for e in old if same_sentence(e, before)), None)
                carried = None if same is None else carried_over(same, number, srcs, outs)
                if carried is not None:
                    old.remove(same)
                    entries.append(carried)
                    continue
            found, cell = bind(number, srcs), None
            if found is None:
                cell = in_output(text, outs)
            entry = dict(text=text, before=before[-40:])
            if found:
                entry.update(json=found[0], path=found[1])
            elif cell is not None:
                entry["output_of_cell"] = cell
            else:
                entry["unbound"] = "TODO: say where this number comes from (derived from ..., quoted from ...)"
            entries.append(entry)
        new[stem] = entries
    return new


def requote(text: str, value: float) -> str:
    """`value` written the way `text` quotes a number: its decimals, its percent sign, its minus (unicode or
    ASCII) and an explicit + where it had one; a magnitude-only quote (no sign, negative value) stays unsigned."""
    _, quoted, decimals, pct, _ = quoted_numbers(f" {text}")[0]
    v = value * 100 if pct else value
    if quoted >= 0 and not text.startswith("+") and v < 0:
        v = abs(v)  # the prose quotes a magnitude (rounds_to accepts it)
    body = f"{abs(v):.{max(decimals, 0)}f}" + ("%" if pct else "")
    minus = "−" if "−" in text else "-"
    sign = minus if v < 0 and float(body.rstrip("%")) != 0 else ("+" if text.startswith("+") else "")
    return sign + body


def suggestions(lock: dict) -> list:
    """(stem, old text, new text, context) for every JSON-bound number whose value moved beyond its rounding (a
    rerun): the new value written as the prose wrote the old one. An aid to rewriting the prose by hand; the
    sentences around the numbers (what excludes 0, which arm leads) are the rewriter's to check."""
    out = []
    for stem, nb in notebooks():
        srcs = sources(stem)
        for (text, value, decimals, pct, before), e in zip(quoted_numbers(results_prose(nb)), lock.get(stem) or []):
            if "json" not in e or e["text"] != text or e["json"] not in srcs:
                continue
            try:
                v = float(value_at(srcs[e["json"]], e["path"]))
            except (KeyError, IndexError, TypeError):
                continue  # a path that is gone: the check names it
            if not rounds_to(v, value, decimals, pct):
                out.append((stem, text, requote(text, v), before[-40:].replace("\n", " ")))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--update", action="store_true", help="rebind what changed and write notebooks/prose_numbers.yaml")
    ap.add_argument("--suggest", action="store_true",
                    help="print each bound number whose JSON value moved, with its new value written as quoted")
    args = ap.parse_args(argv)
    lock = yaml.safe_load(LOCK.read_text()) if LOCK.exists() else {}
    if args.suggest:
        for stem, old, new, before in suggestions(lock):
            print(f"{stem}: {old!r} -> {new!r} after …{before!r}")
    if args.update:
        lock = update(lock)
        head = "# Written by scripts/prose_numbers.py --update (see its docstring); `unbound` reasons by hand.\n"
        LOCK.write_text(head + yaml.safe_dump(lock, allow_unicode=True, sort_keys=True, width=200))
        todo = [(s, e["text"], e["before"]) for s, es in lock.items() for e in es if "TODO" in e.get("unbound", "")]
        print(f"{sum(map(len, lock.values()))} numbers in {len(lock)} notebooks; {len(todo)} unbound, to explain:")
        for s, t, b in todo:
            print(f"  {s}: {t!r} after …{b!r}")
    problems = check(lock)
    print("\n".join(problems) if problems else "every quoted number is bound and rounds to its JSON value")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
