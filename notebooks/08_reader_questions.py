# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 · The readers' two questions: length drift, and per-prompt offsets
#
# Two questions readers of the paper asked, answered with measurements on the embedded tiny Qwen3:
#
# 1. **Does length drift drop under centering?** Mismatch can move completion length for no reason the
#    reward gives: if the sampler puts more (or less) mass on EOS than the trainer, the drift term pulls
#    the trainer's EOS probability toward the sampler's. Notebook 02 cannot show this: its 24-token
#    budget is nearly always used up. Here the budget is 96 tokens, where the starting policy ends most
#    completions by itself (median length about 58), and each arm's length is compared, seed by seed,
#    with the no-mismatch reference, under two rewards: names target 24 (longer code holds more distinct
#    names, so the reward itself pays for length up to the budget) and names target 4 (the starting policy
#    already earns 0.68 of it, so length buys little reward and is freer to drift).
# 2. **Does centering remove per-prompt offsets?** What that means is in
#    docs/method.md, "Measuring drift and signal, and per-prompt offsets": adding a constant c to every reward of a prompt changes
#    the expected plain update by c·μ, the drift direction, and the expected centered update by 0. Part 2
#    measures the *offset response* E[g₁] (the expected gradient when every advantage is 1) in parameter
#    space, with and without centering and mismatch, against the signal it competes with.
#
# **Run time**: about 40 min on 2 CPU cores (full size; docs/development.md has the measurements), no GPU; CI runs it in under a minute with notebooks/ci_parameters.yaml.
# The defaults write `runs/figures/08_*.{png,json}`; `make reproduce-full` writes `figures/08_*`.

# %% tags=["parameters"]
# Parameters (papermill replaces this cell; CI shrinks it through notebooks/ci_parameters.yaml)
model = "default"  # policy: "default" (embedded tiny Qwen3) or a local checkpoint path / HF model id
# part 1: length drift
arms = ["bf16", "plain", "sc"]  # arms (first: the no-mismatch reference, second: the uncorrected arm)
seeds = [0, 1, 2]  # paired seeds
advantage_mode = "raw"  # raw rewards: the drift is a steady pull (notebook 02's setting)
noise_std = 0.1  # σ of the FP8 arms
steps = 80  # RL steps per run
prompts_per_step = 8  # distinct prompts per step
group_size = 4  # G: completions per prompt
max_new_tokens = 96  # completion budget, tokens: well above the starting policy's median length
names_targets = [24, 4]  # distinct names for the full reward, one setting each: 24 (length pays, up to the cap) | 4 (reached early: length is free)
lr = 0.5  # SGD learning rate
eval_every = 10  # steps between clean evaluations (reward and length of the trainer's own policy)
eval_prompts = 64  # held-out prompts in each clean evaluation, one completion each
final_evals = 3  # last clean evaluations averaged into a run's final value
workers = 2  # runs in parallel, one CPU thread each
smooth = 10  # moving-average window of the training curves, steps
runs_dir = "runs/08_length"  # one folder per run configuration, relative to the repo root
# part 2: per-prompt offsets
offset_prompts = 8  # prompts measured
offset_samples = 128  # completions per prompt (split into chunks for the unbiased norm estimate)
offset_chunks = 16  # chunks per prompt: the norm of an expected gradient is estimated over chunk pairs
offset_tokens = 24  # completion length of part 2, tokens
offset_seed = 0  # seeds the prompts, the sampling and the noise draw of part 2
figures_dir = "runs/figures"  # figures and their numbers, relative to the repo root (`make reproduce-full` writes figures/)

# %%
import json

import numpy as np
import matplotlib.pyplot as plt
import torch
from scipy import stats
import scrl_min
from scrl_min import (ARM_COLORS, arm_config, band_plot, eval_curve, final_reward, mean_ci95, p_text, train_many,
                      with_run_dir, REPO_ROOT, DEFAULT_MODEL_PATH)

