# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · FP8 rollouts: six arms on the embedded tiny Qwen3
#
# The question of the paper, on a model that fits in a laptop: when the sampler runs in FP8 and the
# trainer in float32, does plain policy gradient drift away from a no-mismatch reference, and does score
# centering (SC) bring it back, compared with truncated (TIS) and masked (MIS) importance sampling?
#
# **Arms** (`scrl_min.ARMS`, presets over `TrainConfig`'s `sampler_precision`, `weighting` and
# `centering`): `bf16` reference (sampler in bf16, no noise: the no-mismatch reference) · `plain` FP8,
# no correction · `tis` FP8 + TIS(C=2) · `mis` FP8 + MIS[0.5, 5] · `sc` FP8 + score centering ·
# `sc_tis`, `sc_mis` FP8 + SC + TIS / MIS. FP8 arms also get the mismatch-severity knob σ: persistent
# relative weight noise on the sampler, drawn once (the paper's own small-scale recipe).
#
# **Axis: the advantage mode.** The drift term is E_q[A]·μ. With raw rewards (`raw`, REINFORCE without a
# baseline) E_q[A] > 0 at every prefix and the drift is a steady pull; with GRPO group-normalized
# advantages (`grpo`) E_q[A] is zero at the prompt but not deeper in the sequence.
#
# **Run time**: the default parameters take about 25 minutes on 2 CPU cores, no GPU, two runs at a
# time with one thread each (measured: 24 min 23 s on an idle machine; 36 min 36 s for the outputs
# shown here, while other jobs shared the two cores). Runs resume from their checkpoints if
# interrupted, and a finished run is not re-run. With the default parameters it writes `runs/figures/02_fp8_arms.png` and the numbers behind it
# (`.json`); `make reproduce` writes them to `figures/` and produced the outputs shown here.
#

# %% tags=["parameters"]
# Parameters (papermill replaces this cell; CI shrinks it through notebooks/ci_parameters.yaml)
model = "default"  # policy: "default" (embedded tiny Qwen3) or a local checkpoint path / HF model id
arms = ["bf16", "plain", "tis", "mis", "sc", "sc_mis"]  # arms of the main setting: raw rewards, FP8 + noise
compare_modes = ["signed", "grpo"]  # other advantage modes; signed: 2r - 1, grpo: group-normalized
compare_arms = ["bf16", "plain", "sc"]  # arms run in each of compare_modes and in the FP8-only setting
seeds = [0]  # one run per seed per (setting, arm)
steps = 100  # RL steps per run
prompts_per_step = 8  # distinct prompts per step
group_size = 4  # G: completions per prompt
max_new_tokens = 24  # completion budget, tokens
noise_std = 0.1  # sigma: relative weight noise on the FP8 sampler (mismatch severity)
sampler = "torch"  # rollout engine: torch (TorchSampler, FP8 W8A8) or vllm (VLLMSampler, see notebook 04)
vllm_precision = "auto"  # vLLM numerics: auto (FP8 arms get fp8 on a GPU, fp8_kv on AVX-512 CPUs), bf16, fp8_kv, fp8
lr = 0.5  # SGD learning rate
workers = 2  # runs in parallel, one CPU thread each
final_window = 30  # last steps averaged in the final-reward table
smooth = 10  # moving-average window of the plotted curves, steps
runs_dir = "runs/02_fp8_arms"  # one folder per run configuration (metrics.jsonl, checkpoint.pt), relative to the repo root
figures_dir = "runs/figures"  # figure and its numbers, relative to the repo root (`make reproduce` writes figures/)


# %%
import json
from pathlib import Path

import numpy as np
import matplotlib.pyplot as plt
import scrl_min
from scrl_min import arm_config, train_many, with_run_dir
from scrl_min.core import REPO_ROOT, DEFAULT_MODEL_PATH

for a in arms + compare_arms:
    cfg = arm_config(a)  # fails fast, naming the valid arms, before any run starts
    if sampler == "vllm":  # fails fast where the platform has no vLLM FP8 path for an FP8 arm
        print(a, "→ vLLM", scrl_min.vllm_precision_for(cfg.sampler_precision, vllm_precision))
    elif sampler != "torch":
        raise ValueError(f"unknown sampler {sampler!r}; choose torch or vllm")
model_path = str(DEFAULT_MODEL_PATH) if model == "default" else model
fig_dir = REPO_ROOT / figures_dir
fig_dir.mkdir(parents=True, exist_ok=True)
print(f"policy: {model} ({Path(model_path).name})")

