# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 16 · The article's regime: does a mismatched sampler cost GRPO anything here, and does SC recover it?
#
# Every claim decided before this notebook trains with raw rewards as advantages (A = r), plain REINFORCE without a
# baseline, the regime that favours score centering most. The article's recipe is GRPO's: ±1 rewards centred within
# each group of G completions of a prompt. Notebook 13 had one arm in that regime (its `baseline`), and it did far
# better than every raw-reward arm; it had no no-mismatch reference and no importance-weighted arm with centred
# advantages, so it could not say whether the mismatch costs GRPO anything. This notebook asks exactly that, on
# fresh seeds, with every arm trained on group-centred advantages A = 2(r − mean_G r), pre-registered below before
# its first run. The setting is the one notebook 15's gradient-level pilot chose by its own pre-written rule.
#
# **Run time**: 4 arms × 85 seeds = 340 runs of 100 steps, about 4.7 hours on 2 CPU cores (about 100 s per run and
# worker, measured on notebook 13's runs), no GPU; from the committed run records (`results/`), about a minute.
# Resumable (one folder per run); a bar counts the runs. With the default parameters it writes
# `runs/figures/16_*`; `make reproduce-full` writes `figures/` and keeps the run records in `results/16_grpo_regime/`.

# %% [markdown]
# ## Pre-registration: written and committed before any run of this notebook
#
# > Written on 2026-12-06, before any run of this notebook existed: only notebook 15's pilot (the gradient at the
# > starting policy; no training) and the power computation below (which reads notebook 13's committed runs) had
# > run. The commit that adds this notebook precedes the commit of any of its run records. The only runs on the
# > block before it are code checks of this notebook (seeds 2000-2001, one update, 4 evaluation prompts, and CI's
# > smoke run with its shrunk parameters, which also uses them); nothing from them enters the tests below.
# >
# > **The setting** (notebook 15's choice; `figures/15_grpo_gradient_pilot.json`, `chosen`): FP8 W8A8 + 20% relative
# > weight noise (σ 0.2), 24-token completions. Of the three settings the pilot measured, it had the largest drift
# > share within the budget (rule 2 there): plain's drift was 0.09% ± 0.02% of one update's mean squared error
# > against the on-policy gradient (0.03% at σ 0.1; 0.06% at σ 0.1 with 96 tokens, which costs 2.7 times the
# > tokens). Every share's interval lies above 0, so the drift is detectable at the gradient, but small: one update's
# > error is almost all sampling noise.
# > The training batch and optimizer are notebook 13's: 8 prompts × G = 4 completions per step, 100 steps, SGD
# > at lr 0.25 with A = 2(r − mean_G r), so the step is 0.5 · (r − mean_G r): exactly notebook 13's `baseline`
# > arm (the headline's REINFORCE step with the group-mean reward as its baseline).
# >
# > **Seeds.** 2000-2084 (85 seeds), checked fresh on 2026-12-06: the setup cell reads every `seed`/`seeds` value
# > in the committed `figures/**/*.json` and `results/**/config.json` (every run behind a figure and every kept run
# > record), the other notebooks' parameters cells, the parameters files, and `seed=`/`seeds=` in `tests/` and
# > `scripts/`, and stops if a seed of the block is named anywhere else (the largest named today is below 2000).
# >
# > **Arms** (paired by seed: same prompt order, sampling seeds and noise draw): `bf16` the no-mismatch reference ·
# > `plain` the mismatched sampler, no correction · `mis` MIS[0.5, 5] · `sc` score centering (k = 128). Optional,
# > exploratory and not in the budget: `tis` (TIS, C = 2) and `sc_mis` (`extra_arms`).
# >
# > **Metrics.** Primary: the area under the clean-evaluation curve (`scrl_min.curve_auc`: the mean clean reward
# > over the 11 evaluations at 0, 10, ..., 100 updates, trapezoids). Secondary: the final clean reward (the mean of
# > the last 3 clean evaluations). Margin ±0.05 on both, in reward units.
# >
# > **The primary family (AUC), Holm's step-down at family-wise α = 0.05** (`scrl_min.test_family`), each a
# > paired t test over the seeds:
# >
# > | # | contrast | test | H1 (the claim) |
# > |---|---|---|---|
# > | C1 | plain − bf16 | one-sided | mean < 0: the mismatch costs GRPO |
# > | C1′ | plain − bf16 | equivalence (TOST) | −0.05 < mean < 0.05: no cost worth a correction, at this scale |
# > | C2 | SC − plain | one-sided | mean > 0: SC recovers what the mismatch costs |
# > | C3 | SC − MIS | equivalence (TOST) | −0.05 < mean < 0.05: SC matches MIS |
# > | C3′ | SC − MIS | non-inferiority | mean > −0.05: SC matches or beats MIS |
# > | C4 | MIS − plain | one-sided | mean < 0: MIS's weight costs more than the drift it removes (the pilot's prediction) |
# >
# > C1-C3′ are the claims (cost, no cost, recovery, SC vs MIS); the verdict page names them G1-G3′ (G for the
# > group-centred regime) and C4 G4. **C4 is the pilot's prediction** (its rule: a one-sided test wherever an arm's
# > error per update was decidedly on one side of plain's): at the chosen setting MIS's mean squared error per update
# > was +10.8% ± 3.3% of plain's (the importance weight's variance), SC's −2.9% ± 0.5% (C2 already tests that
# > direction). Those are sizes per update, not on the AUC: the predicted size on the AUC is written below.
# >
# > C1 and C1′ cannot both be decided (one says a cost, the other that any cost is under 0.05); either can be.
# > **Statuses** by Holm's adjusted p alone (`test_family`): *reproduced* (C1, C2), *equivalent within ±0.05* (C1′,
# > C3), *non-inferior at −0.05* (C3′) where the adjusted p < 0.05; *contradicted* where the Holm-level interval
# > lies wholly on the other side; otherwise *not decided*, with the seeds that would decide it at the
# > pre-registered effect (0.05 beyond the null's edge) beside the count at the observed mean. "Reproduced" and
# > "contradicted" are read at the same level, so together they make a two-sided decision at twice that level.
# >
# > * **Secondary (final clean reward)**: the same hypotheses, a second family, corrected on its own.
# > * **Collapse** (the last clean evaluation's reward sd over the held-out prompts below 0.02): counts per arm,
# >   exact McNemar for plain vs bf16, SC vs plain, SC vs MIS, Holm over the three (descriptive of mechanism).
# > * **Pooling over CPU models**: runs span sessions and the machine's CPU model can change between them. A seed's
# >   runs are committed together, when all its arms have finished, so within a seed one machine; every test pools
# >   all seeds (a seed is one unit), and each row also reports the per-CPU-kind mean ± 95% and a heterogeneity
# >   test (`scrl_min.heterogeneity`), flagged when p < 0.05; the flag never changes a status.
# > * Everything else (other differences, training reward, KL) is descriptive.
# >
# > **The number of seeds** (the power computation below, from notebook 13's two centred arms, 36 seeds: the
# > paired sd of the AUC difference SC + baseline − baseline, 0.140): 85 seeds give a one-sided test of a 0.05
# > effect 80% power at Holm's first-step level α/6, so every row is powered for a 0.05 effect wherever Holm tests
# > it. The TOST rows at a true difference of 0 have more power at Holm's later steps (printed below).
# >
# > **Expected results, written before any run.** From the pilot and notebook 13's two centred arms:
# > * C1, C1′: the drift is 0.09% of one update's error; over 100 updates a bias that small stays well below the
# >   accumulated sampling noise, and notebook 13's centred arm on the σ 0.1 sampler beat even the raw no-mismatch
# >   reference. Expected: plain − bf16 within ±0.03 of 0, so **C1′ equivalent within ±0.05** and C1 not decided: the
# >   mismatch costs GRPO nothing detectable at this scale. A decided C1 (a cost) would contradict this expectation.
# > * C2: SC − plain small and positive (SC's error per update is 2.9% lower, mostly variance), **not decided**.
# > * C3, C3′: SC − MIS between 0 and +0.03 (SC's error per update is 12.4% below MIS's), **equivalent within ±0.05**
# >   and **non-inferior**.
# > * C4: MIS − plain below 0 but small on the AUC (an error 10.8% larger per update, in a regime where the error is
# >   almost all sampling noise that 100 updates average), expected **not decided**; a decided C4 would say the weight
# >   is a net cost in this regime.
# > * Secondary (final reward): the same directions, every row not decided or equivalent (its sd is 1.6 times the
# >   AUC's in notebook 13's centred arms).
# > * Collapse: rare in every arm (notebook 13's centred arm collapsed in 0 of 36 runs).