if len(seeds) < 2:
    raise ValueError(f"95% intervals need at least 2 seeds, got seeds={seeds}")
for a in arms:
    arm_config(a)  # fails fast on an unknown arm
if offset_chunks < 2 or offset_samples % offset_chunks:
    raise ValueError(f"offset_samples ({offset_samples}) must split into offset_chunks >= 2 equal chunks")
model_path = str(DEFAULT_MODEL_PATH) if model == "default" else model
fig_dir = REPO_ROOT / figures_dir
fig_dir.mkdir(parents=True, exist_ok=True)
ref_arm, plain_arm = arms[0], arms[1]

# %% [markdown]
# ## Part 1 · Length drift
#
# Every (arm, seed) at a 96-token budget; the same paired seeds and clean evaluation as notebook 02, whose
# `eval_len` is the mean completion length of the trainer's own policy on the held-out prompts.

# %%
jobs = {}
for target in names_targets:
    for seed in seeds:
        for arm in arms:
            noise = {} if "noise_std" in scrl_min.ARMS[arm] else {"noise_std": noise_std}
            cfg = arm_config(arm, model=model_path, seed=seed, steps=steps, prompts_per_step=prompts_per_step,
                             group_size=group_size, max_new_tokens=max_new_tokens, names_target=target,
                             lr=lr, advantage_mode=advantage_mode, eval_every=eval_every,
                             eval_prompts=eval_prompts, **noise)
            tag = f"{advantage_mode}-{arm}-T{max_new_tokens}" + ("" if target == 24 else f"-n{target}") + f"-s{seed}"
            jobs[(target, arm, seed)] = with_run_dir(cfg, REPO_ROOT / runs_dir, tag)
results = dict(zip(jobs, train_many(list(jobs.values()), workers=workers)))
print(f"{len(jobs)} runs, {sum(r['seconds'] for recs in results.values() for r in recs) / 60:.1f} CPU-thread minutes")

# %% [markdown]
# ## Part 1 · Completion length against RL updates
#
# Left: the trainer's own completion length on the held-out prompts (`eval_len`, clean evaluation), mean
# over seeds with its 95% band. Middle: the same minus the reference, paired by seed: the length change the
# mismatch caused, which the question is about (length can also change because of the reward: longer code
# holds more distinct names; that part is in the reference too). Right: the clean reward, for context.

# %%
fig, axes = plt.subplots(len(names_targets), 3, figsize=(16, 4.4 * len(names_targets)), squeeze=False)
length = {"curves": {}, "final": {}}
L = {(t, arm): np.array([eval_curve(results[(t, arm, s)], "eval_len")[1] for s in seeds])
     for t in names_targets for arm in arms}
E = {(t, arm): np.array([eval_curve(results[(t, arm, s)])[1] for s in seeds]) for t in names_targets for arm in arms}
x = eval_curve(results[(names_targets[0], arms[0], seeds[0])], "eval_len")[0]
for i, t in enumerate(names_targets):
    for arm in arms:
        for ax, Y in ((axes[i, 0], L[(t, arm)]), (axes[i, 1], L[(t, arm)] - L[(t, ref_arm)]), (axes[i, 2], E[(t, arm)])):
            if ax is axes[i, 1] and arm == ref_arm:
                continue
            band_plot(ax, x, Y, arm, ARM_COLORS.get(arm), lw=2 if arm in (ref_arm, "sc") else 1.3)
        length["curves"][f"target={t}/{arm}"] = dict(
            updates=x.tolist(), eval_len=L[(t, arm)].tolist(), eval_reward=E[(t, arm)].tolist(),
            train_len=[[r["completion_len"] for r in results[(t, arm, s)]] for s in seeds])
    axes[i, 1].axhline(0, color="black", lw=1)
    axes[i, 0].axhline(max_new_tokens, color="gray", ls=":", lw=1)
    for ax, yl in zip(axes[i], (f"target {t}: clean eval length (tokens)", f"length − {ref_arm} (paired by seed)",
                                "clean eval reward")):
        ax.set_xlabel("RL updates")
        ax.set_ylabel(yl)
