# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 15 · The article's regime at the gradient: a pilot with group-centred advantages
#
# Every decided claim so far trains with raw rewards as advantages (A = r), plain REINFORCE without a baseline,
# the regime that favours score centering most. The article's recipe is GRPO's: rewards centred within each group
# of G completions of one prompt, here A = 2(r − mean_G r) (`compute_advantages(..., "centered")`). Centred
# advantages sum to zero in every group, yet the drift E_q[A]·μ does not vanish: A is per completion, μ per prefix,
# and the completions of a group see different prefixes. This pilot asks, at the level of **one update** at the
# starting policy, how much of the trainer's error the drift still is in that regime, before any training run of
# notebook 16 (its pre-registered training design) is fixed:
#
# * **Plain's drift as a share of one batch's MSE**: ‖E ĝ_plain − E ĝ_SC‖² / MSE_plain, the squared distance between
#   plain's and SC's expected updates (the drift, up to SC's top-k residual) over plain's mean squared error
#   against the on-policy gradient. A share near 0 means one update's error is almost all sampling noise and no
#   correction can help much; a large share means the mismatch is a visible part of every update.
# * **Each estimator's relative MSE gap** (SC, exact token IS, TIS, MIS, SC + MIS) to plain and to MIS, paired on
#   the same tokens: (MSE_e − MSE_f) / MSE_f, with the paired statistic D_b of notebook 10 (section 1 there derives
#   it: its mean is exactly MSE_e − MSE_f, and it needs no ‖g*‖²).
#
# Over three settings: the headline sampler (FP8 W8A8 + 10% weight noise), a harsher one (FP8 + 20%), and the
# headline sampler with 96-token completions (public measurements find the mismatch grows with length).
#
# **Run time**: about 25-35 minutes on 2 idle CPU cores (each batch is sampled once and differentiated six times; the
# 96-token cell is most of it); the committed run took longer, on a machine shared with other jobs, and its bar counts
# only the part after a resume (docs/development.md, the log of 2026-12-06), no GPU; CI runs it in under a minute with notebooks/ci_parameters.yaml. Resumable: each
# cell saves its batches group by group under `runs_dir`. The defaults write `runs/figures/15_*`; `make
# reproduce-full` writes `figures/`.

# %% [markdown]
# ## How the pilot chooses notebook 16's setting (written before the pilot ran)
#
# Notebook 16 trains bf16, plain, MIS and SC (TIS and SC + MIS if the budget allows) with centred advantages on
# one sampler setting, at most about 6 hours on 2 CPU cores. The pilot chooses it by this rule, fixed here
# before any of its cells ran:
#
# 1. A setting is **within the budget** when one training run of it costs at most 1.5 times a 24-token run
#    (its mean generated tokens per batch here over the 24-token headline's): the design needs about 60-75
#    paired seeds of at least four arms (notebook 13's centred arms: a paired-AUC sd of 0.13-0.14), about 250-300
#    runs, which is about 4.5-5.5 hours at 24 tokens.
# 2. Among the settings within the budget, the one with the **largest drift share** (point estimate) is chosen.
# 3. If no setting's drift share has a 95% interval above 0, the pilot has found no setting where the drift is a
#    detectable part of one update: notebook 16 says so as its first result and runs its design at the
#    headline sampler anyway.
#
# *Amendment, 2026-12-06, during the first run and before any of its results was seen (no statistic had been
# computed; only the progress bar was read):* rule 1 first measured a run's cost as the cell's mean seconds per
# batch. On the 2-core machine, shared with other jobs, that moved from about 1 to about 20 seconds per batch within
# one cell as the load changed, so it would measure the load, not the setting. The cost is now the mean number of
# generated tokens per batch (the sampler's and the trainer's work both grow with it), which no load changes; the
# seconds are still reported. The run was stopped and resumed (the cells resume from their saved groups). Rule 1
# as first committed (d8b3001) read: "(its measured seconds per batch here over the 24-token headline's)". **This
# amendment decided the outcome**: under the first wording the seconds this run measured (the σ 0.2 cell 9.2 s per
# batch against the headline's 1.8 s, the same tokens: the load, not the setting) would have put σ 0.2 and the
# 96-token setting over the budget, and the choice would have been the headline, FP8 + σ 0.1 at 24 tokens (its drift
# share, 0.03%, is a third of σ 0.2's).
#
# A one-sided prediction for notebook 16 is read off the MSE gaps: where an estimator's MSE per update is decidedly
# above or below plain's (95% interval clear of 0), notebook 16 adds a one-sided test of that direction on the
# training metric, with this gap written beside it.