# %% [markdown]
# ## Run every (setting, arm, seed)
#
# Settings: the main one (raw rewards, FP8 + noise σ) with all arms; each of `compare_modes` with
# `compare_arms`; and "FP8 only" (raw rewards, σ = 0: FP8 rounding is the only mismatch). Each run
# writes `metrics.jsonl` (one line per step, as it happens) and a checkpoint every 25 steps into a
# folder named after its configuration (`<mode>-<arm>-s<seed>-<config_id>`): re-running this cell
# continues unfinished runs and skips finished ones, and a run with other parameters (a small trial,
# another σ) gets its own folder instead of clashing with an earlier one.

# %%
settings = {f"raw, σ={noise_std}": ("raw", noise_std, arms)}
for mode in compare_modes:
    settings[f"{mode}, σ={noise_std}"] = (mode, noise_std, compare_arms)
settings["raw, FP8 only (σ=0)"] = ("raw", 0.0, compare_arms)

jobs = []  # (setting, arm, seed, config)
for name, (mode, sigma, arm_list) in settings.items():
    for arm in arm_list:
        for seed in seeds:
            # the bf16 reference keeps its preset's σ = 0, so the FP8-only setting reuses raw's run
            noise = {} if "noise_std" in scrl_min.ARMS[arm] else {"noise_std": sigma}
            cfg = arm_config(arm, model=model_path, seed=seed, steps=steps,
                             prompts_per_step=prompts_per_step, group_size=group_size,
                             max_new_tokens=max_new_tokens, lr=lr, advantage_mode=mode,
                             sampler=sampler, vllm_precision=vllm_precision, **noise)
            # one folder per configuration: <tag>-<config_id>, so runs of other sizes never collide
            jobs.append((name, arm, seed, with_run_dir(cfg, REPO_ROOT / runs_dir, f"{mode}-{arm}-s{seed}")))
unique = {}
for *_, cfg in jobs:
    unique.setdefault(cfg.out_dir, cfg)
records = dict(zip(unique, train_many(list(unique.values()), workers=workers)))
results = {(name, arm, seed): records[cfg.out_dir] for name, arm, seed, cfg in jobs}
print(f"{len(unique)} runs, {sum(r['seconds'] for recs in records.values() for r in recs) / 60:.1f} CPU-thread minutes")


# %% [markdown]
# ## Reward curves
#
# Mean reward of the batch per step (moving average over `smooth` steps; shaded: min-max over seeds).
# Bottom row: the sampler-vs-trainer KL on the sampled tokens (k1 estimate of KL(q‖p)), the size of
# the mismatch each arm trained under.

# %%
def movavg(x, w):
    x = np.asarray(x, dtype=float)
    w = max(1, min(w, len(x)))
    c = np.cumsum(np.insert(x, 0, 0.0))
    head = c[1:w] / np.arange(1, w)
    return np.concatenate([head, (c[w:] - c[:-w]) / w])

colors = {"bf16": "black", "plain": "tab:red", "tis": "tab:orange", "mis": "tab:purple",
          "sc": "tab:blue", "sc_mis": "tab:green"}
fig, axes = plt.subplots(2, len(settings), figsize=(4.6 * len(settings), 7), squeeze=False, sharex=True)
curves = {}
for j, (name, (mode, sigma, arm_list)) in enumerate(settings.items()):
    for arm in arm_list:
        runs = [results[(name, arm, s)] for s in seeds]
        R = np.array([movavg([r["reward"] for r in run], smooth) for run in runs])
        K = np.array([movavg([r["kl_sampled"] for r in run], smooth) for run in runs])
        x = np.arange(R.shape[1])
        lw = 2.2 if arm in ("bf16", "sc") else 1.3
        axes[0, j].plot(x, R.mean(0), color=colors.get(arm), label=arm, lw=lw)
        axes[0, j].fill_between(x, R.min(0), R.max(0), color=colors.get(arm), alpha=0.15)
        axes[1, j].plot(x, K.mean(0), color=colors.get(arm), label=arm, lw=lw)
        curves[f"{name}/{arm}"] = {k: [[r[k] for r in run] for run in runs]
                                   for k in ("reward", "kl_sampled", "completion_len", "ratio_out_of_band")}
    axes[0, j].set_title(name)
    axes[1, j].set_xlabel("RL step")
    axes[0, j].legend(fontsize=8)
axes[0, 0].set_ylabel("reward (distinct names / 12)")
axes[1, 0].set_ylabel("KL(q‖p) on sampled tokens")
fig.suptitle(f"Embedded tiny Qwen3, FP8 sampler vs bf16 reference ({steps} steps, seeds {seeds})")
fig.tight_layout()
fig.savefig(fig_dir / "02_fp8_arms.png", dpi=110)
plt.show()

