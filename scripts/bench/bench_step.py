"""Step time of the project's trainer, this tree against an earlier commit (a benchmark, not a test).

The work of one default RL step: the `sc` arm, 8 prompts × 4 completions, up to 24 tokens, the FP8
W8A8 TorchSampler (emulated GEMMs, σ = 0.1 weight noise, k = 128 head), trainer forward and
backward in float32, one SGD step, weight push; one CPU thread. The clean evaluation and the
drift measurement of this tree are turned off (eval_every=0, measure_drift=False): the baseline has
neither, so both sides do the same work.

How: the baseline commit is exported with `git archive` into a temporary folder; one child process
per side imports `scrl_min` from its tree (PYTHONPATH) and builds a Trainer (not timed); then
--rounds rounds, one step of each side in turn, so that load from other jobs falls on both alike;
the first round is a warm-up and dropped; the per-side number is the median (all steps are in the
JSON). Generation (`sampler.generate`) is timed inside the step.

Same numbers: on one fixed batch (the same prompts and sampling seed on both sides) each side
returns its sampled tokens, sampler log-probs, trainer log-probs, loss and gradient; the JSON gives
whether the tokens are equal and the largest differences.

    OMP_NUM_THREADS=1 python scripts/bench/bench_step.py --baseline 600165f --rounds 15 --out figures/bench_step.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def child(out_dir: str) -> None:
    """One side: build the trainer, then answer 'step' (one timed step) or 'batch PATH' (fixed batch)."""
    import dataclasses

    import torch

    torch.set_num_threads(1)
    import scrl_min
    from scrl_min import TrainConfig

    fields = {f.name for f in dataclasses.fields(TrainConfig)}  # the baseline has neither of these
    extra = {f: v for f, v in (("eval_every", 0), ("measure_drift", False)) if f in fields}
    tr = scrl_min.Trainer(scrl_min.arm_config("sc", steps=10_000, out_dir=out_dir, progress=False, **extra))
    (tr.resume if hasattr(tr, "resume") else tr._resume)()  # public since the driver split; the baseline has _resume
    gen = {"s": 0.0}
    real = tr.sampler.generate

    def timed(*a, **kw):
        t0 = time.perf_counter()
        ro = real(*a, **kw)
        gen["s"] += time.perf_counter() - t0
        return ro

    tr.sampler.generate = timed
    print(json.dumps({"ready": scrl_min.__file__}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "step":
            gen["s"] = 0.0
            t0 = time.perf_counter()
            tr.train_step()
            print(json.dumps({"step_s": time.perf_counter() - t0, "gen_s": gen["s"]}), flush=True)
        elif cmd[0] == "batch":  # a fixed batch, for the same-numbers check
            prompts = [tr.prompt_ids[i] for i in range(8) for _ in range(4)]
            ro = real(prompts, 24, tr.eos_id, tr.tok.pad_token_id, generator=torch.Generator().manual_seed(0))
            logp, logp_head = scrl_min.trainer_logprobs(tr.policy, ro, 1.0)[:2]
            per_token, _ = scrl_min.score_centered_pg_loss(logp, logp_head, ro.sampler_logp, ro.head_logp,
                                                           torch.linspace(0, 1, 32), ro.completion_mask)
            loss = scrl_min.reduce_loss(per_token, ro.completion_mask)
            tr.policy.zero_grad()
            loss.backward()
            torch.save(dict(ids=ro.completion_ids, mask=ro.completion_mask, slogp=ro.sampler_logp,
                            logp=logp.detach(), loss=loss.detach(),
                            grad=torch.cat([p.grad.flatten() for p in tr.policy.parameters()])), cmd[1])
            print(json.dumps({"saved": cmd[1]}), flush=True)


def _cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo), else what platform knows."""
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


class Side:
    def __init__(self, name: str, tree: Path, out_dir: str):
        env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
        self.name, self.steps, self.gen = name, [], []
        self.p = subprocess.Popen([sys.executable, __file__, "--child", out_dir], cwd=tree, env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.module = self.ask(None)["ready"]

    def ask(self, cmd):
        if cmd is not None:
            self.p.stdin.write(cmd + "\n")
            self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise SystemExit(f"bench_step: the {self.name} side stopped (see its error above)")
        return json.loads(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--baseline", default="600165f", help="git commit to compare with (default: before the speed work)")
    ap.add_argument("--rounds", type=int, default=15, help="rounds of one step per side; the first is a warm-up")
    ap.add_argument("--out", default="runs/bench_step.json", help="where the numbers go")
    a = ap.parse_args()
    if a.child:
        return child(a.child)
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        base.mkdir()
        archive = subprocess.run(["git", "archive", a.baseline], cwd=REPO, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        sides = [Side("baseline", base, str(Path(tmp) / "run_base")), Side("this tree", REPO, str(Path(tmp) / "run_new"))]
        for s in sides:
            print(f"{s.name}: scrl_min from {s.module}")
        batches = []
        for s in sides:
            path = str(Path(tmp) / f"{len(batches)}.pt")
            s.ask(f"batch {path}")
            batches.append(torch.load(path))
        for r in range(a.rounds):
            recs = [s.ask("step") for s in sides]
            if r > 0:  # round 0 is the warm-up
                for s, rec in zip(sides, recs):
                    s.steps.append(rec["step_s"])
                    s.gen.append(rec["gen_s"])
            print(f"round {r + 1}/{a.rounds}: " + "  ".join(f"{s.name} {rec['step_s']:.3f} s"
                                                             for s, rec in zip(sides, recs)), flush=True)
        for s in sides:
            s.p.stdin.close()
            s.p.wait()
    old, new = batches
    m = old["mask"]
    same = dict(tokens_equal=bool(torch.equal(old["ids"], new["ids"])),
                sampler_logp_max_abs_diff=float((old["slogp"] - new["slogp"])[m].abs().max()),
                trainer_logp_max_abs_diff=float((old["logp"] - new["logp"])[m].abs().max()),
                loss_abs_diff=float((old["loss"] - new["loss"]).abs()),
                grad_rel_diff=float((old["grad"] - new["grad"]).norm() / old["grad"].norm()))
    base_s, new_s = (statistics.median(s.steps) for s in sides)
    ratios = [b / n for b, n in zip(sides[0].steps, sides[1].steps)]
    res = dict(
        baseline=a.baseline, rounds=a.rounds, threads=1, machine=_cpu_model(),
        cpus=os.cpu_count(), load_average=os.getloadavg(),
        work="sc arm, 8 prompts x 4 completions x <=24 tokens, FP8 W8A8 emulated, sigma 0.1, k 128, SGD",
        median_step_s={"baseline": base_s, "this_tree": new_s},
        median_generation_s={"baseline": statistics.median(sides[0].gen), "this_tree": statistics.median(sides[1].gen)},
        speedup_of_medians=base_s / new_s, median_of_paired_speedups=statistics.median(ratios),
        same_numbers_on_a_fixed_batch=same,
        steps_s={"baseline": sides[0].steps, "this_tree": sides[1].steps})
    print(json.dumps({k: v for k, v in res.items() if k != "steps_s"}, indent=1))
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    print(f"saved {a.out}")


if __name__ == "__main__":
    main()
