"""The inference rule (`scrl_min.stats`: paired_test, test_family, decide_family, describe_difference,
heterogeneity) against scipy's own tests and Holm by hand, and
against every committed pre-registered family that stores its per-seed values: recomputed from those values
alone (no rerun), each p, Holm p, Holm-level interval and status must equal the committed one to 1e-9."""
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import scrl_min
from scrl_min import paired_test, test_family  # test_family.__test__ is False: pytest does not collect it

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("seed", range(5))
def test_paired_test_equals_scipys_one_sample_t_tests(seed):
    d = np.random.default_rng(seed).normal(0.02 * seed - 0.03, 0.08, size=12 + seed)
    assert paired_test(d, "less") == pytest.approx(stats.ttest_1samp(d, 0.0, alternative="less").pvalue, rel=1e-12)
    assert paired_test(d, "greater") == pytest.approx(stats.ttest_1samp(d, 0.0, alternative="greater").pvalue,
                                                      rel=1e-12)
    assert paired_test(d, "noninferior", 0.05) == pytest.approx(
        stats.ttest_1samp(d, -0.05, alternative="greater").pvalue, rel=1e-12)
    tost = max(stats.ttest_1samp(d, -0.05, alternative="greater").pvalue,
               stats.ttest_1samp(d, 0.05, alternative="less").pvalue)
    assert paired_test(d, "equivalent", 0.05) == pytest.approx(tost, rel=1e-12)


def test_paired_test_refuses_bad_input():
    with pytest.raises(scrl_min.ScrlError, match="at least 2 seeds"):
        paired_test([0.1], "less")
    with pytest.raises(scrl_min.ScrlError, match="unknown test 'two-sided'"):
        paired_test([0.1, 0.2], "two-sided")


def test_a_descriptive_row_is_scipys_two_sided_test_with_the_exact_t_interval():
    """describe_difference (the verdict's rows no claim reads): scipy's two-sided p and the 95% t interval with the
    exact quantile; zero spread gives p 0 or 1 by whether the mean is 0."""
    from scrl_min.stats import describe_difference

    for d in (np.array([0.3, -0.1, 0.2]), np.random.default_rng(2).normal(0.05, 0.1, 12)):
        r = describe_difference(d)
        assert r["p"] == pytest.approx(stats.ttest_1samp(d, 0.0).pvalue, rel=1e-10)
        lo, hi = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
        assert r["ci95"] == pytest.approx((hi - lo) / 2, rel=1e-12) and r["wins"] == int((d > 0).sum())
    assert describe_difference([0.1, 0.1])["p"] == 0.0 and describe_difference([0.0, 0.0])["p"] == 1.0
    with pytest.raises(scrl_min.ScrlError, match="at least 2 seeds"):
        describe_difference([0.1])


def test_decide_family_decides_rows_tested_elsewhere_and_counts_a_stated_range():
    """Rows whose p come from another test (notebook 10's, widened by its reference's term): Holm by hand over the
    given p, the status from the definition, and a row's own stated effect range counted at its Holm level against
    the exact noncentral t (80% reached near n, not at n − 2); a test outside the claims' is refused."""
    from scrl_min.stats import decide_family

    p = [0.004, 0.03, 0.2]
    rows = decide_family([dict(name=n, test="less", mean=-m, sd=1.3, n=100, p=q, p_opposite=1 - q,
                               stated_effect=[0.3, 0.45]) for n, m, q in zip("abc", (0.4, 0.25, 0.1), p)])
    assert [r["p_holm"] for r in rows] == pytest.approx([0.012, 0.06, 0.2], rel=1e-12)  # 3p, max(2p, 0.012), p
    assert [r["status"] for r in rows] == ["reproduced", "not decided", "not decided"]
    assert [r["holm_level"] for r in rows] == pytest.approx([0.05 / 3, 0.05 / 2, 0.05])
    for r in rows:
        assert len(r["seeds_at_stated_effect"]) == 2
        for e, n in zip((0.3, 0.45), r["seeds_at_stated_effect"]):
            power = [stats.nct.sf(stats.t.ppf(1 - r["holm_level"], k - 1), k - 1, e * np.sqrt(k) / 1.3) for k in (n - 2, n)]
            assert power[0] < 0.8 and power[1] >= 0.78, (r["name"], e, n, power)  # the count's shifted-t power
    with pytest.raises(scrl_min.ScrlError, match="decide_family decides claims"):
        decide_family([dict(name="x", test="two-sided", mean=0.1, sd=1.0, n=10, p=0.1, p_opposite=0.9)])


