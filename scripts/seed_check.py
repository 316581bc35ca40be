"""Seed check of notebook 02's headline settings: arms bf16 / plain / sc, raw and signed advantages,
σ = 0.1, seeds 1 and 2 (seed 0 is notebook 02's own run). About 22 minutes on 2 CPU cores.

    python scripts/seed_check.py      # runs into runs/seeds/, writes figures/02_seed_check.json

Needs notebook 02's full-size seed-0 runs in runs/02_fp8_arms/ (`make reproduce` first); it checks
for them before starting anything.
"""
import argparse
import json
import sys

import numpy as np

from scrl_min import TrainConfig, train_many
from scrl_min.core import REPO_ROOT

ARMS, MODES, SEEDS, WINDOW = ["bf16", "plain", "sc"], ["raw", "signed"], [1, 2], 30


def seed0_dir(mode, arm):  # notebook 02's folder naming
    tag = f"{mode}-{arm}-s0" if arm == "bf16" else f"{mode}-{arm}-n0.1-s0"
    return REPO_ROOT / "runs" / "02_fp8_arms" / tag


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    missing = [str(seed0_dir(m, a)) for m in MODES for a in ARMS
               if not (seed0_dir(m, a) / "metrics.jsonl").exists()]
    if missing:
        sys.exit(f"seed_check: seed 0 comes from notebook 02's runs, and these are missing: {missing}; "
                 f"run `make reproduce` (or notebook 02 at full size) first")
    cfgs = {(m, a, s): TrainConfig(arm=a, seed=s, steps=100, advantage_mode=m, noise_std=0.1,
                                   out_dir=str(REPO_ROOT / "runs" / "seeds" / f"{m}-{a}-s{s}"))
            for m in MODES for a in ARMS for s in SEEDS}
    recs = dict(zip(cfgs, train_many(list(cfgs.values()), workers=2)))
    out = {}
    for m in MODES:
        for a in ARMS:
            runs = [[json.loads(line) for line in open(seed0_dir(m, a) / "metrics.jsonl")]]
            runs += [recs[(m, a, s)] for s in SEEDS]
            finals = [float(np.mean([r["reward"] for r in run[-WINDOW:]])) for run in runs]
            out[f"{m}/{a}"] = {"final_reward_per_seed": finals, "mean": float(np.mean(finals)),
                               "std": float(np.std(finals))}
            print(f"{m:7s}{a:6s} seeds 0,1,2: {' '.join(f'{f:.3f}' for f in finals)}  "
                  f"mean {np.mean(finals):.3f} ± {np.std(finals):.3f}")
    (REPO_ROOT / "figures" / "02_seed_check.json").write_text(json.dumps(
        {"window": WINDOW, "seeds": [0] + SEEDS, "noise_std": 0.1, "steps": 100, "final": out}, indent=1))