# %% [markdown]
# ### Amendment, written 2026-12-06 (same session), after its first runs had started and before any of their results was read
#
# A reviewer's reading of the pre-registration above found five things to correct; none changes the arms, seeds,
# setting, metrics, margins or hypotheses, and no run's result had been looked at:
#
# 1. **"Contradicted" is controlled family-wise.** The statuses above come from `scrl_min.test_family`, which now
#    reads "contradicted" where the test in the opposite direction rejects under its own Holm correction over the
#    family (as docs/verdict.md's rule 5 and its page always did). Before, a row on the wrong side was called
#    contradicted when its Holm-level interval cleared the null, which for a row ranked last is a test at α alone,
#    whatever the family's size. Each direction is now controlled at α; together they are a two-sided decision at 2α.
# 2. **C1 and C1′ can both be decided**: a cost that is detectable and smaller than the margin satisfies both (the
#    sentence above says they cannot). Both decided would read: a cost, below 0.05.
# 3. **The expected-results arithmetic for C1.** The drift share is a bias² per single update (0.09% of one update's
#    error, about 3% on a norm scale). Over N updates a consistent bias adds up coherently (its square as N²) while
#    the sampling noise adds as N, so after 100 updates the drift could reach about 100 × 0.09% ≈ 9% of the
#    accumulated noise in squared norm (30% in norm) if it kept its direction; it changes as the policy moves, and
#    notebook 13's centred arm at σ 0.1 beat even the raw no-mismatch reference (which says nothing of a centred
#    one). So "C1′ equivalent" is the expectation with that margin of doubt, not a near-certainty.
# 4. **Power, stated as numbers**: at 85 seeds, TOST at a true difference of 0 has power 0.61 at α/6 and 0.89 at α
#    (the power cell prints both): the "equivalent" expectations for C1′ and C3 rest on Holm reaching those rows
#    late. The sd (0.140) is notebook 13's SC + baseline − baseline at σ 0.1, standing in for every contrast here at
#    σ 0.2: an assumption.
# 5. **Ids.** The verdict page and this notebook's JSON name C1, C1′, C2, C3, C3′ and C4 as G1, G1′, G2, G3, G3′ and
#    G4 ("C" numbers the page's own claims). C4's test is MIS − plain < 0 on the AUC: it says that MIS trains worse
#    than plain, not why (the pilot's reason, the weight's variance, is a prediction, not what the test shows).