def test_family_statuses_by_brute_force_holm():
    """Holm by enumeration of its steps (not `holm`), and each status from the definition in the docstring."""
    rng = np.random.default_rng(7)
    values = {"bf16": rng.normal(0.40, 0.05, 30)}
    values["plain"] = values["bf16"] - 0.15 + rng.normal(0, 0.05, 30)   # a clear cost
    values["sc"] = values["bf16"] + rng.normal(0, 0.02, 30)             # equivalent to bf16
    values["mis"] = values["sc"] - 0.2 + rng.normal(0, 0.03, 30)        # far below sc
    hyps = [("plain", "bf16", "less"), ("sc", "bf16", "equivalent"), ("mis", "sc", "greater"),
            ("mis", "sc", "noninferior")]
    rows = test_family(values, hyps)
    p = np.array([r["p"] for r in rows])
    order = np.argsort(p)
    adjusted, running = np.empty(4), 0.0
    for step, i in enumerate(order):
        running = max(running, min(1.0, (4 - step) * p[i]))
        adjusted[i] = running
    assert np.allclose([r["p_holm"] for r in rows], adjusted, rtol=1e-12, atol=0)
    assert [r["status"] for r in rows][:2] == ["reproduced", "equivalent within ±0.05"]
    assert rows[2]["status"] == "contradicted" and rows[3]["status"] == "contradicted"
    for r in rows:  # the Holm-level interval is the (1 − 2a) t interval
        d = np.asarray(values[r["name"].split(" − ")[0]]) - np.asarray(values[r["name"].split(" − ")[1]])
        want = stats.t.ppf(1 - r["holm_level"], len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
        assert r["ci_holm"] == pytest.approx(want, rel=1e-12)


COMMITTED = [  # (figure JSON, its families: name → (per-seed key in per_arm, the hypotheses' key in the JSON))
    ("13_confirmatory.json", {"primary (AUC)": ("auc_per_seed", "hypotheses"),
                              "secondary (final clean reward)": ("final_per_seed", "hypotheses"),
                              "exploratory (AUC)": ("auc_per_seed", "exploratory")}),
    ("13_gentle_optimizer.json", {"primary (AUC)": ("auc_per_seed", "hypotheses"),
                                  "secondary (final clean reward)": ("final_per_seed", "hypotheses")}),
    ("16_grpo_regime.json", {"primary (AUC)": ("auc_per_seed", "hypotheses"),
                             "secondary (final clean reward)": ("final_per_seed", "hypotheses")}),
]


@pytest.mark.parametrize("name,families", COMMITTED, ids=[c[0] for c in COMMITTED])
def test_committed_families_recompute_from_their_per_seed_values(name, families):
    data = json.loads((REPO / "figures" / name).read_text())
    margin, alpha = data["parameters"]["margin"], data["parameters"]["alpha"]
    for family, (key, hyp_key) in families.items():
        values = {arm: v[key] for arm, v in data["per_arm"].items()}
        hyps = [tuple(h) for h in data[hyp_key] if h[0] in values and h[1] in values]
        committed = data["families"][family]
        rows = test_family(values, hyps, margin=margin, alpha=alpha)
        assert [r["name"] for r in rows] == [r["name"] for r in committed], family
        for mine, theirs in zip(rows, committed):
            for k in ("mean", "ci95", "p", "p_holm", "p_opposite_holm", "holm_level", "ci_holm", "smallest_margin"):
                assert mine[k] == pytest.approx(theirs[k], rel=1e-9, abs=1e-12), (family, mine["name"], k)
            for k in ("status", "wins", "seeds_to_decide", "seeds_at_stated_effect"):
                assert mine[k] == theirs[k], (family, mine["name"], k)
        for c in data.get("claims", []):  # the claim rows the verdict collects carry their family's statuses
            if c.get("family") == family:
                row = next(r for r in rows if r["name"] == c["name"] and r["test"] == c["test"])
                assert (c["status"], c["p_holm"]) == (row["status"], pytest.approx(row["p_holm"], rel=1e-9)), c["name"]


def test_heterogeneity_equals_welch_and_anova():
    rng = np.random.default_rng(3)
    d = rng.normal(0, 1, 12)
    two = ["avx512"] * 6 + ["avx2"] * 6
    h = scrl_min.heterogeneity(d, two)
    assert h["het_p"] == pytest.approx(stats.ttest_ind(d[:6], d[6:], equal_var=False).pvalue, rel=1e-12)
    three = ["amx"] * 4 + ["avx512"] * 4 + ["avx2"] * 3 + ["mixed"]
    h = scrl_min.heterogeneity(d, three)
    assert h["het_p"] == pytest.approx(stats.f_oneway(d[:4], d[4:8], d[8:11]).pvalue, rel=1e-12)
    assert set(h["per_cpu"]) == {"amx", "avx512", "avx2"}
    assert scrl_min.heterogeneity(d, ["avx512"] * 12)["het_p"] is None


def test_contradicted_is_holm_controlled_over_the_opposite_tests():
    """A row on the wrong side at one-sided p ≈ 0.02 is contradicted alone (a family of one) but not among six:
    the opposite tests have their own Holm correction (before, a Holm-level interval at the claim's last step
    called it contradicted at level α, whatever the family's size)."""
    z = np.random.default_rng(11).normal(size=30)
    z = (z - z.mean()) / z.std(ddof=1)  # mean 0, sd 1 exactly

    def seeds(mean, sd=0.1):
        return mean + sd * z

    p_opp = stats.t.sf(0.04 / (0.1 / np.sqrt(30)), 29)  # the wrong-side row's own opposite p
    assert 0.01 < p_opp < 0.05
    values = {"zero": np.zeros(30), "bad": seeds(-0.04)}
    values.update({f"x{i}": seeds(0.0) for i in range(5)})
    alone = test_family(values, [("bad", "zero", "greater")])
    assert alone[0]["status"] == "contradicted" and alone[0]["p_opposite"] == pytest.approx(p_opp, rel=1e-9)
    six = test_family(values, [("bad", "zero", "greater")] + [(f"x{i}", "zero", "greater") for i in range(5)])
    assert six[0]["p_opposite_holm"] == pytest.approx(min(1, 6 * p_opp), rel=1e-9)
    assert six[0]["status"].startswith("not decided")


def test_notebook_07s_families_recompute_from_its_run_records():
    """Notebook 07's pre-registered families (SC + IS − IS per seed, the mean over its lags and IS kinds; one-sided
    and non-inferiority per schedule) from the per-run values in its JSON alone: p, Holm p, Holm level and interval
    to 1e-9; status, wins and the seed counts the verdict prints exactly."""
    data = json.loads((REPO / "figures" / "07_staleness.json").read_text())
    par, runs = data["parameters"], data["runs"]
    pairs = [("sc_tis", "tis"), ("sc_mis", "mis")]
    for metric, family in (("auc", "primary (auc)"), ("final", "secondary: final reward")):
        hyps = []
        for sched in par["schedules"]:
            d = np.mean([np.subtract(runs[f"{sched} / s={s} / {a}"][metric], runs[f"{sched} / s={s} / {b}"][metric])
                         for s in par["staleness"] for a, b in pairs], axis=0)
            hyps += [(f"{sched}: SC + IS − IS", d, test) for test in ("greater", "noninferior")]
        rows = scrl_min.test_differences(hyps, margin=par["margin"], alpha=par["alpha"])
        for mine, theirs in zip(rows, data["families"][family], strict=True):
            for k in ("mean", "p", "p_holm", "p_opposite_holm", "holm_level", "ci_holm"):
                assert mine[k] == pytest.approx(theirs[k], rel=1e-9, abs=1e-12), (family, mine["name"], k)
            for k in ("name", "status", "wins", "seeds_to_decide", "seeds_at_stated_effect"):
                assert mine[k] == theirs[k], (family, mine["name"], k)


def test_notebook_13s_recovery_recomputes_from_its_per_seed_values():
    """Notebook 13's recovery table (exploratory, saved as "recovery"), from family A's per-seed values alone: each
    correction's x − bf16 mean, its TOST p (scipy's two one-sided t tests) and Holm over the three; SC's share of
    the cost and its delta-method interval with numpy; the baseline's AUC against bf16."""
    data = json.loads((REPO / "figures" / "13_confirmatory.json").read_text())
    margin = data["parameters"]["margin"]
    for label, key in (("AUC (primary)", "auc_per_seed"), ("final clean reward (secondary)", "final_per_seed")):
        v = {a: np.asarray(x[key], float) for a, x in data["per_arm"].items()}
        saved = data["recovery"][label]
        ps = []
        for r, x in zip(saved["to_reference"], ("sc", "tis", "mis"), strict=True):
            d = v[x] - v["bf16"]
            ps.append(max(stats.ttest_1samp(d, -margin, alternative="greater").pvalue,
                          stats.ttest_1samp(d, margin, alternative="less").pvalue))
            assert (r["name"], r["mean"]) == (f"{x} − bf16", pytest.approx(d.mean(), rel=1e-12))
        order = np.argsort(ps)
        holm = np.maximum.accumulate([min(1.0, (len(ps) - k) * ps[i]) for k, i in enumerate(order)])
        for k, i in enumerate(order):
            assert saved["to_reference"][i]["p_holm"] == pytest.approx(holm[k], rel=1e-9)
            assert saved["to_reference"][i]["status"].startswith("equivalent") == (holm[k] < 0.05)
            n = len(d)
            assert r["ci95"] == pytest.approx(stats.t.ppf(0.975, n - 1) * d.std(ddof=1) / np.sqrt(n), rel=5e-4)
        rec, cost = v["sc"] - v["plain"], v["bf16"] - v["plain"]
        share = rec.sum() / cost.sum()
        (s_rr, s_rc), (_, s_cc) = np.cov(rec, cost)  # delta method for a ratio of means: var ≈ (s_rr − 2R s_rc + R² s_cc) / n c̄²
        half = stats.t.ppf(0.975, n - 1) * np.sqrt((s_rr - 2 * share * s_rc + share ** 2 * s_cc) / n) / cost.mean()
        assert saved["sc_share"]["value"] == pytest.approx(share, rel=1e-12)
        assert saved["sc_share"]["ci95"] == pytest.approx(half, rel=1e-9)
    d = np.asarray(data["per_arm"]["baseline"]["auc_per_seed"]) - np.asarray(data["per_arm"]["bf16"]["auc_per_seed"])
    base = data["recovery"]["baseline − bf16 (AUC)"]
    assert (base["mean"], base["n"]) == (pytest.approx(d.mean(), rel=1e-12), len(d))
    assert base["ci95"] == pytest.approx(stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d)), rel=5e-4)