axes[0, 0].legend(fontsize=8)
fig.suptitle(f"Length at a {max_new_tokens}-token budget (dotted): {advantage_mode} rewards, FP8 + σ = {noise_std}; "
             f"rows: names target; {len(seeds)} paired seeds, mean and 95% band")
fig.tight_layout()
fig.savefig(fig_dir / "08_length_drift.png", dpi=110)
plt.show()

# %% [markdown]
# Final values (mean of the last `final_evals` clean evaluations) and the run-mean length (over every clean
# evaluation after the start: an arm that reaches the budget sooner has a larger one), mean ± 95% over seeds,
# and each arm's paired difference to the reference and to the uncorrected arm, with its two-sided paired t p value
# (descriptive: the verdict tests none of these, so no Holm family applies; `docs/verdict.md`).

# %%
print(f"{'target':>6s} {'arm':7s}{'final length':>17s}{'− ' + ref_arm:>26s}{'run-mean length':>18s}{'− ' + ref_arm:>26s}"
      f"{'− ' + plain_arm:>26s}{'reward':>17s}{'− ' + plain_arm:>26s}")
fmt = lambda d, key: (f"{d[key]['mean']:+.2f} ± {d[key]['ci95']:.2f} p {p_text(d[key]['p'])}" if key in d  # noqa: E731
                      else "—")
for t in names_targets:
    fin = {key: {arm: np.array([final_reward(results[(t, arm, s)], final_evals, key) for s in seeds]) for arm in arms}
           for key in ("eval_len", "eval_reward")}
    # the length averaged over every evaluation after the start: how soon an arm gets long, not only where it ends
    fin["eval_len_run_mean"] = {arm: L[(t, arm)][:, 1:].mean(1) for arm in arms}
    for arm in arms:
        row = {}
        for key in ("eval_len", "eval_len_run_mean", "eval_reward"):
            f = fin[key][arm]
            row[key] = dict(mean=float(f.mean()), ci95=float(mean_ci95(f)[1]), per_seed=f.tolist())
            for other in (ref_arm, plain_arm):
                if other != arm:
                    d = f - fin[key][other]
                    row[key][f"minus_{other}"] = dict(zip(("mean", "ci95"), map(float, mean_ci95(d))),
                                                      p=float(stats.ttest_1samp(d, 0.0).pvalue) if d.std() > 0 else 1.0)
        length["final"][f"target={t}/{arm}"] = row
        lr_ = row["eval_len_run_mean"]
        print(f"{t:6d} {arm:7s}{row['eval_len']['mean']:9.1f} ± {row['eval_len']['ci95']:5.1f}"
              f"{fmt(row['eval_len'], 'minus_' + ref_arm):>26s}{lr_['mean']:10.1f} ± {lr_['ci95']:5.1f}"
              f"{fmt(lr_, 'minus_' + ref_arm):>26s}{fmt(lr_, 'minus_' + plain_arm):>26s}"
              f"{row['eval_reward']['mean']:10.3f} ± {row['eval_reward']['ci95']:.3f}"
              f"{fmt(row['eval_reward'], 'minus_' + plain_arm):>26s}")
params1 = dict(model=model, arms=arms, seeds=seeds, advantage_mode=advantage_mode, noise_std=noise_std,
               steps=steps, prompts_per_step=prompts_per_step, group_size=group_size,
               max_new_tokens=max_new_tokens, names_targets=names_targets, lr=lr, eval_every=eval_every,
               eval_prompts=eval_prompts, final_evals=final_evals)
(fig_dir / "08_length_drift.json").write_text(json.dumps({"parameters": params1, **length}, indent=1))
print(f"saved {figures_dir}/08_length_drift.png and {figures_dir}/08_length_drift.json")