# %% tags=["parameters"]
model = "default"  # policy: "default" (embedded tiny Qwen3) or a local checkpoint path / HF model id
arms = ["bf16", "plain", "mis", "sc"]  # the confirmatory arms (bf16: no mismatch), all with centred advantages
extra_arms = []  # exploratory arms, not in the budget: "tis", "sc_mis" (85 runs more each, about 1.2 h on 2 cores)
first_seed = 2000  # the fresh block: seeds first_seed, first_seed + 1, ...
n_seeds = 85  # paired seeds, set by the power computation below
sampler_precision = "fp8"  # the mismatched arms' sampler numerics (notebook 15's choice)
noise_std = 0.2  # sigma: relative weight noise on the sampler (notebook 15's choice)
max_new_tokens = 24  # completion budget, tokens (notebook 15's choice)
pilot_json = "figures/15_grpo_gradient_pilot.json"  # the pilot whose choice the three lines above must equal; "" none
steps = 100  # RL steps per run
prompts_per_step = 8  # distinct prompts per step
group_size = 4  # G: completions per prompt (a GRPO group)
lr = 0.25  # SGD learning rate; with A 2(r − mean_G r) the step is twice lr · (r − mean_G r)
eval_every = 10  # steps between clean evaluations of the trainer's own policy
eval_prompts = 64  # held-out prompts in each clean evaluation, one completion each
final_evals = 3  # last clean evaluations averaged into the final clean reward (secondary metric)
power_source = "figures/13_confirmatory.json"  # notebook 13's runs: its two centred arms set the seed count
power_target = 0.8  # power of a one-sided test of a 0.05 effect at Holm's first-step level
seconds_per_run = 100  # CPU-thread seconds of one 100-step run at 24 tokens (notebook 13's median)
workers = 2  # runs in parallel, one CPU thread each
runs_dir = "runs/16_grpo_regime"  # one folder per run configuration, relative to the repo root
figures_dir = "runs/figures"  # figures and their numbers, relative to the repo root (`make reproduce-full` writes figures/)

# %%
import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from scipy import stats