def test_notebook_14s_claim_row_recomputes_from_its_per_seed_values():
    """Notebook 14's C7 row (the drift iterated, plain − SC > 0 in Δ log p(EOS)), from its per-arm changes alone:
    scipy's one-sided t test and its opposite, a family of one; its reading (whether plain's push took both signs,
    SC's share of plain's |Δ|, the seeds where SC's is smaller) with numpy."""
    data = json.loads((REPO / "figures" / "14_length_drift_iterated.json").read_text())
    plain, sc = (np.asarray(data["per_arm"][a]["d_logp_eos_per_seed"]) for a in ("plain", "sc"))
    (r,) = data["claims"]
    d = plain - sc
    assert (r["id"], r["test"], r["n"]) == ("C7", "greater", len(d))
    assert r["mean"] == pytest.approx(d.mean(), rel=1e-12)
    assert r["p_holm"] == r["p"] == pytest.approx(stats.ttest_1samp(d, 0, alternative="greater").pvalue, rel=1e-9)
    assert r["p_opposite_holm"] == pytest.approx(stats.ttest_1samp(d, 0, alternative="less").pvalue, rel=1e-9)
    assert r["status"] == ("reproduced" if r["p"] < 0.05 else "contradicted" if r["p_opposite"] < 0.05 else "not decided")
    delta = data["prediction"]["delta"]  # the claim's direction is the prediction's, and its count is at that effect
    assert delta > 0 and r["seeds_at_stated_effect"] == scrl_min.seeds_to_decide(d.std(ddof=1), delta, 0.05)
    rd = r["reading"]
    assert rd["plain_takes_both_signs"] == bool(plain.min() < 0 < plain.max())
    assert rd["sc_share"] == pytest.approx(np.abs(sc).sum() / np.abs(plain).sum(), rel=1e-12)
    assert rd["sc_smaller"] == int(np.sum(np.abs(sc) < np.abs(plain)))