# %% [markdown]
# ### Where a length drift would come from: the sampler's EOS mass
#
# Length can only drift through EOS: per generated token the plain step's drift part moves EOS's logit by
# lr · A · (q_EOS − p_EOS). Measured exactly on the starting policy, for completions of the FP8 + σ sampler at
# this budget: the mean over tokens of q(EOS) and p(EOS), their difference (95% interval over completions), and
# the same for the token the sampler ranks first, for scale.

# %%
from scrl_min import TorchSampler, encode_prompt, load_policy, make_task_dataset, trainer_logprobs

policy, tok = load_policy(model_path)  # the starting policy, also measured in part 2
eos_ids = [encode_prompt(tok, p) for p in make_task_dataset(offset_prompts * 4, seed=offset_seed)["prompt"] for _ in range(group_size)]
sampler = TorchSampler(policy.config, precision="fp8", noise_std=noise_std, seed=offset_seed, fp8_backend="emulated")
sampler.push_weights(policy.state_dict())
ro = sampler.generate(eos_ids, max_new_tokens, tok.eos_token_id, tok.pad_token_id,
                      generator=torch.Generator().manual_seed(offset_seed), full_logq=True)
with torch.no_grad():
    *_, logp_full = trainer_logprobs(policy, ro, 1.0, full=True)
m = ro.completion_mask
per_seq = lambda x: ((x * m).sum(1) / m.sum(1)).numpy()  # (B,) token means
q_eos, p_eos = ro.full_logq[..., tok.eos_token_id].exp(), logp_full[..., tok.eos_token_id].exp()
top = ro.full_logq.argmax(-1, keepdim=True)
q_top, p_top = ro.full_logq.gather(-1, top)[..., 0].exp(), logp_full.gather(-1, top)[..., 0].exp()
eos = {}
for name, v in (("q(EOS)", q_eos), ("p(EOS)", p_eos), ("q(EOS) − p(EOS)", q_eos - p_eos),
                ("(q − p)(EOS) / p(EOS)", (q_eos - p_eos) / p_eos.clamp(min=1e-12)),
                ("q − p at the sampler's top token", q_top - p_top)):
    mm, hh = mean_ci95(per_seq(v))
    eos[name] = dict(mean=float(mm), ci95=float(hh))
    print(f"{name:34s}{mm:+.5f} ± {hh:.5f}")
print(f"{len(eos_ids)} completions of the FP8 + σ = {noise_std} sampler, mean length {m.sum(1).float().mean():.1f} tokens")
saved = json.loads((fig_dir / "08_length_drift.json").read_text())
saved["eos_mass"] = dict(completions=len(eos_ids), **eos)
(fig_dir / "08_length_drift.json").write_text(json.dumps(saved, indent=1))

# %% [markdown]
# ## Part 2 · Per-prompt offsets
#
# **What is measured.** For one prompt x, let g_A be the gradient of the loss (`score_centered_pg_loss`, token
# mean) over completions drawn from the sampler, with advantages A. Adding an offset c to every reward of x
# adds c·g₁ to it, where g₁ uses A ≡ 1. So the *offset response* E[g₁] is what the policy learns from a
# prompt-wide constant: docs/method.md shows it is the drift direction μ (zero on-policy) for the plain
# loss and 0 for the centered one, if the centering term is exact. Here it is measured in parameter space on
# the starting policy, for the sampler of part 1 (FP8 + σ) and for the no-mismatch bf16 sampler, with
#
# * `plain` (no centering), `sc` (score centering with the experiments' top-128 head: the tail of q is
#   estimated as ρ times the trainer's tail), `sc_exact` (centering with the whole vocabulary as the head,
#   k = V: exact);
# * next to it, the signal that an offset competes with: E[g_{r − b}], the gradient with the prompt's
#   rewards minus their leave-one-out mean b (a baseline that is itself free of offsets).
#
# The norm of an expected gradient is estimated without bias from `offset_chunks` independent chunk means
# ḡ_m: ‖E g‖² ≈ Σ_{m≠m'} ḡ_m · ḡ_m' / (M(M − 1)). Its expectation is exactly ‖E g‖², so where E g = 0 the
# estimates scatter around 0 and can be negative; they are averaged over prompts (with a 95% interval
# over prompts) before the square root is taken.

