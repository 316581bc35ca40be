"""The run folders of the seeds whose every arm has finished: what a session commits of a long pre-registered run.

    python scripts/finished_seeds.py results/16_grpo_regime --arms bf16 plain mis sc          # list the folders
    git add $(python scripts/finished_seeds.py results/16_grpo_regime --arms bf16 plain mis sc)
    python scripts/finished_seeds.py results/13_confirmatory --tag lr0.5 --arms bf16 plain sc   # one family of 13

A run folder is `<tag>-<arm>-s<seed>-<config_id>` or `<arm>-s<seed>-<config_id>` (`scrl_min.with_run_dir`); it has
finished when its metrics.jsonl holds one line per step of its config.json. A seed is listed only when each of the
given arms has exactly one finished folder for it, so the committed records hold whole seeds (within a seed one
machine: notebooks 13 and 16's amendment). Checkpoints and locks are git-ignored (.gitignore). Prints one folder per
line; the counts go to stderr.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

FOLDER = re.compile(r"^(?:.*-)?(?P<arm>[a-z0-9_]+)-s(?P<seed>\d+)-[0-9a-f]{8}$")


def finished(folder: Path) -> bool:
    """True when folder's metrics.jsonl has one line per step of its config.json."""
    config, metrics = folder / "config.json", folder / "metrics.jsonl"
    if not (config.exists() and metrics.exists()):
        return False
    steps = json.loads(config.read_text())["steps"]
    return sum(1 for line in metrics.read_text().splitlines() if line.strip()) == steps


def finished_seeds(root: Path, arms: list, tag: str = "") -> dict:
    """{seed: [folders]} of the seeds under root whose every arm has exactly one finished run folder (only the
    folders named `<tag>-...` when a tag is given: notebook 13 names its two families' runs lr0.5-, lr0.25-)."""
    by_seed = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        m = FOLDER.match(folder.name)
        if tag and not folder.name.startswith(f"{tag}-"):
            continue
        if m and m["arm"] in arms and finished(folder):
            by_seed.setdefault(int(m["seed"]), {}).setdefault(m["arm"], []).append(folder)
    return {s: [f for a in arms for f in runs[a]] for s, runs in sorted(by_seed.items())
            if all(len(runs.get(a, [])) == 1 for a in arms)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", type=Path, help="the notebook's runs folder, e.g. results/16_grpo_regime")
    ap.add_argument("--arms", nargs="+", required=True, help="every arm a seed must have finished")
    ap.add_argument("--tag", default="", help="only the run folders named <tag>-<arm>-s<seed>-<id>")
    args = ap.parse_args(argv)
    if not args.root.is_dir():
        raise SystemExit(f"{args.root} is not a folder")
    seeds = finished_seeds(args.root, args.arms, args.tag)
    for folders in seeds.values():
        for f in folders:
            print(f)
    print(f"{len(seeds)} whole seeds ({', '.join(map(str, seeds)) or 'none'}) of arms {args.arms}", file=sys.stderr)


if __name__ == "__main__":
    main()