def test_holm_interval_is_the_step_level_t_interval():
    """decide_family's Holm level and interval: hypothesis i, ranked k-th by p (ties in the given order), is tested
    at a = α/(m − k); its interval is mean ± t_{1−a, n−1} sd/√n, so its upper end is below 0 exactly when scipy's
    one-sided test of mean < 0 has p < a."""
    from scrl_min.stats import decide_family

    def rows(p, xs):
        return decide_family([dict(name=str(i), test="less", mean=float(np.mean(x)), sd=float(np.std(x, ddof=1)),
                                   n=len(x), p=q, p_opposite=1 - q) for i, (q, x) in enumerate(zip(p, xs))])

    rng = np.random.default_rng(7)
    d = [rng.normal(mu, 0.2, 12) for mu in (-0.15, -0.02, -0.3, 0.05)]
    p = [stats.ttest_1samp(x, 0.0, alternative="less").pvalue for x in d]
    ranks = [sorted(range(4), key=lambda j: (p[j], j)).index(i) for i in range(4)]
    for i, (x, r) in enumerate(zip(d, rows(p, d))):
        a, hi = r["holm_level"], r["mean"] + r["ci_holm"]
        assert a == pytest.approx(0.05 / (4 - ranks[i]))
        assert hi - x.mean() == pytest.approx(stats.t.ppf(1 - a, 11) * x.std(ddof=1) / np.sqrt(12), rel=1e-12)
        assert (hi < 0) == (p[i] < a)
    tie = rows([0.01, 0.01], [rng.normal(0, 1, 5)] * 2)
    assert tie[1]["holm_level"] == pytest.approx(0.05)  # a tie: the later one steps second