# %%
from scrl_min import distinct_names_reward, reduce_loss, score_centered_pg_loss

V = policy.config.vocab_size  # policy, tok: the starting policy loaded above
prompt_ids = [encode_prompt(tok, p) for p in make_task_dataset(offset_prompts, seed=offset_seed)["prompt"]]
params_ = [p for p in policy.parameters() if p.requires_grad]
samplers = {
    "fp8_noise": dict(precision="fp8", noise_std=noise_std),
    "bf16": dict(precision="bf16", noise_std=0.0),
}
variants = {"plain": (False, 128), "sc": (True, 128), "sc_exact": (True, V)}


def flat_grad(ro, adv, centering, k):
    """Gradient (flattened over every parameter) of the token-mean loss of rollout `ro` with advantages `adv`."""
    logp, logp_head = trainer_logprobs(policy, ro, 1.0)
    per_tok, _ = score_centered_pg_loss(logp, logp_head[..., :k], ro.sampler_logp, ro.head_logp[..., :k], adv,
                                        ro.completion_mask, centering=centering)
    grads = torch.autograd.grad(reduce_loss(per_tok, ro.completion_mask), params_, allow_unused=True)
    return torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params_)])


def rows(ro, idx):
    """The rollout's rows `idx` (the sampler's head is the full vocabulary, k = V, sorted by q)."""
    return type(ro)(**{f: getattr(ro, f)[idx] for f in ("prompt_ids", "prompt_mask", "completion_ids",
                                                        "completion_mask", "sampler_logp", "head_ids", "head_logp")})


def sq_norm_of_mean(S, sum_sq, M):
    """Unbiased ‖E g‖² from M chunk means: (‖Σ ḡ_m‖² − Σ ‖ḡ_m‖²) / (M (M − 1))."""
    return float((S.double().pow(2).sum() - sum_sq) / (M * (M - 1)))


offsets = {}  # (sampler, variant, "offset" | "signal") → per-prompt estimates of ‖E g‖²
baselines = {}
chunk = offset_samples // offset_chunks
with scrl_min.progress_bar(total=len(samplers) * len(prompt_ids), desc="offset response") as bar:
    for sname, skw in samplers.items():
        sampler = TorchSampler(policy.config, k=V, seed=offset_seed, fp8_backend="emulated", **skw)
        sampler.push_weights(policy.state_dict())
        for pi, ids in enumerate(prompt_ids):
            g = torch.Generator().manual_seed(offset_seed * 1_000_003 + pi)
            ro = sampler.generate([ids] * offset_samples, offset_tokens, tok.eos_token_id, tok.pad_token_id, generator=g)
            texts = tok.batch_decode(ro.completion_ids.masked_fill(~ro.completion_mask, tok.pad_token_id),
                                     skip_special_tokens=True)
            r = torch.tensor([distinct_names_reward(t, scrl_min.TrainConfig.names_target) for t in texts])
            loo = (r.sum() - r) / (len(r) - 1)  # leave-one-out baseline: independent of the sample's own reward
            baselines[(sname, pi)] = float(r.mean())
            acc = {}  # (variant, what) → (Σ_m ḡ_m, Σ_m ‖ḡ_m‖²)
            for m in range(offset_chunks):
                part = slice(m * chunk, (m + 1) * chunk)
                gm = {(vname, what): flat_grad(rows(ro, part), adv[part], centering, k).double()
                      for vname, (centering, k) in variants.items()
                      for what, adv in (("offset", torch.ones_like(r)), ("signal", r - loo))}
                # the drift term alone (plain − exact centering) and the top-k estimator's error (sc − exact)
                gm[("drift_term", "offset")] = gm[("plain", "offset")] - gm[("sc_exact", "offset")]
                gm[("tail_error", "offset")] = gm[("sc", "offset")] - gm[("sc_exact", "offset")]
                for key, v in gm.items():
                    S, sq = acc.get(key, (0.0, 0.0))
                    acc[key] = (S + v, sq + v.pow(2).sum())
            for (vname, what), (S, sq) in acc.items():
                offsets.setdefault((sname, vname, what), []).append(sq_norm_of_mean(S, sq, offset_chunks))
            bar.update()