# %% [markdown]
# ## Final rewards
#
# Mean reward over the last `final_window` steps of each run; mean ± std over seeds; the peak of the
# smoothed curve shows runs that rose and then fell. Saved with the per-step curves in
# `figures/02_fp8_arms.json`.

# %%
table = {}
print(f"{'setting':22s}{'arm':8s}{'final':>8s}{'± std':>8s}{'peak':>8s}{'KL(q||p)':>10s}   per seed")
for name, (mode, sigma, arm_list) in settings.items():
    for arm in arm_list:
        runs = [results[(name, arm, s)] for s in seeds]
        finals = [float(np.mean([r["reward"] for r in run[-final_window:]])) for run in runs]
        peak = float(np.mean([movavg([r["reward"] for r in run], smooth).max() for run in runs]))
        kl = float(np.mean([r["kl_sampled"] for run in runs for r in run[-final_window:]]))
        table[f"{name}/{arm}"] = {"final_reward_mean": float(np.mean(finals)),
                                  "final_reward_std": float(np.std(finals)),
                                  "final_reward_per_seed": finals, "peak_smoothed": peak,
                                  "kl_sampled_final": kl}
        print(f"{name:22s}{arm:8s}{np.mean(finals):8.3f}{np.std(finals):8.3f}{peak:8.3f}{kl:10.4f}   "
              + " ".join(f"{f:.3f}" for f in finals))
params = dict(model=model, arms=arms, compare_modes=compare_modes, compare_arms=compare_arms,
              seeds=seeds, steps=steps, prompts_per_step=prompts_per_step, group_size=group_size,
              max_new_tokens=max_new_tokens, noise_std=noise_std, lr=lr, final_window=final_window)
(fig_dir / "02_fp8_arms.json").write_text(json.dumps(
    {"parameters": params, "final": table, "curves": curves}, indent=1))
print(f"saved {figures_dir}/02_fp8_arms.png and {figures_dir}/02_fp8_arms.json")

# %% [markdown]
# ## What the measurement shows
#
# Written from the default-parameter run (one seed, 100 steps, 2 CPU cores; `figures/02_fp8_arms.json`);
# the table printed above is the source of truth for your own run. Reward curves of a single seed at
# lr 0.5 swing by ±0.1 from step to step, so only gaps larger than that mean anything.
#
# * **Raw rewards, σ = 0.1 (the drift's home ground: E_q[A] > 0 at every prefix).** Plain FP8 rises to
#   0.36 (smoothed peak) and falls back: 0.19 over the last 30 steps, against 0.38 for the bf16
#   reference. Score centering ends at 0.41 and tracks the reference; MIS ends at 0.36, TIS at 0.30 after
#   the highest peak of all (0.65), SC+MIS at 0.29. The article's picture (plain rises, then turns down;
#   SC follows the reference) is what we see for plain and SC; the ordering among the corrected arms is
#   within single-seed noise.
# * **Signed rewards (A = 2r − 1, mostly negative early on).** The bf16 reference *and* plain collapse to
#   reward 0 (by steps ~25 and ~12), SC climbs to 0.74. Because the no-mismatch reference collapses too,
#   this is not the mismatch drift alone: mostly-negative advantages at lr 0.5 are unstable on their own.
#   Per token, the centered logit update A(e_y − q) differs from the reference's A(e_y − p) only by the
#   mismatch, so one seed cannot tell SC's survival from luck. `scripts/seed_check.py` reran seeds 1
#   and 2: SC ends at 0.74 / 0.72 / 0.62, the reference at 0.00 / 0.60 / 0.00, plain at 0.00 / 0.08 /
#   0.58. SC's survival holds over three seeds, and the reference's collapse is seed-dependent. Drift
#   removal does not explain it (the reference has none); it is an open question.
# * **Seed check, raw rewards** (seeds 0, 1, 2): plain 0.19 / 0.19 / 0.17, reference 0.38 / 0.17 / 0.27,
#   SC 0.41 / 0.37 / 0.32. Plain is lowest in every seed; SC at or above the reference in every seed.
# * **GRPO (group-normalized).** Reference 0.49, plain 0.37, SC 0.37: no separation between plain and SC
#   in 100 steps. Group centering makes E[A] = 0 at the prompt, which removes most of the drift there
#   (not deeper in the sequence), as the early pilots predicted (README, development log).
# * **FP8 only (σ = 0).** FP8 rounding of a 3.7M-parameter model gives KL(q‖p) ≈ 0.0005 per token, 10-20x
#   less than σ = 0.1 gives; plain 0.33, SC 0.36, reference 0.38: FP8 alone does not separate the arms in
#   100 steps at this size. The noise knob is what makes the mismatch large enough to matter here.
#