import scrl_min
from scrl_min import (ALPHA, ARM_COLORS, DEFAULT_MODEL_PATH, MARGIN, REPO_ROOT, arm_config, band_plot, check_layout,
                      collapsed, curve_auc, eval_curve, final_reward, forest_plot, heterogeneity, holm, mcnemar_exact,
                      mean_ci95, p_text, per_seed_plot, run_grid, seeds_named_elsewhere, seeds_to_decide, test_family,
                      with_run_dir)

# The pre-registered hypotheses (a, b, test) on a − b, in the order of the table above
FAMILY = [("plain", "bf16", "less"), ("plain", "bf16", "equivalent"), ("sc", "plain", "greater"),
          ("sc", "mis", "equivalent"), ("sc", "mis", "noninferior")]
PILOT_FAMILY = [("mis", "plain", "less", 0.108)]  # the pilot's one-sided predictions, (a, b, test, MSE gap per update)
EXPLORATORY = [("sc_mis", "mis", "greater"), ("sc", "tis", "equivalent")]
COLLAPSE_PAIRS = [("plain", "bf16"), ("sc", "plain"), ("sc", "mis")]
CLAIM_IDS = {("plain", "bf16", "less"): "G1", ("plain", "bf16", "equivalent"): "G1'",
             ("sc", "plain", "greater"): "G2", ("sc", "mis", "equivalent"): "G3", ("sc", "mis", "noninferior"): "G3'",
             ("mis", "plain", "less"): "G4"}

KNOWN_ARMS = ("bf16", "plain", "mis", "sc", "tis", "sc_mis")
for a in arms + extra_arms:
    if a not in KNOWN_ARMS:
        raise ValueError(f"unknown arm {a!r} in the parameters; this notebook's arms are {KNOWN_ARMS}")
if n_seeds < 2:
    raise ValueError(f"need n_seeds >= 2, got {n_seeds}")
seeds = list(range(first_seed, first_seed + n_seeds))
all_arms = arms + [a for a in extra_arms if a not in arms]
family = [h for h in FAMILY + [p[:3] for p in PILOT_FAMILY] if h[0] in all_arms and h[1] in all_arms]
exploratory = [h for h in EXPLORATORY if h[0] in all_arms and h[1] in all_arms]
model_path = str(DEFAULT_MODEL_PATH) if model == "default" else model
fig_dir = REPO_ROOT / figures_dir
fig_dir.mkdir(parents=True, exist_ok=True)
if pilot_json:  # the setting is the pilot's choice, not a free parameter of the full run
    chosen = json.loads((REPO_ROOT / pilot_json).read_text())["chosen"]
    mine = dict(precision=sampler_precision, noise_std=noise_std, max_new_tokens=max_new_tokens)
    if {k: chosen[k] for k in mine} != mine:
        raise ValueError(f"the setting {mine} is not notebook 15's choice {chosen}: set pilot_json = '' to run another")
print(f"{len(all_arms)} arms × {n_seeds} seeds ({seeds[0]}-{seeds[-1]}), centred advantages, lr {lr}; sampler "
      f"{sampler_precision} + σ {noise_std:g}, {max_new_tokens} tokens; {len(family)} hypotheses in the family")


named = seeds_named_elsewhere("16_grpo_regime")  # every seed the repository names outside this notebook
clash = {s: named[s] for s in seeds if s in named}
if clash:
    raise ValueError(f"seeds of the fresh block are named elsewhere: {clash}; choose another first_seed")
print(f"fresh seeds: {len(named)} distinct seeds are named elsewhere, largest {max(named)}; none in "
      f"{seeds[0]}-{seeds[-1]}")

# %% [markdown]
# ## How many seeds: the power computation
#
# Notebook 13 trained two arms with centred advantages on its headline sampler (FP8 + σ 0.1, lr 0.25 with
# A = 2(r − mean_G r): `baseline` without and `sc_baseline` with score centering), 36 seeds each: the paired sd of
# their AUC difference is the per-seed spread of a contrast between two centred arms. With n seeds and per-seed sd
# σ, a one-sided t test at level a has 80% power for a true effect Δ beyond its null's edge when
# (t_{1−a, n−1} + t_{0.8, n−1}) · σ / √n ≤ Δ (`scrl_min.seeds_to_decide`); Holm tests a row at a level between
# α/m (the first step) and α (the last). TOST at a true difference of 0 needs both one-sided tests to pass:
# its power is 1 − 2·(1 − F_t(Δ√n/σ − t_{1−a})) (the t approximation).