# %% [markdown]
# ### The offset response against the signal
#
# Bars: √(mean over prompts of the ‖E g‖² estimates), with the 95% interval over prompts carried through the
# square root (a lower end below 0 is drawn at 0). Red: the offset response ‖E g₁‖, what a unit offset on a
# prompt's rewards adds to its expected update; blue: the signal ‖E g_{r − b}‖. Two differences of the same
# samples are measured too, with far less noise than either side: `drift_term` = plain − sc_exact (the part
# of the plain offset response that exact centering removes: the drift μ in parameter space) and
# `tail_error` = sc − sc_exact (what the top-128 estimator leaves of it). Under raw rewards a prompt's baseline
# b(x) is exactly such an offset, so the raw update of prompt x carries b(x) times the offset response beside
# its signal (right).

# %%
def root_ci(vals):
    """(√mean, √lower, √upper) of per-prompt estimates of a squared norm; negative ends clip to 0."""
    m, h = mean_ci95(np.array(vals))
    return tuple(float(np.sqrt(max(v, 0.0))) for v in (m, m - h, m + h))


names = [(s, v) for s in samplers for v in (*variants, "drift_term", "tail_error")]
fig, axes = plt.subplots(1, 2, figsize=(15, 4.8), gridspec_kw=dict(width_ratios=[1.6, 1]))
summary = {}
xs = np.arange(len(names))
for j, (what, color) in enumerate((("offset", "tab:red"), ("signal", "tab:blue"))):
    idx = [i for i, (s, v) in enumerate(names) if (s, v, what) in offsets]
    vals = [root_ci(offsets[(*names[i], what)]) for i in idx]
    mid = np.array([v[0] for v in vals])
    err = np.array([[v[0] - v[1] for v in vals], [v[2] - v[0] for v in vals]])
    axes[0].bar(xs[idx] + (j - 0.5) * 0.38, mid, 0.38, yerr=err, color=color, capsize=3,
                label="offset response ‖E g₁‖" if what == "offset" else "signal ‖E g_{r − b}‖")
    for i, (m_, lo, hi) in zip(idx, vals):
        s, v = names[i]
        summary.setdefault(f"{s}/{v}", {})[what] = dict(norm=m_, lo=lo, hi=hi, sq_per_prompt=offsets[(s, v, what)])
axes[0].set_xticks(xs, [f"{s}\n{v}" for s, v in names], fontsize=7)
axes[0].set_ylabel("norm of the expected gradient (parameter space)")
axes[0].legend(fontsize=8)
axes[0].set_title("what a unit per-prompt offset adds to the expected update, and the signal")
b = np.array([baselines[("fp8_noise", i)] for i in range(len(prompt_ids))])
sig = np.sqrt(np.clip(offsets[("fp8_noise", "sc_exact", "signal")], 0, None))
for v, mk in (("drift_term", "o"), ("tail_error", "^")):
    axes[1].scatter(sig, b * np.sqrt(np.clip(offsets[("fp8_noise", v, "offset")], 0, None)), marker=mk, s=40,
                    label={"drift_term": "plain: b(x)·‖E drift term‖", "tail_error": "sc (top-128): b(x)·‖E tail error‖"}[v])
