"""Statistics over seeds and figure checks: what the experiment notebooks, scripts/verdict.py and the
deck compute from the metrics records of finished runs. Nothing here trains; the runs are `driver.py`'s
(`run_grid`, `train_many`), the method is `core.py`.

Reading order: `mean_ci95` (a mean over seeds with its 95% t interval) · `eval_curve`,
`moving_average` (curves of one run) · `final_reward`, `curve_auc`, `collapsed` (one number per run) ·
`p_text`, `holm`, `paired_contrasts`, `mcnemar_exact` (arms compared over paired seeds) · the inference rule of
the pre-registered notebooks: `paired_test`, `seeds_to_decide`, `effect_beyond_null`, `wins`, `test_family`
(`test_differences`, `decide_family`: Holm, its level and interval, the statuses), `describe_difference` (a row no
claim reads), `heterogeneity`, and for designs rerun on other CPU models `pool_replicates`,
`replicate_heterogeneity` · `ARM_COLORS`,
`band_plot`, `forest_plot`, `per_seed_plot`, `check_layout` (figures fit for a slide).
"""
from __future__ import annotations

import math

import numpy as np

from .core import ScrlError

# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Statistics over seeds
# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Statistics over seeds: a mean with its 95% Student-t interval (the experiments' tables and bands).
# T975[n - 2]: the 0.975 quantile of Student's t with n − 1 degrees of freedom, n = 2..31 seeds.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042)


def mean_ci95(values, axis: int = 0):
    """Mean over seeds and the half-width of its 95% t interval: mean ± t_{0.975, n−1} · s / √n.

    values: array-like with the n seeds along `axis` (n >= 2; t from the table T975 up to 31 seeds, from scipy's
    Student t above: never the normal 1.96, which is 3.5% too narrow at 36 seeds).
    Returns (mean, half_width) as floats or numpy arrays of the remaining shape. For paired
    differences between arms pass the per-seed differences. Raises ScrlError for fewer than 2 seeds.
    """
    x = np.asarray(values, dtype=float)
    n = x.shape[axis]
    if n < 2:
        raise ScrlError(f"a 95% interval needs at least 2 seeds, got {n}")
    if n - 2 < len(T975):
        t = T975[n - 2]
    else:
        from scipy import stats

        t = float(stats.t.ppf(0.975, n - 1))
    return x.mean(axis), t * x.std(axis, ddof=1) / math.sqrt(n)


def eval_curve(records: list, key: str = "eval_reward"):
    """The clean evaluation of one run: (updates (n,) int, values (n,) float) of one of its metrics
    (eval_reward, eval_reward_std, eval_len) from its metrics records, starting at 0 updates
    (`<key>_init`), then after every evaluated step. Raises ScrlError if the run had no evaluation
    (eval_every = 0)."""
    if not records or f"{key}_init" not in records[0]:
        raise ScrlError(f"this run has no clean evaluation of {key} (eval_every = 0, or no step logged)")
    ev = [r for r in records if key in r]
    return (np.array([0] + [r["step"] + 1 for r in ev]),
            np.array([records[0][f"{key}_init"]] + [r[key] for r in ev]))


def moving_average(x, w: int) -> np.ndarray:
    """Trailing moving average of a curve (n,) over w steps (the first w − 1 points average what exists)."""
    x = np.asarray(x, dtype=float)
    w = max(1, min(w, len(x)))
    c = np.cumsum(np.insert(x, 0, 0.0))
    return np.concatenate([c[1:w] / np.arange(1, w), (c[w:] - c[:-w]) / w])


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Per-run outcomes, paired contrasts between arms, figures
# ═════════════════════════════════════════════════════════════════════════════════════════════════
COLLAPSE_STD = 0.02  # a run has collapsed when its last clean evaluation's reward std is below this


def final_reward(records: list, last: int = 3, key: str = "eval_reward") -> float:
    """A run's final clean reward: the mean of its last `last` clean evaluations (`eval_curve`)."""
    return float(np.mean(eval_curve(records, key)[1][-last:]))


def curve_auc(records: list, key: str = "eval_reward") -> float:
    """The area under a run's clean-evaluation curve over its updates, divided by their number: the
    mean clean reward over training (trapezoids between evaluations, from 0 updates to the last)."""
    x, y = eval_curve(records, key)
    return float(np.sum((y[1:] + y[:-1]) / 2 * np.diff(x)) / (x[-1] - x[0]))