# %%
source = json.loads((REPO_ROOT / power_source).read_text())["per_arm"]
power = {"source": power_source, "margin": MARGIN, "alpha": ALPHA, "m": len(FAMILY) + len(PILOT_FAMILY)}
for metric, key in (("auc", "auc_per_seed"), ("final", "final_per_seed")):
    d = np.array(source["sc_baseline"][key]) - np.array(source["baseline"][key])
    power[metric] = dict(sd=float(d.std(ddof=1)), mean=float(d.mean()), seeds=len(d))
sigma, m = power["auc"]["sd"], power["m"]
n_first = seeds_to_decide(sigma, MARGIN, ALPHA / m, power_target)
n_last = seeds_to_decide(sigma, MARGIN, ALPHA, power_target)


def tost_power(n: int, sd: float, level: float) -> float:
    """TOST's power at a true difference 0, margin ±MARGIN, each side at `level` (t approximation)."""
    return max(0.0, 1 - 2 * stats.t.sf(MARGIN * math.sqrt(n) / sd - stats.t.ppf(1 - level, n - 1), n - 1))


power.update(n_required=n_first, n_last_step=n_last, n_seeds=n_seeds,
             tost_power_at_n={"α/m": tost_power(n_seeds, sigma, ALPHA / m), "α": tost_power(n_seeds, sigma, ALPHA)})
print(f"notebook 13's centred arms ({power['auc']['seeds']} seeds): sd of the paired AUC difference {sigma:.3f}, "
      f"of the final reward {power['final']['sd']:.3f}")
print(f"one-sided test of a {MARGIN} effect, 80% power: {n_first} seeds at α/{m} (Holm's first step), {n_last} at α; "
      f"this run: {n_seeds}")
print(f"TOST at a true difference 0 with {n_seeds} seeds: power {power['tost_power_at_n']['α/m']:.2f} at α/{m}, "
      f"{power['tost_power_at_n']['α']:.2f} at α")
n_runs = n_seeds * len(all_arms)
power["run_time_hours"] = n_runs * seconds_per_run * steps / 100 / workers / 3600
print(f"run time: {n_runs} runs × {seconds_per_run} s / {workers} workers ≈ {power['run_time_hours']:.1f} h")

# %% [markdown]
# ## Run every (arm, seed)
#
# Seed by seed, every arm of a seed before the next seed, so that an interrupted run leaves whole seeds. Each run
# writes `metrics.jsonl` and checkpoints into a folder named after its configuration (`<arm>-s<seed>-<config_id>`):
# re-running continues unfinished runs and skips finished ones.

# %%
def job(arm: str, seed: int):
    """The TrainConfig of one run: the arm's preset on the chosen sampler, centred advantages."""
    noise = {} if arm == "bf16" else {"noise_std": noise_std}  # the bf16 reference keeps σ = 0: no mismatch
    precision = {} if arm == "bf16" else {"sampler_precision": sampler_precision}
    cfg = arm_config(arm, model=model_path, seed=seed, steps=steps, prompts_per_step=prompts_per_step,
                     group_size=group_size, max_new_tokens=max_new_tokens, lr=lr, advantage_mode="centered",
                     eval_every=eval_every, eval_prompts=eval_prompts, progress=False, **noise, **precision)
    return with_run_dir(cfg, REPO_ROOT / runs_dir, f"{arm}-s{seed}")


jobs = {(arm, s): job(arm, s) for s in seeds for arm in all_arms}
results = run_grid(jobs, workers=workers)


def seed_machines(names: list) -> list:
    """The CPU kind of each seed's runs (the `isa` of every run's machine.json); "mixed" for a seed whose runs ran
    on more than one kind, "unknown" where no run recorded one."""
    kinds = []
    for s in seeds:
        isas = set()
        for a in names:
            path = Path(jobs[(a, s)].out_dir) / "machine.json"
            isas |= {r["isa"] for r in json.loads(path.read_text())} if path.exists() else {"unknown"}
        kinds.append(isas.pop() if len(isas) == 1 else "mixed")
    return kinds


kinds = seed_machines(all_arms)
out = {metric: {a: np.array([fn(results[(a, s)]) for s in seeds]) for a in all_arms}
       for metric, fn in (("auc", curve_auc), ("final", lambda r: final_reward(r, final_evals)),
                          ("collapsed", lambda r: bool(collapsed(r))))}
print(f"seeds per CPU kind: { {k: kinds.count(k) for k in sorted(set(kinds))} }")
print(f"{'arm':8s}{'AUC':>17s}{'final clean':>17s}{'collapsed':>11s}")
for arm in all_arms:
    (am, ah), (fm, fh) = mean_ci95(out["auc"][arm]), mean_ci95(out["final"][arm])
    print(f"{arm:8s}{am:9.3f} ± {ah:.3f}{fm:9.3f} ± {fh:.3f}{int(out['collapsed'][arm].sum()):>7d}/{n_seeds}")

