"""Step time: the project's Trainer vs TRL's GRPOTrainer with score centering, and SC on vs off in TRL
(a benchmark, not a test).

The same work in every arm: the embedded tiny Qwen3 in float32, 8 prompts × 4 completions per step, up to 24
generated tokens, the FP8 TorchSampler (emulated GEMMs, σ = 0.1 weight noise) with its top-k head (k = 128), one
SGD step (lr 0.5, no gradient clipping), no importance weighting, group-normalized advantages:
  * scrl_min         `scrl_min.Trainer.train_step()` with the `sc` arm (advantage_mode grpo);
  * trl_sc           `ScoreCenteringGRPOTrainer` (TRL 1.16), score_centering=True, loss_type dapo (the token mean
                     over the batch: the project's reduction), vllm_importance_sampling_correction=False;
  * trl_plain        the same with score_centering=False: TRL's own loss, nothing extra computed.
A step is everything between two optimizer steps: weight push, generation, reward, advantages, loss, backward,
optimizer (TRL: on_step_begin → on_step_end, so TRL's logging and the `step_time` it logs are inside). Generation
time is measured separately in every arm (the same `TorchSampler.generate`, timed by a wrapper).

Timing: --rounds rounds; each round runs every arm for --steps steps in a fresh trainer (construction not
timed) and drops its first step (warm-up); the per-arm number is the median over the kept steps of all rounds.
Other jobs sharing the CPU move every number; the rounds alternate the arms so that all of them see the same
load. Results go to stdout and to --out as JSON.

    OMP_NUM_THREADS=1 python scripts/bench_trl.py --out figures/bench_trl.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

import scrl_min
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
        self._t0, self._g0, self._n0 = time.perf_counter(), self.gen.seconds, self.gen.tokens

    def on_step_end(self, args, state, control, **kw):
        self.steps.append(dict(seconds=time.perf_counter() - self._t0, generate_s=self.gen.seconds - self._g0,
                               tokens=self.gen.tokens - self._n0))


def run_scrl_min(steps: int, tmp: str) -> list:
    cfg = scrl_min.arm_config("sc", steps=steps, prompts_per_step=PROMPTS, group_size=GROUP,
                              max_new_tokens=TOKENS, lr=LR, noise_std=SIGMA, advantage_mode="grpo",
                              out_dir=tmp, progress=False)
    tr = scrl_min.Trainer(cfg)
    tr.sampler.push_weights(tr.policy.state_dict())  # what Trainer.train does first
    gen = _GenTimer(tr.sampler)
    out = []
    for _ in range(steps):
        g0, n0, t0 = gen.seconds, gen.tokens, time.perf_counter()
        tr.train_step()
        out.append(dict(seconds=time.perf_counter() - t0, generate_s=gen.seconds - g0, tokens=gen.tokens - n0))
    return out


def run_trl(steps: int, tmp: str, centering: bool) -> list:
    tr = task_trainer(tmp, n_prompts=64, score_centering=centering, max_steps=steps, use_cpu=True,
                      per_device_train_batch_size=PROMPTS * GROUP, num_generations=GROUP,
                      max_completion_length=TOKENS, loss_type="dapo", vllm_importance_sampling_correction=False,
                      optim="sgd", learning_rate=LR, lr_scheduler_type="constant", max_grad_norm=0.0,
                      sampler_noise_std=SIGMA, score_centering_top_k=128)
    timer = _StepTimer(_GenTimer(tr.sampler))
    tr.add_callback(timer)
    tr.train()
    return timer.steps


ARMS = {"scrl_min": run_scrl_min, "trl_sc": lambda n, d: run_trl(n, d, True),
        "trl_plain": lambda n, d: run_trl(n, d, False)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=6, help="steps per arm per round (the first is dropped)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("runs/bench_trl.json"))
    args = ap.parse_args(argv)
    if args.steps < 2:
        ap.error("--steps must be >= 2 (the first step of each round is a warm-up)")
    kept = {arm: [] for arm in ARMS}
    for r in range(args.rounds):
        for arm, fn in ARMS.items():
            with tempfile.TemporaryDirectory() as tmp:
                steps = fn(args.steps, tmp)[1:]
            kept[arm] += steps
            print(f"round {r} {arm:10s} " + " ".join(f"{s['seconds']:.2f}" for s in steps), flush=True)
    res = {}
    for arm, steps in kept.items():
        med = lambda key: statistics.median(s[key] for s in steps)
        res[arm] = dict(step_s=round(med("seconds"), 3), generate_s=round(med("generate_s"), 3),
                        rest_s=round(statistics.median(s["seconds"] - s["generate_s"] for s in steps), 3),
                        tokens_per_step=med("tokens"), n_steps=len(steps),
                        step_s_all=[round(s["seconds"], 3) for s in steps])
    res["ratios"] = dict(trl_sc_over_scrl_min=round(res["trl_sc"]["step_s"] / res["scrl_min"]["step_s"], 3),
                         trl_sc_over_trl_plain=round(res["trl_sc"]["step_s"] / res["trl_plain"]["step_s"], 3),
                         rest_trl_sc_over_trl_plain=round(res["trl_sc"]["rest_s"] / res["trl_plain"]["rest_s"], 3))
    import trl
    res["config"] = dict(prompts=PROMPTS, group_size=GROUP, max_new_tokens=TOKENS, k=128, noise_std=SIGMA,
                         sampler="TorchSampler fp8 (emulated)", trainer_dtype="float32", optimizer=f"SGD lr {LR}",
                         steps_per_round=args.steps, rounds=args.rounds, warmup_dropped=1,
                         omp_threads=torch.get_num_threads(), torch=torch.__version__, trl=trl.__version__,
                         cpu=platform.processor() or platform.machine())
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "step_s_all"} if isinstance(v, dict) else v
                      for k, v in res.items()}, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
