"""Step time: the project's Trainer vs TRL's GRPOTrainer with score centering, and SC on vs off in TRL
(a benchmark, not a test).

The same work in every arm: the embedded tiny Qwen3 in float32, 8 prompts × 4 completions per step, up to 24
generated tokens, the FP8 TorchSampler (emulated GEMMs, σ = 0.1 weight noise) with its top-k head (k = 128, --k), one
SGD step (lr 0.5, no gradient clipping), no importance weighting, group-normalized advantages:
  * scrl_min         `scrl_min.Trainer.train_step()` with the `sc` arm (advantage_mode grpo);
  * trl_sc           `ScoreCenteringGRPOTrainer` (TRL 1.16), score_centering=True, loss_type dapo (the token mean
                     over the batch: the project's reduction), vllm_importance_sampling_correction=False;
  * trl_plain        the same with score_centering=False: TRL's own loss, nothing extra computed.
A step is everything between two optimizer steps: weight push, generation, reward, advantages, loss, backward,
optimizer (TRL: on_step_begin → on_step_end, so TRL's logging and the `step_time` it logs are inside). Generation
time is measured separately in every arm (the same `TorchSampler.generate`, timed by a wrapper).

Timing: each arm's trainer is built once (not timed); then --rounds rounds, each one step of every arm in turn (the
two TRL arms swap places every other round), so that load from other jobs on the machine falls on all arms alike; the
first round is a warm-up and dropped; the per-arm number is the median over the other rounds (all steps are in the
JSON, with the minor page faults each step took). Results go to stdout and to --out.

    OMP_NUM_THREADS=1 python scripts/bench/bench_trl.py --out figures/bench_trl.json

glibc's malloc returns freed memory at the top of its heap to the OS once it exceeds a threshold, and serves large
blocks from fresh mmap'd pages until its dynamic threshold rises; each fresh page costs a minor fault when first
written (about 2 µs on the AMD EPYC with AVX-512 of docs/benchmarks.md's run), and how many a step takes depends on
the heap's layout, which every allocation moves: from about 15,000 to over 100,000 a step in either TRL arm. The JSON records them, and the difference SC makes at equal
faults (`_paired_stats`). Fixing the thresholds makes every arm reuse its memory (glibc's own settings, recorded under
"allocator" in the JSON; docs/benchmarks.md has both runs):

    MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296 OMP_NUM_THREADS=1 python scripts/bench/bench_trl.py
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import PrinterCallback, TrainerCallback

import scrl_min
from scrl_min.driver import cpu_record
from scrl_min.trl import task_trainer

PROMPTS, GROUP, TOKENS, LR, SIGMA = 8, 4, 24, 0.5, 0.1


class _GenTimer:
    """Wraps sampler.generate: accumulates its wall time and the generated tokens."""

    def __init__(self, sampler):
        self.seconds, self.tokens, self._generate = 0.0, 0, sampler.generate
        sampler.generate = self

    def __call__(self, *a, **kw):
        t0 = time.perf_counter()
        ro = self._generate(*a, **kw)
        self.seconds += time.perf_counter() - t0
        self.tokens += int(ro.completion_mask.sum())
        return ro


class _StepTimer(TrainerCallback):
    def __init__(self, gen: _GenTimer):
        self.gen, self.steps = gen, []

    def on_step_begin(self, args, state, control, **kw):
        self._f0 = _minor_faults()
        self._t0, self._g0, self._n0 = time.perf_counter(), self.gen.seconds, self.gen.tokens

    def on_step_end(self, args, state, control, **kw):
        t1 = time.perf_counter()
        self.steps.append(dict(seconds=t1 - self._t0, generate_s=self.gen.seconds - self._g0,
                               tokens=self.gen.tokens - self._n0, minor_faults=_minor_faults() - self._f0))


def _minor_faults() -> int:
    """This process's minor page faults so far (getrusage): each is a fresh page touched for the first time."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class ScrlMinArm:
    """The project's Trainer, one `train_step()` per call."""

    def __init__(self, tmp: str, k: int = 128):
        cfg = scrl_min.arm_config("sc", prompts_per_step=PROMPTS, group_size=GROUP, max_new_tokens=TOKENS, lr=LR,
                                  noise_std=SIGMA, advantage_mode="grpo", out_dir=tmp, progress=False, k=k)
        self.tr = scrl_min.Trainer(cfg)
        self.tr.sampler.push_weights(self.tr.policy.state_dict())  # what Trainer.train does first
        self.gen = _GenTimer(self.tr.sampler)

    def step(self) -> dict:
        f0 = _minor_faults()
        g0, n0, t0 = self.gen.seconds, self.gen.tokens, time.perf_counter()
        self.tr.train_step()
        t1 = time.perf_counter()
        return dict(seconds=t1 - t0, generate_s=self.gen.seconds - g0, tokens=self.gen.tokens - n0,
                    minor_faults=_minor_faults() - f0)