# %% [markdown]
# ## The tests
#
# `scrl_min.test_family` runs each family's hypotheses and Holm's step-down over them (the rule of every
# pre-registered notebook, defined once in `scrl_min/stats.py`); `scrl_min.heterogeneity` adds the per-CPU-kind
# rows. The claim rows, with their ids, go into the JSON for the verdict page to collect.

# %%
families = {"primary (AUC)": test_family(out["auc"], family, stated_effect=MARGIN),
            "secondary (final clean reward)": test_family(out["final"], family, stated_effect=MARGIN)}
if exploratory:
    families["exploratory (AUC)"] = test_family(out["auc"], exploratory, stated_effect=MARGIN)
for (title, rows), metric in zip(families.items(), ("auc", "final", "auc")):
    hyps = family if not title.startswith("exploratory") else exploratory
    print(f"\nfamily: {title}, Holm over {len(rows)}")
    for r, (a, b, _) in zip(rows, hyps):
        r.update(heterogeneity(out[metric][a] - out[metric][b], kinds))
        lo, hi = r["mean"] - r["ci_holm"], r["mean"] + r["ci_holm"]
        print(f"  {r['name']:14s}{r['test']:>12s}{r['mean']:+9.3f} ± {r['ci95']:.3f}  Holm-level [{lo:+.3f}, {hi:+.3f}]"
              f"  p {p_text(r['p'])}  Holm p {p_text(r['p_holm'])}  wins {r['wins']}/{r['n']}  {r['status']}"
              + (f"; {r['seeds_at_stated_effect']} seeds at a 0.05 effect" if r["p_holm"] >= ALPHA else "")
              + (f"; heterogeneity p {p_text(r['het_p'])}" if r["het_p"] is not None else ""))
pairs = [(a, b) for a, b in COLLAPSE_PAIRS if a in all_arms and b in all_arms]
collapse = [mcnemar_exact(out["collapsed"][a], out["collapsed"][b]) for a, b in pairs]
for t, ph in zip(collapse, holm([t["p"] for t in collapse]) if collapse else []):
    t["p_holm"] = float(ph)
collapse = {f"{a} vs {b}": dict(a=int(out["collapsed"][a].sum()), b=int(out["collapsed"][b].sum()), **t)
            for (a, b), t in zip(pairs, collapse)}
print("\ncollapse, exact McNemar (two-sided), Holm over the pairs: " + "; ".join(
    f"{k} {v['a']} vs {v['b']}, Holm p {p_text(v['p_holm'])}" for k, v in collapse.items()))
claims = [dict(id=CLAIM_IDS.get(tuple(h), "G-pilot"), regime="group-centred advantages", notebook=16,
               family=title, metric="AUC" if "AUC" in title else "final clean reward", **r)
          for title in ("primary (AUC)", "secondary (final clean reward)")
          for h, r in zip(family, families[title])]

# %% [markdown]
# ### Post hoc, descriptive: the policy's entropy and the reward's spread per arm
#
# Added after the run, when the primary family had come out against the expectation (plain above the
# reference): not pre-registered, no test, no status. Two quantities every run logs at every update, per arm as
# each seed's mean over its 100 updates and over its last 20: the trainer's entropy on the sampled tokens
# (`entropy_p`, nats per token) and the spread of the reward within a training batch (`reward_std`), with each
# arm's paired difference to the reference (mean ± 95% over seeds). And the per-seed AUCs fall in two groups (the
# figure below, top right: most runs near 0.4, the rest near 0.65, few between): how many runs of each arm lie in
# the upper group (AUC above 0.55, the trough, read off after the run), and of the seeds where exactly one of an
# arm's run and the reference's does, which one.

# %%
def per_seed_mean(arm: str, key: str, last: int = None) -> np.ndarray:
    """(seeds,) each run's mean of `key` over its updates (the last `last` of them when given)."""
    return np.array([np.mean([r[key] for r in results[(arm, s)]][-(last or steps):]) for s in seeds])


