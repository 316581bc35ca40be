"""Seed check of notebook 02's headline settings: arms bf16 / plain / sc, raw and signed advantages,
σ = 0.1, seeds 0, 1 and 2. About 22 minutes on 2 CPU cores after `make reproduce`.

    python scripts/seed_check.py      # runs into runs/02_fp8_arms/, writes figures/02_seed_check.json

Run folders are named as notebook 02 names them (`scrl_min.with_run_dir`), so the seed-0 runs that
`make reproduce` made are reused as they are (a finished run is not re-run); without them they are
trained here too (about 11 minutes more).
"""
import argparse
import json

import numpy as np

from scrl_min import arm_config, train_many, with_run_dir
from scrl_min.core import REPO_ROOT

ARMS, MODES, SEEDS, WINDOW, SIGMA = ["bf16", "plain", "sc"], ["raw", "signed"], [0, 1, 2], 30, 0.1


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    cfgs = {}
    for m in MODES:
        for a in ARMS:
            for s in SEEDS:
                cfg = arm_config(a, seed=s, steps=100, advantage_mode=m,
                                 **({} if a == "bf16" else {"noise_std": SIGMA}))
                cfgs[(m, a, s)] = with_run_dir(cfg, REPO_ROOT / "runs" / "02_fp8_arms", f"{m}-{a}-s{s}")
    recs = dict(zip(cfgs, train_many(list(cfgs.values()), workers=2)))
    out = {}
    for m in MODES:
        for a in ARMS:
            finals = [float(np.mean([r["reward"] for r in recs[(m, a, s)][-WINDOW:]])) for s in SEEDS]
            out[f"{m}/{a}"] = {"final_reward_per_seed": finals, "mean": float(np.mean(finals)),
                               "std": float(np.std(finals))}
            print(f"{m:7s}{a:6s} seeds {','.join(map(str, SEEDS))}: {' '.join(f'{f:.3f}' for f in finals)}"
                  f"  mean {np.mean(finals):.3f} ± {np.std(finals):.3f}")
    (REPO_ROOT / "figures" / "02_seed_check.json").write_text(json.dumps(
        {"window": WINDOW, "seeds": SEEDS, "noise_std": SIGMA, "steps": 100, "final": out}, indent=1))