# %% tags=["parameters"]
model = "default"  # policy: "default" (embedded tiny Qwen3, V 2048), a local checkpoint or an HF model id
seed = 0  # seeds the task prompts, the sampler noise draws and every batch
setting_formats = ["fp8", "fp8", "fp8"]  # per setting: TorchSampler precision
setting_noise = [0.1, 0.2, 0.1]  # per setting: σ, relative weight noise on the sampler
setting_tokens = [24, 24, 96]  # per setting: completion budget, tokens
setting_batches = [100, 100, 40]  # per setting: mismatched batches (independent of the reference)
ref_batches = [64, 32]  # on-policy reference batches, one entry per distinct completion budget (in first-seen order)
headline = 0  # index of the headline setting (the fallback of rule 3, and the cost unit of rule 1)
budget_cost_ratio = 1.5  # rule 1: a setting's generated tokens per batch at most this times the headline's
k = 128  # head size of SC, tokens
tis_cap = 2.0  # C of TIS
mis_band = [0.5, 5.0]  # [lo, hi] of MIS (ratio)
prompts_per_step = 8  # distinct prompts per batch (the trainer's default)
group_size = 4  # G: completions per prompt (a GRPO group)
groups = 10  # a cell's batches are kept in this many groups (the jackknife over groups)
runs_dir = "runs/15_grpo_gradient_pilot"  # the cells' saved groups, relative to the repo root
figures_dir = "runs/figures"  # figures and their numbers, relative to the repo root (`make reproduce-full` writes figures/)

# %%
import hashlib
import json
import math
import time

import matplotlib.pyplot as plt
import numpy as np
import torch
from scipy import stats

import scrl_min
from scrl_min import (ARM_COLORS, DEFAULT_MODEL_PATH, REPO_ROOT, TorchSampler, Trainer, arm_config, check_layout,
                      compute_advantages, cpu_record, load_policy, progress_bar, reduce_loss, score_centered_pg_loss,
                      trainer_logprobs)

ESTIMATORS = {  # name → (weighting, centering), as score_centered_pg_loss takes them
    "plain": ("none", False), "sc": ("none", True), "is": ("is", False), "tis": ("tis", False),
    "mis": ("mis", False), "sc_mis": ("mis", True)}
n_settings = len(setting_formats)
if not len(setting_noise) == len(setting_tokens) == len(setting_batches) == n_settings:
    raise ValueError("setting_formats, setting_noise, setting_tokens and setting_batches need one entry per setting")
budgets = list(dict.fromkeys(setting_tokens))  # distinct completion budgets, first-seen order
if len(ref_batches) != len(budgets):
    raise ValueError(f"ref_batches needs one entry per distinct completion budget {budgets}, got {ref_batches}")
if min(setting_batches + ref_batches) < groups or groups < 3:
    raise ValueError(f"every cell needs at least `groups` = {groups} (>= 3: the jackknife leaves one out) batches")
if not 0 <= headline < n_settings:
    raise ValueError(f"headline must index a setting (0..{n_settings - 1}), got {headline}")
mis_band = tuple(mis_band)
names = [f"{f}{f' + σ {s:g}' if s else ''}, {t} tokens" for f, s, t in zip(setting_formats, setting_noise, setting_tokens)]
model_path = str(DEFAULT_MODEL_PATH) if model == "default" else model
fig_dir = REPO_ROOT / figures_dir
fig_dir.mkdir(parents=True, exist_ok=True)
policy, tok = load_policy(model_path)  # the trainer: float32, the starting policy
params = list(policy.parameters())
n_params = sum(w.numel() for w in params)
task = Trainer(arm_config("bf16", model=model_path, seed=seed, steps=0, eval_every=0, progress=False,
                          out_dir=str(REPO_ROOT / runs_dir / "task")))  # the task's training prompts and reward
prompt_ids, eos_id, pad_id = task.prompt_ids, task.eos_id, task.tok.pad_token_id
on_policy = TorchSampler(policy.config, precision="fp32", k=k, noise_std=0.0, seed=seed)
on_policy.push_weights(policy.state_dict())
cpu = cpu_record()
print(f"trainer: {n_params / 1e6:.2f}M parameters, float32; settings: {names}; CPU {cpu['model']} ({cpu['isa']})")

