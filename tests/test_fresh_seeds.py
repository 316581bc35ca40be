"""scrl_min.seeds_named_elsewhere, the fresh-seed check of the pre-registered notebooks (13, 16): every place a seed
can be named is read, and the notebook's own files are left out."""
import json
from pathlib import Path

from scrl_min import seeds_named_elsewhere


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_every_kind_of_place_is_read_and_the_notebooks_own_left_out(tmp_path):
    write(tmp_path, "figures/02_x.json", json.dumps({"parameters": {"seeds": [5, 6], "probe_seeds": [4]}, "n": 99}))
    write(tmp_path, "figures/99_me.json", json.dumps({"parameters": {"seeds": [90]}}))  # the notebook's own
    write(tmp_path, "figures/verdict.json", json.dumps({"regime": {"parameters": {"seeds": [90, 94]}}}))  # restated
    write(tmp_path, "figures/sub/verdict.json", json.dumps({"seeds": [14]}))  # only figures/verdict*.json is skipped
    write(tmp_path, "results/07_x/run-a/config.json", json.dumps({"seed": 7, "steps": 100}))
    write(tmp_path, "results/99_me/run-b/config.json", json.dumps({"seed": 91}))  # the notebook's own records
    write(tmp_path, "notebooks/01_a.py", '# %% tags=["parameters"]\nseed = 3  # a seed\n\n# %%\nseed = 50  # not a parameter\n')
    write(tmp_path, "notebooks/99_me.py", '# %% tags=["parameters"]\nfirst_seed = 92\n')
    write(tmp_path, "notebooks/p.yaml", "01_a:\n  seeds: [8]\n99_me:\n  first_seed: 93\n")
    write(tmp_path, "tests/test_t.py", "run(seed=10)\n")
    write(tmp_path, "scripts/s.py", "seeds = range(11, 13)\n")
    named = seeds_named_elsewhere("99_me", root=tmp_path)
    assert sorted(named) == [3, 4, 5, 6, 7, 8, 10, 11, 12, 14]
    assert named[7] == ["results/07_x/run-a/config.json"] and named[3] == ["notebooks/01_a.py"]


def test_the_committed_blocks_are_fresh_for_their_own_notebooks():
    assert not set(range(1000, 1036)) & set(seeds_named_elsewhere("13_"))
    assert not set(range(2000, 2085)) & {s for s, files in seeds_named_elsewhere("16_grpo_regime").items()}