post_hoc = {}
for key in ("entropy_p", "reward_std"):
    for span, last in (("all updates", None), ("last 20 updates", 20)):
        ref = per_seed_mean("bf16", key, last)
        post_hoc[f"{key}, {span}"] = {}
        for arm in all_arms:
            v = per_seed_mean(arm, key, last)
            (m, h), (dm, dh) = mean_ci95(v), mean_ci95(v - ref)
            post_hoc[f"{key}, {span}"][arm] = dict(mean=float(m), ci95=float(h), minus_bf16=float(dm),
                                                   minus_bf16_ci95=float(dh))
        print(f"{key:10s} {span:16s}" + "".join(f"  {a} {v['mean']:.3f}" + ("" if a == "bf16" else
              f" ({v['minus_bf16']:+.3f} ± {v['minus_bf16_ci95']:.3f})") for a, v in post_hoc[f"{key}, {span}"].items()))
upper = {a: out["auc"][a] > 0.55 for a in all_arms}  # (seeds,) bool: the run is in the upper group
post_hoc["upper group (AUC > 0.55)"] = {a: dict(runs=int(upper[a].sum()), only_this=int((upper[a] & ~upper["bf16"]).sum()),
                                                only_bf16=int((upper["bf16"] & ~upper[a]).sum())) for a in all_arms}
print("runs with AUC above 0.55: " + "; ".join(
    f"{a} {v['runs']}/{n_seeds}" + ("" if a == "bf16" else f" (seeds where only {a}'s is: {v['only_this']}, only "
                                    f"bf16's: {v['only_bf16']})") for a, v in post_hoc["upper group (AUC > 0.55)"].items()))

# %% [markdown]
# ### The figure: curves, every seed, the two families
#
# Top left: clean evaluation reward against updates, mean and 95% band over seeds. Top right: each run's AUC (a
# ring marks a collapsed run) with the arm's mean and 95% interval. Bottom: the pre-registered contrasts on the AUC
# (primary) and the final reward (secondary): thick bar 95%, thin bar the Holm-level interval, the grey band the
# ±0.05 margin; blue where Holm decides the claim, red where it is contradicted.

# %%
fig, axes = plt.subplots(2, 2, figsize=(13, 9))
curves = {}
for arm in all_arms:
    x, _ = eval_curve(results[(arm, seeds[0])])
    E = np.array([eval_curve(results[(arm, s)])[1] for s in seeds])  # (seeds, evaluations)
    band_plot(axes[0, 0], x, E, arm, ARM_COLORS[arm], 2.0 if arm in ("bf16", "sc") else 1.2)
    curves[arm] = dict(updates=x.tolist(), eval_reward=E.tolist())
axes[0, 0].set_xlabel("RL updates")
axes[0, 0].set_ylabel("clean eval reward (held-out prompts)")
axes[0, 0].legend(fontsize=8, loc="lower right")
axes[0, 0].set_title(f"mean and 95% band over {n_seeds} seeds")
per_seed_plot(axes[0, 1], out["auc"], out["collapsed"], "AUC: mean clean reward over training")
axes[0, 1].set_title("every run (ring: collapsed)")
forest_plot(axes[1, 0], families["primary (AUC)"], "paired difference in AUC (primary)")
axes[1, 0].set_title(f"primary family, Holm over {len(family)}")
forest_plot(axes[1, 1], families["secondary (final clean reward)"], "paired difference in final clean reward")
axes[1, 1].set_title(f"secondary family, Holm over {len(family)}")
cpus = sorted(set(kinds))
fig.suptitle(f"Group-centred advantages: {sampler_precision} + {noise_std:.0%} weight noise, {max_new_tokens} tokens, "
             f"{n_seeds} fresh paired seeds ({', '.join(cpus)} CPUs pooled)")
fig.tight_layout()
check_layout(fig)
fig.savefig(fig_dir / "16_grpo_regime.png", dpi=110)
plt.show()
params = dict(model=model, arms=arms, extra_arms=extra_arms, seeds=seeds, sampler_precision=sampler_precision,
              noise_std=noise_std, max_new_tokens=max_new_tokens, steps=steps, prompts_per_step=prompts_per_step,
              group_size=group_size, lr=lr, advantage_mode="centered", eval_every=eval_every,
              eval_prompts=eval_prompts, final_evals=final_evals, margin=MARGIN, alpha=ALPHA,
              collapse_std=scrl_min.COLLAPSE_STD)
per_arm = {a: dict(auc_per_seed=out["auc"][a].tolist(), final_per_seed=out["final"][a].tolist(),
                   collapsed_per_seed=out["collapsed"][a].tolist(),
                   **{f"{m}_{k}": float(v) for m in ("auc", "final") for k, v in zip(("mean", "ci95"), mean_ci95(out[m][a]))})
           for a in all_arms}