# %% [markdown]
# ## One batch, every estimator on the same tokens
#
# `batch_gradients` draws one batch of the trainer's shape (8 prompts × G = 4 completions) from a sampler, scores
# it with the task's reward, forms the centred advantages A = 2(r − mean_G r), and returns each estimator's
# gradient of the trainer's loss (`score_centered_pg_loss`, token mean: exactly what `rl_step` differentiates) as
# one flat vector (P,). On the on-policy sampler every estimator must equal plain (q = p: every ratio 1, every
# centering coefficient 0): the check below.

# %%
def batch_gradients(sampler, batch_seed: int, max_new_tokens: int, names_wanted) -> tuple:
    """({estimator: gradient (P,) float32}, {kl: exact KL(q‖p) per generated token (nats), tokens, reward}) of one
    batch drawn with `batch_seed` (prompts and sampling)."""
    pick = torch.randperm(len(prompt_ids), generator=torch.Generator().manual_seed(2 * batch_seed))[:prompts_per_step]
    prompts = [prompt_ids[i] for i in pick.tolist() for _ in range(group_size)]  # GRPO groups of G
    ro = sampler.generate(prompts, max_new_tokens, eos_id, pad_id,
                          generator=torch.Generator().manual_seed(2 * batch_seed + 1), full_logq=True)
    m = ro.completion_mask  # (B, T)
    texts = tok.batch_decode(ro.completion_ids.masked_fill(~m, pad_id), skip_special_tokens=True)
    rewards = torch.tensor([scrl_min.distinct_names_reward(t, task.cfg.names_target) for t in texts])  # (B,)
    A = compute_advantages(rewards, group_size, "centered")  # (B,) 2(r − mean_G r)
    logp, logp_head, full_logp = trainer_logprobs(policy, ro, 1.0, full=True)  # (B, T), (B, T, k), (B, T, V)
    # KL(q‖p) = Σ_v q_v (log q_v − log p_v), mean over generated tokens
    kl = float((ro.full_logq.exp() * (ro.full_logq - full_logp)).sum(-1)[m].mean())
    grads = {}
    for e in names_wanted:
        weighting, centering = ESTIMATORS[e]
        per_token, _ = score_centered_pg_loss(logp, logp_head, ro.sampler_logp, ro.head_logp, A, m,
                                              weighting=weighting, centering=centering, tis_cap=tis_cap,
                                              mis_band=mis_band)
        g = torch.autograd.grad(reduce_loss(per_token, m), params, retain_graph=True)
        grads[e] = torch.cat([x.reshape(-1) for x in g])
    return grads, dict(kl=kl, tokens=int(m.sum()), reward=float(rewards.mean()))


grads, meas = batch_gradients(on_policy, 10 ** 9, setting_tokens[headline], list(ESTIMATORS))
for e in ESTIMATORS:
    diff = float((grads[e] - grads["plain"]).abs().max())
    print(f"on-policy batch: {e:7s} − plain, max |difference| {diff:.1e} (max |plain| "
          f"{float(grads['plain'].abs().max()):.1e})")
    assert diff <= 1e-4 * float(grads["plain"].abs().max()), e
del grads

# %% [markdown]
# ## The cells
#
# A cell is one sampler × one completion budget × n independent batches; batch seeds differ between cells, so
# the cells are independent of each other and of the on-policy references (one per completion budget). Per
# batch, each estimator's ‖ĝ_e‖² and its inner products with the reference's mean and its two halves are kept
# (everything D_b needs), and the group sums of two differences, ĝ_plain − ĝ_SC and ĝ_plain − ĝ_IS (the drift
# share needs pairs of independent batches). A cell saves each group as it completes (an interrupted run resumes
# at the first missing group); when all groups exist they are reduced to the groups' Gram matrix and the
# per-batch rows, saved as `cell.json`, and the group files are deleted.

# %%
cells_dir = REPO_ROOT / runs_dir / "cells"
cells_dir.mkdir(parents=True, exist_ok=True)
DIFFS = {"plain − sc": ("plain", "sc"), "plain − is": ("plain", "is")}