class TRLArm:
    """ScoreCenteringGRPOTrainer with max_steps=1: each call is one `trainer.train()`, timed from on_step_begin to
    on_step_end (the set-up `train()` does around its loop is not in the number)."""

    def __init__(self, tmp: str, centering: bool, k: int = 128):
        self.tr = task_trainer(tmp, n_prompts=64, score_centering=centering, max_steps=1, use_cpu=True,
                               per_device_train_batch_size=PROMPTS * GROUP, num_generations=GROUP,
                               max_completion_length=TOKENS, loss_type="dapo",
                               vllm_importance_sampling_correction=False, optim="sgd", learning_rate=LR,
                               lr_scheduler_type="constant", max_grad_norm=0.0, sampler_noise_std=SIGMA,
                               score_centering_top_k=k)
        self.tr.remove_callback(PrinterCallback)
        self.timer = _StepTimer(_GenTimer(self.tr.sampler))
        self.tr.add_callback(self.timer)

    def step(self) -> dict:
        self.tr._pushed_step = None  # every train() restarts at global step 0: push the current weights again
        self.tr.train()
        return self.timer.steps[-1]


def _paired_stats(a: list, b: list) -> dict:
    """Arm a over arm b, round by round: the mean of the per-round ratios with its 95% t-interval, and the same
    difference at equal page faults: the least-squares line Δseconds = δ + β · Δfaults over the rounds (Δ = a − b),
    whose intercept δ, over b's median step (its faults included), is a's extra time where both arms touched as
    many fresh pages (`paired_*_at_equal_faults`; β is the seconds a fault costs, as the rounds measure it). The
    interval needs 2 rounds and the line 3 whose fault differences are not all equal; where they are missing the
    fields are null."""
    from scipy import stats
    ratios = [x["seconds"] / y["seconds"] for x, y in zip(a, b)]
    dt = [x["seconds"] - y["seconds"] for x, y in zip(a, b)]
    df = [x["minor_faults"] - y["minor_faults"] for x, y in zip(a, b)]
    n, mean = len(ratios), statistics.fmean(ratios)
    out = dict(mean_trl_sc_over_trl_plain=round(mean, 4), mean_trl_sc_over_trl_plain_95ci=None,
               paired_trl_sc_over_trl_plain_at_equal_faults=None,
               paired_trl_sc_over_trl_plain_at_equal_faults_95ci=None, seconds_per_fault=None,
               median_extra_faults_trl_sc=statistics.median(df))
    if n >= 2:
        half = float(scrl_min.mean_ci95(ratios)[1])
        out["mean_trl_sc_over_trl_plain_95ci"] = [round(mean - half, 4), round(mean + half, 4)]
    if n >= 3 and len(set(df)) > 1:
        fit = stats.linregress(df, dt)
        half_d = stats.t.ppf(0.975, n - 2) * fit.intercept_stderr
        base = statistics.median(y["seconds"] for y in b)
        out.update(paired_trl_sc_over_trl_plain_at_equal_faults=round(1 + fit.intercept / base, 4),
                   paired_trl_sc_over_trl_plain_at_equal_faults_95ci=[round(1 + (fit.intercept - half_d) / base, 4),
                                                                      round(1 + (fit.intercept + half_d) / base, 4)],
                   seconds_per_fault=fit.slope)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=11, help="rounds of one step per arm (the first is a warm-up)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench_trl.json"))
    ap.add_argument("--k", type=int, default=128, help="head size: top-k sampler log-probs per token, every arm")
    args = ap.parse_args(argv)
    if args.rounds < 2:
        ap.error("--rounds must be >= 2 (the first round is a warm-up)")
    load0 = os.getloadavg()[0]  # other jobs on the machine: the numbers depend on them
    with tempfile.TemporaryDirectory() as tmp:
        arms = {"scrl_min": ScrlMinArm(tmp + "/scrl_min", args.k), "trl_sc": TRLArm(tmp + "/trl_sc", True, args.k),
                "trl_plain": TRLArm(tmp + "/trl_plain", False, args.k)}
        kept = {arm: [] for arm in arms}
        for r in range(args.rounds):
            line = []
            # the two TRL arms swap places every other round: what one arm leaves in the allocator's heap falls on
            # each of them alike
            names = list(arms) if r % 2 == 0 else ["scrl_min", "trl_plain", "trl_sc"]
            for arm in names:
                s = arms[arm].step()
                if r > 0:
                    kept[arm].append(s)
                line.append(f"{arm} {s['seconds']:.2f}s")
            print(f"round {r}{' (warm-up)' if r == 0 else ''}: " + ", ".join(line), flush=True)
    res = {}
    for arm, steps in kept.items():
        med = lambda key: statistics.median(s[key] for s in steps)
        res[arm] = dict(step_s=round(med("seconds"), 3), generate_s=round(med("generate_s"), 3),
                        rest_s=round(statistics.median(s["seconds"] - s["generate_s"] for s in steps), 3),
                        tokens_per_step=med("tokens"), n_steps=len(steps), minor_faults=med("minor_faults"),
                        step_s_all=[round(s["seconds"], 3) for s in steps],
                        minor_faults_all=[s["minor_faults"] for s in steps])
    paired = lambda a, b, key="seconds": round(statistics.median(  # the median of per-round ratios
        x[key] / y[key] for x, y in zip(kept[a], kept[b])), 3)
    rest = lambda s: dict(rest=s["seconds"] - s["generate_s"])
    res["ratios"] = dict(trl_sc_over_scrl_min=round(res["trl_sc"]["step_s"] / res["scrl_min"]["step_s"], 3),
                         trl_sc_over_trl_plain=round(res["trl_sc"]["step_s"] / res["trl_plain"]["step_s"], 3),
                         rest_trl_sc_over_trl_plain=round(res["trl_sc"]["rest_s"] / res["trl_plain"]["rest_s"], 3),
                         paired_trl_sc_over_scrl_min=paired("trl_sc", "scrl_min"),
                         paired_trl_sc_over_trl_plain=paired("trl_sc", "trl_plain"),
                         paired_rest_trl_sc_over_trl_plain=round(statistics.median(
                             rest(x)["rest"] / rest(y)["rest"] for x, y in zip(kept["trl_sc"], kept["trl_plain"])), 3),
                         **_paired_stats(kept["trl_sc"], kept["trl_plain"]))
    import trl
    cpu = cpu_record()  # {"model", "isa", "torch"}
    res["config"] = dict(prompts=PROMPTS, group_size=GROUP, max_new_tokens=TOKENS, k=args.k, noise_std=SIGMA,
                         sampler="TorchSampler fp8 (emulated)", trainer_dtype="float32", optimizer=f"SGD lr {LR}",
                         rounds=args.rounds, warmup_rounds_dropped=1,
                         omp_threads=torch.get_num_threads(), torch=torch.__version__, trl=trl.__version__,
                         cpu=cpu["model"], isa=cpu["isa"], cores=os.cpu_count(),
                         load_average_1min_before_after=[round(load0, 2), round(os.getloadavg()[0], 2)],
                         allocator={k: v for k, v in sorted(os.environ.items()) if k.startswith("MALLOC_")
                                    or k == "THP_MEM_ALLOC_ENABLE"})
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "step_s_all"} if isinstance(v, dict) else v
                      for k, v in res.items()}, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