def test_replicates_pool_by_seed_and_their_heterogeneity_is_the_paired_test():
    """pool_replicates averages each seed over replicates; replicate_heterogeneity for two replicates is scipy's
    paired t test of their per-seed difference, None for one, and refuses ragged input."""
    from scrl_min.stats import pool_replicates, replicate_heterogeneity

    rng = np.random.default_rng(3)
    a, b = rng.normal(0, 1, 9), rng.normal(0.3, 1, 9)
    assert pool_replicates([a, b]) == pytest.approx((a + b) / 2)
    assert replicate_heterogeneity([a, b]) == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-10)
    assert replicate_heterogeneity([a]) is None
    with pytest.raises(scrl_min.ScrlError, match="equal-length"):
        pool_replicates([a, b[:4]])


def _tost_power_mc(n, sd, mean, level, margin, reps=40_000, seed=0):
    """TOST's power by simulation: the share of draws of n normal differences where both one-sided t tests reject."""
    d = np.random.default_rng(seed).normal(mean, sd, size=(reps, n))
    se = d.std(axis=1, ddof=1) / np.sqrt(n)
    c = stats.t.ppf(1 - level, n - 1)
    return float((((d.mean(axis=1) + margin) / se > c) & ((margin - d.mean(axis=1)) / se > c)).mean())


