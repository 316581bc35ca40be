"""scripts/finished_seeds.py lists only whole seeds (every arm finished), on made-up folders and on notebook 13's
committed run records."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import finished_seeds  # noqa: E402


def make_run(root: Path, name: str, steps: int, lines: int) -> None:
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"steps": steps}))
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": i}) + "\n" for i in range(lines)))


def test_only_seeds_with_every_arm_finished_are_listed(tmp_path):
    for arm in ("bf16", "plain", "sc"):
        make_run(tmp_path, f"{arm}-s2000-0123abcd", 3, 3)  # seed 2000: whole
    make_run(tmp_path, "bf16-s2001-0123abcd", 3, 3)
    make_run(tmp_path, "plain-s2001-0123abcd", 3, 2)  # unfinished
    make_run(tmp_path, "sc-s2001-0123abcd", 3, 3)
    make_run(tmp_path, "bf16-s2002-0123abcd", 3, 3)  # seed 2002: an arm missing
    got = finished_seeds.finished_seeds(tmp_path, ["bf16", "plain", "sc"])
    assert list(got) == [2000]
    assert [f.name for f in got[2000]] == ["bf16-s2000-0123abcd", "plain-s2000-0123abcd", "sc-s2000-0123abcd"]


def test_notebook_13s_records_are_36_whole_seeds():
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "finished_seeds.py"), "results/13_confirmatory",
                          "--tag", "lr0.5", "--arms", "bf16", "plain", "baseline", "tis", "mis", "sc", "sc_baseline"],
                         cwd=REPO, capture_output=True, text=True, check=True)
    folders = out.stdout.split()
    assert len(folders) == 36 * 7 and "36 whole seeds" in out.stderr
    assert all(Path(REPO / f, "metrics.jsonl").exists() for f in folders)