def group_bounds(n: int) -> list:
    """Batch index ranges [(b0, b1)] of the `groups` groups of a cell of n batches."""
    edges = np.linspace(0, n, groups + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def run_cell(tag: str, cell_i: int, sampler, n: int, max_new_tokens: int, ref, bar) -> dict:
    """n batches of one cell (the reference when ref is None: plain only, its group means kept). Returns
    {"rows": per batch {kl, tokens, reward, seconds, <e>|n2, <e>|mean, <e>|h1, <e>|h2}, "K": {diff: Gram (groups,
    groups) of its group means}, "sizes"}; the reference also {"mean", "h1", "h2"} (P,) tensors."""
    wanted = ["plain"] if ref is None else list(ESTIMATORS)
    key = json.dumps(dict(tag=tag, cell=cell_i, n=n, T=max_new_tokens, model=model, seed=seed, k=k, tis_cap=tis_cap,
                          mis_band=list(mis_band), G=group_size, prompts=prompts_per_step, groups=groups,
                          sampler=sampler.settings if hasattr(sampler, "settings") else None), sort_keys=True,
                     default=str)
    d = cells_dir / hashlib.sha256(key.encode()).hexdigest()[:12]
    d.mkdir(exist_ok=True)
    sizes = [b1 - b0 for b0, b1 in group_bounds(n)]
    if (d / "cell.pt").exists():
        bar.update(n)
        return torch.load(d / "cell.pt", weights_only=False)  # this notebook's own file: its Gram is a numpy array
    for j, (b0, b1) in enumerate(group_bounds(n)):
        gfile = d / f"group{j}.pt"
        if gfile.exists():
            bar.update(b1 - b0)
            continue
        sums = {name: torch.zeros(n_params) for name in (["plain"] if ref is None else DIFFS)}
        rows = []
        for b in range(b0, b1):
            t0 = time.perf_counter()
            grads, row = batch_gradients(sampler, (seed * 100 + cell_i) * 100_000 + b, max_new_tokens, wanted)
            if ref is None:
                sums["plain"] += grads["plain"]
            else:
                for name, (e, f) in DIFFS.items():
                    sums[name] += grads[e] - grads[f]
                for e, g in grads.items():
                    row[f"{e}|n2"] = float(g.double() @ g.double())
                    for part in ("mean", "h1", "h2"):
                        row[f"{e}|{part}"] = float(g.double() @ ref[part].double())
            rows.append(dict(row, b=b, seconds=time.perf_counter() - t0))
            bar.update(1)
        torch.save(dict(sums=sums, rows=rows), gfile)
    parts = [torch.load(d / f"group{j}.pt") for j in range(groups)]
    out = dict(rows=[r for p in parts for r in p["rows"]], sizes=sizes, K={})
    for name in parts[0]["sums"]:
        gm = torch.stack([p["sums"][name] / s for p, s in zip(parts, sizes)])  # (groups, P) group means
        out["K"][name] = (gm.double() @ gm.double().T).numpy()  # (groups, groups)
        if ref is None:  # the reference: its mean and its two halves' means
            w = torch.tensor(sizes, dtype=torch.float32)[:, None]
            half = groups // 2
            out.update(mean=(w * gm).sum(0) / w.sum(), h1=(w[:half] * gm[:half]).sum(0) / w[:half].sum(),
                       h2=(w[half:] * gm[half:]).sum(0) / w[half:].sum())
    torch.save(out, d / "cell.pt")
    for j in range(groups):
        (d / f"group{j}.pt").unlink()
    return out


samplers = [TorchSampler(policy.config, precision=f, k=k, noise_std=s, seed=seed, fp8_backend="emulated")
            for f, s in zip(setting_formats, setting_noise)]
for s in samplers:
    s.push_weights(policy.state_dict())
bar = progress_bar(total=sum(ref_batches) + sum(setting_batches), desc="batches", mininterval=30)
refs = {T: run_cell("reference", 90 + i, on_policy, n, T, None, bar) for i, (T, n) in enumerate(zip(budgets, ref_batches))}
cells = [run_cell(name, i, samplers[i], n, T, refs[T], bar)
         for i, (name, n, T) in enumerate(zip(names, setting_batches, setting_tokens))]
bar.close()

# %% [markdown]
# ## The statistics
#
# Per cell, for each pair (e, f) of estimators, $D_b = \|\hat g_{e,b}\|^2 - \|\hat g_{f,b}\|^2 - 2(\hat g_{e,b} -
# \hat g_{f,b})\cdot\hat g^*_{ref}$ (mean MSE_e − MSE_f), and $M_b = \|\hat g_{f,b}\|^2 - 2\,\hat g_{f,b}\cdot
# \hat g^*_{ref} + \widehat{\|g^*\|^2}$ (mean MSE_f); the relative gap $\bar D / \bar M$ with a delta-method
# t interval over batches, widened by the reference's own noise (estimated from its two halves), exactly as in
# notebook 10. $\|g^*\|^2$ is unbiased from pairs of the reference's groups. The drift share: $\|\mathbb E(\hat
# g_{plain} - \hat g_{SC})\|^2$ from pairs of independent groups (the mean of the off-diagonal of the groups'
# Gram), over the cell's $\bar M$ for plain; its interval by the delete-one-group jackknife (t, `groups` − 1 df).
# The same with exact IS in place of SC is plain's whole drift (IS is unbiased per prefix); SC's share of it is
# what the top-k head captures.

# %%
def offdiag_mean(K: np.ndarray) -> float:
    """Mean of K[j, j'] over j ≠ j': an unbiased ‖E x‖² from independent group means."""
    m = K.shape[0]
    return float((K.sum() - np.trace(K)) / (m * (m - 1)))


def col(cell, name: str) -> np.ndarray:
    """(n,) one per-batch value of a cell."""
    return np.array([r[name] for r in cell["rows"]])


def gap(cell, ref, e: str, f: str) -> dict:
    """MSE_e − MSE_f from D_b over the cell's batches, and relative to MSE_f, with 95% intervals (t over batches,
    the reference's term added); D_b per batch in ‖g*‖² units."""
    n = len(cell["rows"])
    g2 = offdiag_mean(ref["K"]["plain"])
    D = {part: col(cell, f"{e}|n2") - col(cell, f"{f}|n2") - 2 * (col(cell, f"{e}|{part}") - col(cell, f"{f}|{part}"))
         for part in ("mean", "h1", "h2")}
    M = col(cell, f"{f}|n2") - 2 * col(cell, f"{f}|mean") + g2
    ref_term = abs(D["h1"].mean() - D["h2"].mean()) / 2  # sd of the reference's term, from its halves
    tq = stats.t.ppf(0.975, n - 1)
    R = D["mean"].mean() / M.mean()
    se_R = math.hypot((D["mean"] - R * M).std(ddof=1) / math.sqrt(n), ref_term) / M.mean()
    se_D = math.hypot(D["mean"].std(ddof=1) / math.sqrt(n), ref_term)
    return dict(rel_gap=float(R), rel_ci95=float(tq * se_R), D=float(D["mean"].mean() / g2),
                D_ci95=float(tq * se_D / g2), sd_D=float(D["mean"].std(ddof=1) / g2),
                mse_f=float(M.mean() / g2), D_per_batch=(D["mean"] / g2).tolist())


def drift_share(cell, ref, diff: str) -> dict:
    """‖E(ĝ_plain − ĝ_x)‖² / MSE_plain with its delete-one-group jackknife 95% interval, and the numerator in ‖g*‖²."""
    g2 = offdiag_mean(ref["K"]["plain"])
    M = col(cell, "plain|n2") - 2 * col(cell, "plain|mean") + g2
    b = col(cell, "b")
    bounds = group_bounds(len(b))

    def share(idx):
        keep = np.isin(b, [x for j in idx for x in range(*bounds[j])])
        return offdiag_mean(cell["K"][diff][np.ix_(idx, idx)]) / M[keep].mean()

    full = share(np.arange(groups))
    loo = np.array([share(np.delete(np.arange(groups), j)) for j in range(groups)])
    half = stats.t.ppf(0.975, groups - 1) * math.sqrt((groups - 1) / groups * ((loo - loo.mean()) ** 2).sum())
    return dict(share=float(full), ci95=float(half), norm2=float(offdiag_mean(cell["K"][diff]) / g2),
                mse_plain=float(M.mean() / g2))


results = []
for name, cell, T in zip(names, cells, setting_tokens):
    ref = refs[T]
    out = dict(setting=name, tokens_budget=T, batches=len(cell["rows"]), kl=float(col(cell, "kl").mean()),
               tokens_per_batch=float(col(cell, "tokens").mean()), reward=float(col(cell, "reward").mean()),
               seconds_per_batch=float(col(cell, "seconds").mean()),
               norm2_ref=offdiag_mean(ref["K"]["plain"]), drift={d: drift_share(cell, ref, d) for d in DIFFS},
               vs_plain={e: gap(cell, ref, e, "plain") for e in ESTIMATORS if e != "plain"},
               vs_mis={e: gap(cell, ref, e, "mis") for e in ESTIMATORS if e != "mis"})
    results.append(out)
    print(f"\n{name}: {out['batches']} batches, KL(q‖p) {out['kl']:.4f} per token, {out['tokens_per_batch']:.0f} tokens "
          f"and {out['seconds_per_batch']:.1f} s per batch; MSE_plain {out['drift']['plain − sc']['mse_plain']:.1f} ‖g*‖²")
    for d, v in out["drift"].items():
        print(f"  drift share ‖E(ĝ_{d.replace(' − ', ' − ĝ_')})‖² / MSE_plain = {100 * v['share']:+.2f}% ± "
              f"{100 * v['ci95']:.2f}%  ({v['norm2']:+.2f} ‖g*‖²)")
    for e in out["vs_plain"]:
        v, w = out["vs_plain"][e], out["vs_mis"].get(e)
        print(f"  {e:7s} MSE gap to plain {100 * v['rel_gap']:+6.2f}% ± {100 * v['rel_ci95']:.2f}%"
              + (f";  to MIS {100 * w['rel_gap']:+6.2f}% ± {100 * w['rel_ci95']:.2f}%" if w else ""))

# %% [markdown]
# ## The choice, by the rule written above
#
# The cost ratio of each setting (generated tokens per batch over the headline's), the drift share, and the setting the
# rule picks; then each estimator whose MSE gap to plain is decided (95% interval clear of 0) at the chosen
# setting: notebook 16's one-sided predictions.

# %%
unit = results[headline]["tokens_per_batch"]
for r in results:
    r["cost_ratio"] = r["tokens_per_batch"] / unit  # generated tokens per batch: the amended rule 1
    r["within_budget"] = bool(r["cost_ratio"] <= budget_cost_ratio)
    lo = r["drift"]["plain − sc"]["share"] - r["drift"]["plain − sc"]["ci95"]
    r["drift_detected"] = bool(lo > 0)
    print(f"{r['setting']:28s} cost {r['cost_ratio']:.2f} × the headline's ({'within' if r['within_budget'] else 'over'}"
          f" the budget); drift share {100 * r['drift']['plain − sc']['share']:+.2f}% "
          f"({'interval above 0' if r['drift_detected'] else 'interval includes 0'})")
eligible = [i for i, r in enumerate(results) if r["within_budget"]]
if any(results[i]["drift_detected"] for i in range(n_settings)):
    chosen = max(eligible, key=lambda i: results[i]["drift"]["plain − sc"]["share"])
    reason = "the largest drift share within the budget (rule 2)"
else:
    chosen = headline
    reason = "no setting's drift share has an interval above 0: the headline sampler (rule 3)"
predictions = {e: dict(rel_gap=v["rel_gap"], rel_ci95=v["rel_ci95"],
                       direction="worse than plain" if v["rel_gap"] > 0 else "better than plain")
               for e, v in results[chosen]["vs_plain"].items() if abs(v["rel_gap"]) > v["rel_ci95"]}
print(f"\nchosen for notebook 16: {results[chosen]['setting']} — {reason}")
for e, v in predictions.items():
    print(f"  prediction: {e} {v['direction']} per update, MSE gap {100 * v['rel_gap']:+.2f}% ± {100 * v['rel_ci95']:.2f}%")

fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
x = np.arange(n_settings)
for j, d in enumerate(DIFFS):
    v = np.array([[r["drift"][d]["share"], r["drift"][d]["ci95"]] for r in results]) * 100
    axes[0].errorbar(x + (j - 0.5) * 0.15, v[:, 0], yerr=v[:, 1], fmt="o", capsize=4,
                     color=ARM_COLORS[d.split(" − ")[1]], label=f"‖E ĝ_plain − E ĝ_{d.split(' − ')[1].upper()}‖²")
axes[0].axhline(0, color="0.3", lw=0.8)
axes[0].set_xticks(x, [n.replace(", ", "\n") for n in names], fontsize=8)
axes[0].set_ylabel("share of plain's one-batch MSE, %")
axes[0].set_title("plain's drift, centred advantages (95% jackknife)")
axes[0].legend(fontsize=8, loc="upper left")
est = [e for e in ESTIMATORS if e != "plain"]
for j, e in enumerate(est):
    v = np.array([[r["vs_plain"][e]["rel_gap"], r["vs_plain"][e]["rel_ci95"]] for r in results]) * 100
    axes[1].errorbar(x + (j - (len(est) - 1) / 2) * 0.12, v[:, 0], yerr=v[:, 1], fmt="o", capsize=3,
                     color=ARM_COLORS[e], label=e)
axes[1].axhline(0, color="0.3", lw=0.8)
axes[1].set_xticks(x, [n.replace(", ", "\n") for n in names], fontsize=8)
axes[1].set_ylabel("(MSE_e − MSE_plain) / MSE_plain, %")
axes[1].set_title("one update's error against plain's (95% t)")
axes[1].legend(fontsize=8, ncol=3, loc="upper left")
fig.suptitle(f"Group-centred advantages at the starting policy (one CPU model's run: {cpu['model']})", fontsize=10)
fig.tight_layout()
check_layout(fig)
fig.savefig(fig_dir / "15_grpo_gradient_pilot.png", dpi=100)
plt.show()
(fig_dir / "15_grpo_gradient_pilot.json").write_text(json.dumps(dict(
    parameters=dict(model=model, seed=seed, setting_formats=setting_formats, setting_noise=setting_noise,
                    setting_tokens=setting_tokens, setting_batches=setting_batches, ref_batches=ref_batches,
                    headline=headline, budget_cost_ratio=budget_cost_ratio, k=k, tis_cap=tis_cap,
                    mis_band=list(mis_band), prompts_per_step=prompts_per_step, group_size=group_size, groups=groups,
                    advantage_mode="centered"),
    cpu=cpu, settings=results, chosen=dict(index=chosen, setting=results[chosen]["setting"], reason=reason,
                                           noise_std=setting_noise[chosen], max_new_tokens=setting_tokens[chosen],
                                           precision=setting_formats[chosen]),
    predictions=predictions), indent=1))
print(f"saved {figures_dir}/15_grpo_gradient_pilot.png and .json")

# %% [markdown]
# ## What the pilot shows
#
# Read from `figures/15_grpo_gradient_pilot.json` under the rule written above (with its amendment); one run, on
# an AMD EPYC with AVX-512 (the figure's title names it).
#
# * **With group-centred advantages the drift is detectable at the gradient, and small.** Plain's drift,
#   ‖E ĝ_plain − E ĝ_SC‖², is 0.03% of one update's mean squared error at FP8 + σ 0.1, 0.09% at σ 0.2, and 0.06% at
#   σ 0.1 with 96-token completions; every interval lies above 0. Plain's distance from exact token IS's expected
#   update (IS is unbiased per prefix, though its prefixes still come from q; it also reweights the signal) is
#   0.06%, 0.24% and 0.07%. These are ratios of squared norms: 0.09% is about 3% on a norm scale. One update's error
#   is almost all sampling noise in this regime.
# * **Per update, the importance weights cost more than they remove; SC does not.** At σ 0.2, MIS's error is
#   10.8% above plain's (exact IS's 13.8%, TIS's 6.1%), while SC's is 2.9% below it: SC's error is 12.4% below
#   MIS's, the same direction as notebook 10 found with raw rewards. SC's gain over plain is about 30 times the drift
#   share, so it is mostly a lower variance (the centering term also subtracts the head's share of each token's
#   score noise), not the drift removed.
# * **The choice for notebook 16**: FP8 + σ 0.2 with 24-token completions, the largest drift share within the
#   budget (the 96-token setting costs 2.7 times the tokens). Its predictions, by the rule: SC better than plain
#   and MIS worse than plain per update (IS, TIS and SC + MIS too, but they are not confirmatory arms of notebook
#   16); notebook 16 adds the one-sided test MIS − plain < 0 to its family (SC − plain > 0 is already there). Under
#   the rule as first written the choice would have been σ 0.1 (the amendment above).