@pytest.mark.parametrize("sd,effect,level", [(0.2, 0.1, 0.01), (0.1, 0.05, 0.025), (0.14, 0.05, 0.05 / 6),
                                             (5.8, 0.43, 0.025)])
def test_seeds_to_decide_one_sided_against_the_noncentral_t(sd, effect, level):
    """One-sided: at the returned n the exact power (noncentral t) is near 80%, and n − 1 falls short of the count's
    own criterion (t_{1−level} + t_{0.8}) sd / √n ≤ effect, which the exact power tracks within a few points."""
    n = scrl_min.seeds_to_decide(sd, effect, level)
    exact = [stats.nct.sf(stats.t.ppf(1 - level, k - 1), k - 1, effect * np.sqrt(k) / sd) for k in (n - 1, n)]
    assert exact[1] >= 0.78 and exact[0] < 0.82, (n, exact)
    crit = lambda k: (stats.t.ppf(1 - level, k - 1) + stats.t.ppf(0.8, k - 1)) * sd / np.sqrt(k)  # noqa: E731
    assert crit(n) <= effect < crit(n - 1)


@pytest.mark.parametrize("sd,mean,level", [(0.1, 0.0, 0.05), (0.14, 0.0, 0.05 / 6), (0.1, 0.02, 0.025)])
def test_seeds_to_decide_tost_against_simulation(sd, mean, level):
    """TOST (both one-sided tests must pass): at the returned n the simulated power reaches about 80%, at n − 1 it
    does not exceed it by much (the count's power is a lower bound)."""
    n = scrl_min.seeds_to_decide(sd, 0.05 - abs(mean), level, equivalence_margin=0.05)
    at_n, below = _tost_power_mc(n, sd, mean, level, 0.05), _tost_power_mc(n - 1, sd, mean, level, 0.05, seed=1)
    assert at_n >= 0.79 and below < 0.83, (n, at_n, below)
    one_sided = scrl_min.seeds_to_decide(sd, 0.05 - abs(mean), level)
    assert n >= one_sided  # both sides cost more than the nearer side alone (what the count gave before)


def test_seeds_to_decide_refuses_what_no_n_decides():
    assert scrl_min.seeds_to_decide(0.1, 0.0, 0.05) is None  # no effect beyond the null
    assert scrl_min.seeds_to_decide(0.1, -0.01, 0.05) is None  # the wrong side
    assert scrl_min.seeds_to_decide(0.0, 0.05, 0.05) is None  # no spread
    assert scrl_min.seeds_to_decide(0.1, 0.06, 0.05, equivalence_margin=0.05) is None  # a true mean beyond −M


def test_family_counts_seeds_at_the_stated_effect_and_the_observed_mean():
    """Undecided rows carry both counts at their Holm level: at the stated effect (the margin by default) and at
    the observed mean; the status says only 'not decided'."""
    rng = np.random.default_rng(3)
    values = {"a": rng.normal(0.3, 0.1, 10), "b": rng.normal(0.3, 0.1, 10)}
    values["b"] = values["a"] - rng.normal(0.01, 0.1, 10)
    rows = test_family(values, [("a", "b", "greater"), ("a", "b", "equivalent")])
    for r in rows:
        assert r["status"] == "not decided"
        tost = 0.05 if r["test"] == "equivalent" else None
        assert r["seeds_at_stated_effect"] == scrl_min.seeds_to_decide(r["sd"], 0.05, r["holm_level"],
                                                                        equivalence_margin=tost)
    assert rows[0]["seeds_to_decide"] == scrl_min.seeds_to_decide(rows[0]["sd"], rows[0]["mean"], rows[0]["holm_level"])