def collapsed(records: list, std_below: float = COLLAPSE_STD) -> bool:
    """True when every held-out completion of the last clean evaluation earns (nearly) the same reward
    (reward std over the held-out prompts below `std_below`): the policy emits one fixed template."""
    return eval_curve(records, "eval_reward_std")[1][-1] < std_below


def p_text(p: float) -> str:
    """A p value as text: three decimals, or '< 0.001' (never '0.000'). Used by the notebooks' figures,
    scripts/verdict.py and the deck."""
    return f"{p:.3f}" if p >= 0.001 else "< 0.001"


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values (same order as given): the i-th smallest p times (m − i + 1),
    made monotone, capped at 1. A contrast is significant at family-wise level α when its adjusted p
    is below α (Holm 1979)."""
    p = np.asarray(pvalues, dtype=float)
    order = np.argsort(p, kind="stable")
    adj = np.maximum.accumulate(p[order] * (len(p) - np.arange(len(p))))
    out = np.empty_like(p)
    out[order] = np.minimum(adj, 1.0)
    return out


def paired_contrasts(values: dict, contrasts: list, alpha: float = 0.05) -> list:
    """Paired differences between arms over seeds, with 95% and Holm-adjusted intervals.

    values: {arm: (n_seeds,) array}, seeds in the same order for every arm (paired). contrasts: list of
    (a, b) arm pairs, each read as a − b, all in one family. Returns one dict per contrast: name "a − b",
    mean, ci95 (half-width of the t interval), p (two-sided paired t test), p_holm (`holm` over the
    family), ci_holm (half-width of the t interval at level 1 − α/(m − rank + 1), the level Holm's step
    tests this contrast at: it excludes 0 exactly when the contrast is significant, given the contrasts
    ranked before it are), wins (seeds with a > b), n. Raises ScrlError for fewer than 2 seeds.
    """
    from scipy import stats

    rows = []
    for a, b in contrasts:
        d = np.asarray(values[a], dtype=float) - np.asarray(values[b], dtype=float)
        mean, half = mean_ci95(d)
        sd = d.std(ddof=1)
        p = 1.0 if sd == 0 else float(2 * stats.t.sf(abs(mean) / (sd / math.sqrt(len(d))), len(d) - 1))
        rows.append(dict(name=f"{a} − {b}", mean=float(mean), ci95=float(half), p=p, sd=float(sd),
                         wins=int((d > 0).sum()), n=len(d)))
    p_holm = holm([r["p"] for r in rows])
    rank = np.argsort(np.argsort([r["p"] for r in rows], kind="stable"), kind="stable")
    for r, ph, k in zip(rows, p_holm, rank):
        level = alpha / (len(rows) - k)
        r.update(p_holm=float(ph), holm_level=float(level),
                 ci_holm=float(stats.t.ppf(1 - level / 2, r["n"] - 1) * r.pop("sd") / math.sqrt(r["n"])))
    return rows


def mcnemar_exact(a, b) -> dict:
    """Exact McNemar test of two paired binary outcomes (e.g. collapse of arm a and arm b per seed):
    the discordant seeds n_ab (a only) and n_ba (b only) and the two-sided binomial p-value of n_ab
    among n_ab + n_ba under p = 1/2."""
    from scipy import stats

    a, b = np.asarray(a, bool), np.asarray(b, bool)
    n_ab, n_ba = int((a & ~b).sum()), int((~a & b).sum())
    p = 1.0 if n_ab + n_ba == 0 else float(stats.binomtest(n_ab, n_ab + n_ba, 0.5).pvalue)
    return dict(a_only=n_ab, b_only=n_ba, p=p)


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The inference rule of the pre-registered notebooks (docs/verdict.md): one paired test per claim, as its
# wording needs; Holm's step-down within the family a notebook pre-registered; statuses from Holm's adjusted p
# ═════════════════════════════════════════════════════════════════════════════════════════════════
MARGIN = 0.05  # equivalence margin ±, non-inferiority margin −, in the metric's units (reward: AUC, final reward)
ALPHA = 0.05  # family-wise error rate of each Holm family
TESTS = ("less", "greater", "noninferior", "equivalent")
CLAIM_STATUS = {"less": "reproduced", "greater": "reproduced", "equivalent": "equivalent within ±{margin:g}",
                "noninferior": "non-inferior at −{margin:g}"}


def paired_test(d, test: str, margin: float = MARGIN, opposite: bool = False) -> float:
    """p value of one paired t test over seeds (Student t, n − 1 degrees of freedom).

    d: (n,) per-seed differences a − b, in the metric's units. test: 'less' (H1: mean < 0), 'greater' (H1: mean > 0),
    'noninferior' (H1: mean > −margin), 'equivalent' (H1: |mean| < margin; TOST: the larger p of H0 mean ≤ −margin
    and H0 mean ≥ +margin, Schuirmann 1987). opposite=True gives the p of the test in the other direction, what
    "contradicted" needs: mean > 0, mean < 0, mean < −margin, or mean outside ±margin (its two one-sided p
    Bonferroni-combined, 2 · min, capped at 1). With zero spread the p is 0 or 1 by the side the mean lies on.
    Raises ScrlError for fewer than 2 seeds or an unknown test."""
    from scipy import stats

    d = np.asarray(d, dtype=float)
    if len(d) < 2:
        raise ScrlError(f"a paired test needs at least 2 seeds, got {len(d)}")
    if test not in TESTS:
        raise ScrlError(f"unknown test {test!r}; choose one of {TESTS}")
    se, df = d.std(ddof=1) / math.sqrt(len(d)), len(d) - 1

    def above(null):  # p of H0: mean <= null against H1: mean > null
        return float(d.mean() <= null) if se == 0 else float(stats.t.sf((d.mean() - null) / se, df))

    def below(null):  # p of H0: mean >= null against H1: mean < null
        return float(d.mean() >= null) if se == 0 else float(stats.t.cdf((d.mean() - null) / se, df))

    if opposite:
        return {"less": lambda: above(0.0), "greater": lambda: below(0.0), "noninferior": lambda: below(-margin),
                "equivalent": lambda: min(1.0, 2 * min(below(-margin), above(margin)))}[test]()
    return {"less": lambda: below(0.0), "greater": lambda: above(0.0), "noninferior": lambda: above(-margin),
            "equivalent": lambda: max(above(-margin), below(margin))}[test]()


def seeds_to_decide(sd: float, effect: float, level: float, power: float = 0.8,
                    equivalence_margin: float | None = None):
    """The paired seeds (or batches: any i.i.d. unit) a claim's t test at `level` needs for `power`, the one
    count every notebook and the verdict page use.

    sd: per-unit sd of the differences; effect: how far the true mean lies beyond the null's edge on the claim's
    side, same units (one-sided: the mean for 'greater', −mean for 'less', mean + margin for 'noninferior'; TOST:
    margin − |mean|, with `equivalence_margin` = the margin). Power at n units, F the t cdf with n − 1 df and
    c = t_{1−level, n−1}: one-sided F(effect √n / sd − c), which reaches `power` exactly when
    (t_{1−level} + t_{power}) sd / √n ≤ effect; TOST F(effect √n / sd − c) + F((2M − effect) √n / sd − c) − 1
    (both one-sided tests must pass: a lower bound, tight once the two sides' powers are near 1). Returns the
    smallest n ≥ 2 that reaches `power`; None when effect ≤ 0, sd = 0, or n would pass 100,000. At the observed
    mean the count is biased toward small n for an undecided row (its mean is as likely too large as too small):
    pass a pre-registered effect for a planning number (`test_differences`' seeds_at_stated_effect)."""
    from scipy import stats

    if effect <= 0 or sd == 0 or (equivalence_margin is not None and effect > equivalence_margin):
        return None
    far = None if equivalence_margin is None else 2 * equivalence_margin - effect

    def reaches(n):
        c, root = stats.t.ppf(1 - level, n - 1), math.sqrt(n) / sd
        pw = stats.t.cdf(effect * root - c, n - 1)
        if far is not None:
            pw += stats.t.cdf(far * root - c, n - 1) - 1
        return pw >= power

    # from just under the normal approximation, which the t count never undercuts by more than 2
    n = max(2, int((stats.norm.ppf(1 - level) + stats.norm.ppf(power)) ** 2 * (sd / effect) ** 2) - 2)
    while n <= 100_000:
        if reaches(n):
            return n
        n += 1
    return None


def effect_beyond_null(mean: float, test: str, margin: float = MARGIN) -> float:
    """How far `mean` lies beyond the null's edge on the claim's side, the metric's units: mean ('greater'), −mean
    ('less'), mean + margin ('noninferior'), margin − |mean| ('equivalent'); ≤ 0 when the estimate lies on the wrong
    side of the claim's threshold. The `effect` `seeds_to_decide` reads at the observed mean."""
    return {"less": -mean, "greater": mean, "noninferior": mean + margin, "equivalent": margin - abs(mean)}[test]


def wins(d, test: str, margin: float = MARGIN) -> int:
    """Seeds on the claim's side of a paired difference d (n,): d < 0 (less), d > 0 (greater, and a two-sided row's
    sign), d > −margin (noninferior), |d| < margin (equivalent). Raises ScrlError for an unknown test."""
    d = np.asarray(d, dtype=float)
    sides = {"less": d < 0, "greater": d > 0, "two-sided": d > 0, "noninferior": d > -margin,
             "equivalent": np.abs(d) < margin}
    if test not in sides:
        raise ScrlError(f"unknown test {test!r}; choose one of {sorted(sides)}")
    return int(sides[test].sum())


def test_family(values: dict, hypotheses: list, margin: float = MARGIN, alpha: float = ALPHA,
                stated_effect: float | None = None) -> list:
    """One pre-registered family of arm contrasts: `test_differences` over the per-seed differences a − b.

    values: {arm: (n,) per-seed values}, seeds in the same order for every arm. hypotheses: [(a, b, test)] on
    a − b, test one of `TESTS`. Returns `test_differences`' rows, named "a − b". Raises ScrlError as `paired_test`."""
    return test_differences([(f"{a} − {b}", np.asarray(values[a], float) - np.asarray(values[b], float), test)
                             for a, b, test in hypotheses], margin, alpha, stated_effect)


def test_differences(hypotheses: list, margin: float = MARGIN, alpha: float = ALPHA,
                     stated_effect: float | None = None) -> list:
    """One pre-registered family: the paired test of each hypothesis over seeds, then Holm's step-down.

    hypotheses: [(name, d, test)], d (n,) the per-seed differences the claim reads (an arm contrast, or a mean of
    several, as notebook 07's SC + IS − IS over lags and IS kinds), test one of `TESTS`. Returns one dict per
    hypothesis, in order: name, test, mean, ci95 (95% t half-width), sd, p (`paired_test`), p_opposite (the test in
    the other direction), wins (seeds in the claim's direction), n, p_holm and p_opposite_holm (`holm` over the
    family's p, and separately over its p_opposite), holm_level (a = α/(m − k) at Holm's step k), ci_holm
    (half-width of the (1 − 2a) t interval: a one-sided or TOST test at level a rejects exactly when its relevant end
    clears 0 or the margin), status, smallest_margin (the largest |end| of the Holm-level interval), and the
    seeds that would decide it at 80% power at holm_level (`seeds_to_decide`, TOST-aware for an equivalence row):
    seeds_at_stated_effect, if the true mean lay stated_effect beyond the null's edge (default: the margin; for an
    equivalence row, a true mean of margin − stated_effect from 0), the planning number, and seeds_to_decide, at the
    observed mean (optimistic for an undecided row). Statuses (docs/verdict.md, rule 5): the claim's
    (`CLAIM_STATUS`) where p_holm < α; "contradicted" where p_opposite_holm < α (the opposite tests have their own
    Holm correction, so each direction is controlled at α family-wise, and together they make a two-sided decision
    at 2α); else "not decided". Raises ScrlError as `paired_test`."""
    rows = []
    for name, d, test in hypotheses:
        d = np.asarray(d, float)
        mean, half = mean_ci95(d)
        rows.append(dict(name=name, test=test, mean=float(mean), ci95=float(half), sd=float(d.std(ddof=1)),
                         p=paired_test(d, test, margin), p_opposite=paired_test(d, test, margin, opposite=True),
                         wins=wins(d, test, margin), n=len(d)))
    return decide_family(rows, margin, alpha, stated_effect)


def describe_difference(d) -> dict:
    """A paired difference no claim reads (a descriptive row): d (n,) per seed, n ≥ 2. Returns mean, ci95 (the 95%
    t half-width with scipy's exact quantile, as the verdict page's forest rows always had it; `test_differences`'
    rows take `mean_ci95`'s 3-decimal t table up to 31 seeds, within 1e-4 of it), sd, p (the two-sided paired t
    test, Student t with n − 1 df; with zero spread 0 or 1 by whether the mean is 0), p_opposite None, wins (seeds
    with d > 0) and n. Raises ScrlError for fewer than 2 seeds."""
    from scipy import stats

    d = np.asarray(d, dtype=float)
    if len(d) < 2:
        raise ScrlError(f"a paired difference needs at least 2 seeds, got {len(d)}")
    n, mean, sd = len(d), float(d.mean()), float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    half = stats.t.ppf(0.975, n - 1) * se
    t = mean / se if se > 0 else (math.copysign(math.inf, mean) if mean != 0 else 0.0)
    return dict(mean=float(mean), ci95=float(half), sd=sd, p=min(1.0, 2 * float(stats.t.sf(abs(t), n - 1))),
                p_opposite=None, wins=wins(d, "two-sided"), n=n)


def decide_family(rows: list, margin: float = MARGIN, alpha: float = ALPHA, stated_effect: float | None = None) -> list:
    """Holm's step-down over one family's tested rows, and each row's status: `test_differences`' second half, for
    rows whose p comes from another test (notebook 10's gradient contrasts, a t test widened by its reference's term).

    rows: dicts with test (one of `TESTS`), mean, sd, n, p and p_opposite (the claim's test and its opposite), and
    optionally stated_effect: the row's own effect (one value or a list, a range), in place of the family's. Adds
    p_holm, p_opposite_holm, holm_level, ci_holm, status, smallest_margin, seeds_at_stated_effect (a list where the
    row's stated effect is one) and seeds_to_decide, as `test_differences` documents them; returns rows."""
    if not rows:
        return rows
    unknown = [r["test"] for r in rows if r["test"] not in CLAIM_STATUS]
    if unknown:
        raise ScrlError(f"decide_family decides claims with a test in {TESTS}; got {unknown}")
    ps = [r["p"] for r in rows]
    for i, (r, ph, po) in enumerate(zip(rows, holm(ps), holm([r["p_opposite"] for r in rows]))):
        h, level = _holm_step(ps, i, r["sd"], r["n"], alpha)
        lo, hi = r["mean"] - h, r["mean"] + h
        tost = margin if r["test"] == "equivalent" else None
        effect = r.get("stated_effect", margin if stated_effect is None else stated_effect)
        status = (CLAIM_STATUS[r["test"]].format(margin=margin) if ph < alpha else "contradicted" if po < alpha
                  else "not decided")
        r.update(p_holm=float(ph), p_opposite_holm=float(po), holm_level=float(level), ci_holm=h, status=status,
                 smallest_margin=float(max(abs(lo), abs(hi))),
                 seeds_at_stated_effect=[seeds_to_decide(r["sd"], float(e), level, equivalence_margin=tost) for e in effect]
                 if np.ndim(effect) else seeds_to_decide(r["sd"], effect, level, equivalence_margin=tost),
                 seeds_to_decide=seeds_to_decide(r["sd"], effect_beyond_null(r["mean"], r["test"], margin), level,
                                                 equivalence_margin=tost))
    return rows


test_family.__test__ = test_differences.__test__ = False  # library functions named test_*: pytest must not collect them


def heterogeneity(d, kinds: list) -> dict:
    """The heterogeneity test of pooled CPU models (docs/verdict.md, rule 3): the seeds of a pooled test ran on
    several CPU kinds (a seed is one unit, on one machine); are the per-seed differences d (n,) alike across kinds?
    kinds: (n,) the CPU kind of each seed's runs ("mixed"/"unknown" seeds, and kinds with fewer than 2 seeds, left
    out). Returns {"per_cpu": {kind: {seeds, mean, ci95}}, "het_p": Welch's two-sample t p for two kinds, one-way
    ANOVA's for more, None with fewer than two kinds}. The kinds split the seeds, so the test is unpaired. Raises
    ScrlError when kinds and d differ in length."""
    from scipy import stats

    d = np.asarray(d, float)
    if len(kinds) != len(d):
        raise ScrlError(f"heterogeneity needs one CPU kind per seed: {len(kinds)} kinds for {len(d)} seeds")
    parts = {}
    for k in dict.fromkeys(kinds):
        idx = [i for i, x in enumerate(kinds) if x == k]
        if k not in ("mixed", "unknown") and len(idx) >= 2:
            parts[k] = d[idx]
    per_cpu = {k: dict(seeds=len(v), mean=float(mean_ci95(v)[0]), ci95=float(mean_ci95(v)[1])) for k, v in parts.items()}
    het = (None if len(parts) < 2 else float(stats.ttest_ind(*parts.values(), equal_var=False).pvalue)
           if len(parts) == 2 else float(stats.f_oneway(*parts.values()).pvalue))
    return dict(per_cpu=per_cpu, het_p=het)


def pool_replicates(replicates) -> np.ndarray:
    """The seed units of a contrast whose whole design ran again on other CPU models (figures/replicates/<cpu>/,
    docs/verdict.md rule 3): each seed's paired difference, averaged over the replicates. replicates: (k, n)
    array-like, k ≥ 1 replicates × n seeds in the same seed order. Returns (n,). Raises ScrlError when the
    replicates do not hold the same number of seeds."""
    r = [np.asarray(x, dtype=float) for x in replicates]
    if not r or any(x.shape != r[0].shape or x.ndim != 1 for x in r):
        raise ScrlError(f"replicates must be k ≥ 1 equal-length seed vectors, got shapes {[x.shape for x in r]}")
    return np.mean(r, axis=0)


def replicate_heterogeneity(replicates) -> float | None:
    """Whether whole replicates of a design differ, paired by seed (every seed ran on every CPU model, unlike
    `heterogeneity`, where the kinds split the seeds): the two-sided p of the seed × replicate F test (replicate
    effect, seeds as blocks; for k = 2 the paired t test of the replicates' per-seed difference, F = t²). None for
    one replicate. replicates: (k, n), n ≥ 2. p < 0.05 flags "replicates differ"; it never changes a status.
    Raises ScrlError for a non-2-D input or fewer than 2 seeds."""
    from scipy import stats
    x = np.asarray(replicates, dtype=float)
    if x.ndim != 2:
        raise ScrlError(f"replicates must be a (k, n) array, got shape {x.shape}")
    k, n = x.shape
    if k < 2:
        return None
    if n < 2:
        raise ScrlError(f"a heterogeneity test needs at least 2 seeds, got {n}")
    grand = x.mean()
    resid = x - x.mean(axis=0, keepdims=True) - x.mean(axis=1, keepdims=True) + grand
    ss_rep, ss_err = n * float(((x.mean(axis=1) - grand) ** 2).sum()), float((resid ** 2).sum())
    if ss_err == 0:
        return 1.0 if ss_rep == 0 else 0.0
    return float(stats.f.sf((ss_rep / (k - 1)) / (ss_err / ((k - 1) * (n - 1))), k - 1, (k - 1) * (n - 1)))


def _holm_step(p: list, i: int, sd: float, n: int, alpha: float) -> tuple:
    """The Holm level of hypothesis i of a family whose one-sided (or TOST) p values are `p` (m,), and the half-width
    of its Holm-level interval: (t_{1−a, n−1} sd/√n, a = α/(m − k)), k the 0-based rank of p[i] (ties in the given
    order), the level at which Holm's step k tests it. The (1 − 2a) interval mean ± that half-width clears 0 (or the
    margin) on the claim's side exactly when that step rejects: `decide_family`'s holm_level and ci_holm."""
    from scipy import stats
    k = int(np.argsort(np.argsort(p, kind="stable"), kind="stable")[i])
    a = alpha / (len(p) - k)
    return float(stats.t.ppf(1 - a, n - 1) * sd / math.sqrt(n)), a


# One colour per arm in every figure of the notebooks and the deck (an estimator keeps its colour across
# notebooks): the no-mismatch reference black, plain red, the importance weights warm, score centering blue,
# its combinations blue-green, the group baseline pink.
ARM_COLORS = {"bf16": "black", "on-policy": "black", "plain": "tab:red", "is": "tab:brown", "tis": "tab:orange",
              "mis": "tab:purple", "sc": "tab:blue", "sc_tis": "tab:cyan", "sc_mis": "tab:green",
              "baseline": "tab:pink", "sc_baseline": "teal"}


def band_plot(ax, x, Y, label: str = None, color=None, lw: float = 1.5, nonnegative: bool = False, **kw):
    """Mean over seeds with its 95% t band: Y (n_seeds, len(x)). For a quantity that cannot be
    negative (a KL, a length) the band is clipped at 0, and the label says so."""
    m, h = mean_ci95(np.asarray(Y, dtype=float))
    lo = np.maximum(m - h, 0.0) if nonnegative else m - h
    ax.plot(x, m, color=color, label=label, lw=lw, **kw)
    ax.fill_between(x, lo, m + h, color=color, alpha=0.12)
    return m, h


def forest_plot(ax, rows: list, xlabel: str, margin: float = MARGIN, alpha: float = ALPHA) -> None:
    """A family's claim rows (`test_family`) as a forest: mean, 95% interval (thick), Holm-level interval (thin),
    the ±margin band in grey; blue where Holm decides the claim, red where the row is contradicted."""
    ax.axvspan(-margin, margin, color="0.85", zorder=0)
    ax.axvline(0, color="0.3", lw=0.8)
    for j, r in enumerate(rows):
        colour = "tab:blue" if r["p_holm"] < alpha else "tab:red" if r["status"] == "contradicted" else "k"
        ax.errorbar(r["mean"], j, xerr=r["ci_holm"], fmt="none", color=colour, lw=1, capsize=3)
        ax.errorbar(r["mean"], j, xerr=r["ci95"], fmt="o", color=colour, lw=2.5, ms=4)
    ax.set_yticks(range(len(rows)), [f"{r['name']} ({r['test']})\nHolm p {p_text(r['p_holm'])}" for r in rows],
                  fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)


def per_seed_plot(ax, values: dict, collapsed_runs: dict, ylabel: str) -> None:
    """Every run's value per arm (dots; a ring marks a collapsed run) with the arm's mean ± 95% t interval.
    values, collapsed_runs: {arm: (n_seeds,)} in the same seed order."""
    n = len(next(iter(values.values())))
    jitter = np.linspace(-0.2, 0.2, n)
    for i, arm in enumerate(values):
        v, c = np.asarray(values[arm], float), np.asarray(collapsed_runs[arm], bool)
        ax.scatter(i + jitter[~c], v[~c], s=12, color=ARM_COLORS.get(arm), alpha=0.7)
        ax.scatter(i + jitter[c], v[c], s=30, facecolors="none", edgecolors=ARM_COLORS.get(arm), lw=1.1)
        m, h = mean_ci95(v)
        ax.errorbar(i + 0.32, m, yerr=h, fmt="s", color="k", ms=4, capsize=3)
    ax.set_xticks(range(len(values)), list(values), fontsize=8)
    ax.set_ylabel(ylabel)


def check_layout(fig) -> None:
    """A figure fit for a slide: no legend covers a bar of its own axes, no title, suptitle, legend or
    table overlaps another, and none runs past the figure's edge (where `savefig` would cut it). Draws
    the figure (pixel boxes need a renderer); call it just before `savefig`. Raises ValueError naming
    the element (the two overlapping ones) and their axes titles."""
    from matplotlib.patches import Rectangle

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [("suptitle", fig._suptitle)] if fig._suptitle is not None and fig._suptitle.get_text() else []
    for ax in fig.axes:
        name = ax.get_title() or "an untitled axes"
        boxes += [(f"title of {name!r}", ax.title)] if ax.get_title() else []
        boxes += [(f"legend of {name!r}", ax.get_legend())] if ax.get_legend() is not None else []
        boxes += [(f"table in {name!r}", t) for t in ax.tables]
        legend = ax.get_legend()
        if legend is None:
            continue
        box = legend.get_window_extent(renderer)
        for bar in ax.patches:
            if isinstance(bar, Rectangle) and np.isfinite(bar.get_height()) and bar.get_height() != 0 \
                    and bar.get_visible() and bar.get_window_extent(renderer).overlaps(box):
                raise ValueError(f"the legend of {name!r} covers a bar (x = {bar.get_x():g}, height "
                                 f"{bar.get_height():.3g}): give the axes headroom or move the legend")
    extents = [(label, artist.get_window_extent(renderer)) for label, artist in boxes]
    edge = fig.bbox
    for label, box in extents:
        if box.x0 < edge.x0 - 1 or box.x1 > edge.x1 + 1 or box.y0 < edge.y0 - 1 or box.y1 > edge.y1 + 1:
            raise ValueError(f"the {label} runs past the figure's edge ({box.x0:.0f}-{box.x1:.0f} px wide, "
                             f"{box.y0:.0f}-{box.y1:.0f} px high, in a {edge.width:.0f} × {edge.height:.0f} px "
                             f"figure): break it into lines or shorten it")
    for i, (a, box_a) in enumerate(extents):
        for b, box_b in extents[i + 1:]:
            if box_a.overlaps(box_b):
                raise ValueError(f"the {a} overlaps the {b}")