lim = max(axes[1].get_xlim()[1], axes[1].get_ylim()[1])
axes[1].plot([0, lim], [0, lim], color="gray", lw=1, ls="--", label="offset part = signal")
axes[1].set_xlabel("‖E g_{r − b}‖ per prompt (signal)")
axes[1].set_ylabel("offset part of the raw update, per prompt")
axes[1].set_title(f"FP8 + σ = {noise_std}, raw rewards: the baseline as an offset")
axes[1].legend(fontsize=8)
fig.tight_layout()
fig.savefig(fig_dir / "08_prompt_offsets.png", dpi=110)
plt.show()

print(f"{'sampler/variant':24s}{'‖E g₁‖ (offset) [95%]':>30s}{'‖E g_(r−b)‖ (signal) [95%]':>32s}")
for key, row in summary.items():
    cell = lambda d: f"{d['norm']:10.4f} [{d['lo']:.4f}, {d['hi']:.4f}]" if d else ""
    print(f"{key:24s}{cell(row.get('offset')):>30s}{cell(row.get('signal')):>32s}")
print("prompt baselines b(x) under FP8 + σ:", " ".join(f"{v:.3f}" for v in b))
params2 = dict(model=model, offset_prompts=offset_prompts, offset_samples=offset_samples,
               offset_chunks=offset_chunks, offset_tokens=offset_tokens, offset_seed=offset_seed, noise_std=noise_std,
               samplers=samplers, variants={k: dict(centering=c, k=kk) for k, (c, kk) in variants.items()})
(fig_dir / "08_prompt_offsets.json").write_text(json.dumps(
    {"parameters": params2, "summary": summary,
     "baselines": {s: [baselines[(s, i)] for i in range(len(prompt_ids))] for s in samplers}}, indent=1))
print(f"saved {figures_dir}/08_prompt_offsets.png and {figures_dir}/08_prompt_offsets.json")

# %% [markdown]
# ## What the measurements show
#
# Measured by `make reproduce-full` on an AMD EPYC with AVX-512 (part 1, 18 runs; part 2, minutes). Per-seed numbers
# differ from an earlier run on a CPU with AMX, as float round-off in the sampler makes them (README, "Which numbers
# hold where"). Mean ± 95% over 3 paired seeds (part 1) or 8 prompts (part 2): exploratory, nothing here is a test.
#
# * **Length drift: not detected, because the reward drives every arm to the budget.** Under both rewards every
#   arm's completions grow from about 64 tokens to within a few tokens of the 96-token cap, the no-mismatch
#   reference included: longer completions hold more distinct names and earn more, so the reward itself pushes EOS
#   down. Plain gets there fastest, but its reward collapses at the same time, and the sampler's EOS probability is
#   slightly *above* the trainer's, which would pull plain toward *shorter* completions. This task cannot show a
#   length drift; notebook 14 builds one that can.
# * **The reward cost is large at this budget.** Plain FP8 collapses (final clean reward 0.020 ± 0.059, names target
#   24, against the reference's 0.364 ± 0.304), and SC recovers it: SC − plain +0.39 ± 0.19, paired. Notebook 02's
#   setting differs in more than the budget, so the larger gap here is not attributable to length alone.
# * **Per-prompt offsets: centering removes them, and they are large here.** On the starting policy with the
#   FP8 + σ 0.1 sampler, a unit offset on a prompt's rewards adds an expected update of norm 0.319 through the drift
#   term, 6.6 times the signal a prompt carries; the top-128 estimator leaves 8% of it. Under raw rewards every
#   prompt's baseline is such an offset, and its part of the raw update is about 70% of the signal's norm (right
#   panel). That is what "centering removes per-prompt offsets" means here: in expectation, and only where there is
#   a mismatch (with the bf16 sampler the drift term is 0), the rest of the offset left as zero-mean noise.