(fig_dir / "16_grpo_regime.json").write_text(json.dumps(
    {"parameters": params, "hypotheses": [list(h) for h in family], "exploratory": [list(h) for h in exploratory],
     "pilot_predictions": [list(p) for p in PILOT_FAMILY], "per_arm": per_arm, "families": families,
     "claims": claims, "collapse_tests": collapse, "curves": curves, "power": power, "post_hoc_descriptive": post_hoc,
     "cpu_kind_per_seed": dict(zip(map(str, seeds), kinds)),
     "run_seconds": {f"{a}/{s}": sum(r["seconds"] for r in recs) for (a, s), recs in results.items()}}, indent=1))
print(f"saved {figures_dir}/16_grpo_regime.png and .json")

# %% [markdown]
# ## What the measurement shows
#
# Read from `figures/16_grpo_regime.json` under the rules declared at the top (written after the run; the statuses
# are the tables' above). 85 paired seeds, every run on an AMD EPYC with AVX-512 (one CPU kind, so no heterogeneity
# test applies); the runs spread over three sessions. The claim rows, as the verdict page prints them (the AUC, Holm
# over six):
#
# > * G1, a mismatched sampler costs GRPO: plain − bf16 +0.075 ± 0.030, **contradicted**: the mismatched sampler
# >   trains *better* than the reference.
# > * G1′, no cost worth a correction: not decided (estimate outside ±0.05).
# > * G2, score centering recovers it: SC − plain −0.037 ± 0.027, **contradicted**.
# > * G3 and G3′, SC matches MIS: SC − MIS −0.006 ± 0.034, **equivalent within ±0.05** and **non-inferior at −0.05**.
# > * G4, MIS trains worse than plain (the pilot's prediction): MIS − plain −0.031 ± 0.031, not decided (its 85
# >   seeds had 80% power at a 0.05 effect beyond 0; 95% interval [−0.063, +0.000]).
#
# * **Expected and observed.** G3, G3′ and G4 got the statuses written before the run (G3's estimate, −0.006, lies
#   just below the expected 0 to +0.03). G1′ was expected equivalent and G1 and G2 not decided; instead G1 and G2
#   were decided in the direction nobody predicted: the reference averages 0.456 over training and plain 0.531,
#   and SC lies between them, below plain. The pre-registration named a decided cost as the result that would
#   contradict it; the data contradict it from the other side.
# * **The secondary (final clean reward)** points the same way, larger: plain − bf16 +0.143 ± 0.054 (G1 and G1′
#   both contradicted), SC − plain −0.073 ± 0.047 (contradicted); SC against MIS is not decided there. Its expected
#   result, every row not decided or equivalent, failed too. Collapse was rare: one run of 85 in bf16 and in plain,
#   none in MIS or SC.
# * **Why, read post hoc (descriptive, not tested).** The per-seed AUCs split in two groups (the figure, top right):
#   15 of the reference's 85 runs reach the upper one, 42 of plain's, 31 of MIS's and 26 of SC's; of the seeds where
#   exactly one of plain's and the reference's runs does, it is plain's in 32 and the reference's in 5. The policy's
#   entropy stays higher in every mismatched arm: 1.06 nats per token over training for the reference, +0.53 ± 0.21
#   for plain, +0.49 ± 0.22 for MIS and +0.30 ± 0.22 for SC. One reading: every mismatched arm samples from a noisier
#   policy, which explores, and a run that explores more often leaves the lower group. Why SC keeps less of that
#   entropy than MIS, which also corrects for the sampler, is not explained here, and no run-by-run link between
#   entropy and AUC was measured.
# * **What it means.** With the article's group-centred advantages (though not its optimizer, batch sizes or
#   models), at this scale and in this one setting, the mismatch costs GRPO nothing: plain trains better than the
#   reference, and SC trains worse than plain (whether because it removes the drift is not tested). SC and MIS
#   are equivalent within ±0.05 on the AUC, a margin wider than the SC − plain difference decided here, and not
#   decided on the final reward. It does not show that a mismatch helps in general: FP8 + σ 0.2 is noisier than
#   every real format measured here, the completions are 24 tokens and training stops after 100 updates. With raw
#   rewards (notebook 13, at σ 0.1 and lr 0.5) a sampler of the same kind costs plain training and SC recovers it;
#   the two notebooks differ in the noise and the step as well as the advantages, so the contrast between them is
#   not one experiment.
