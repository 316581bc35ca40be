"""Notebook 10's per-batch values: figures/10_gradient_test.json keeps, for the primary contrast and the three
secondaries, each batch's D_b and M_b (‖g*‖² units), and every summary the notebook reports from them follows from
them by an independent computation (numpy, scipy.stats.t): the mean and sd of D_b, the relative gap, the two-sided p
with the reference's term, and the post hoc robust check (median, 20% trimmed mean with Yuen's interval, batches far
from the median). The same checks run on the CI-sized run's JSON (tests/test_notebooks.py, `_check_10`).

The committed JSON has them since notebook 10's full-size rerun of 2026-12-07; a JSON that predates them fails these
tests, saying which rerun it needs (no skip)."""
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

REPO = Path(__file__).resolve().parent.parent
JSON = REPO / "figures" / "10_gradient_test.json"
ROBUST_KEYS = {"median", "median_rel", "trimmed_mean", "trimmed_ci95", "trimmed_rel", "trimmed_rel_ci95", "trim",
               "trimmed_per_end", "df", "outliers"}


def per_batch_contrasts(g) -> list:
    """[(short name, contrast dict)] of the primary and S1-S3, each holding its per-batch values; fails, naming the
    rerun it needs, when the JSON predates them."""
    named = [("primary", g["primary"])] + [(name.split(" · ")[0], c) for name, c in g["secondary"].items()]
    missing = [name for name, c in named if not {"D_b", "M_b", "robust"} <= set(c)]
    assert not missing, (f"10_gradient_test.json has no per-batch D_b / M_b / robust check for {missing}: it predates "
                         f"them. Rerun notebook 10 at full size (make reproduce-full) to write them")
    return named


def yuen(x):
    """By hand (sorting and clipping, not scipy's trim_mean or winsorize): (20% trimmed mean, 95% half-width, df) of
    Yuen's one-sample interval. g = ⌊0.2 n⌋ cut from each end; se = s_w / ((1 − 0.4) √n), s_w the sd of the sample
    with its g smallest and g largest values set to the nearest kept one; t with n − 2g − 1 df."""
    x = np.sort(np.asarray(x, float))
    n = len(x)
    g = n // 5  # ⌊0.2 n⌋, in integers
    kept = x[g:n - g]
    w = np.clip(x, kept[0], kept[-1])
    se = w.std(ddof=1) / ((1 - 0.4) * math.sqrt(n))
    df = n - 2 * g - 1
    return kept.mean(), stats.t.ppf(0.975, df) * se, df


def outliers(x):
    # batches beyond 3 sd and beyond 3 × 1.4826 MAD of the median
    dev = np.abs(x - np.median(x))
    mad = 1.4826 * np.median(dev)
    return dict(beyond_3sd=int((dev > 3 * x.std(ddof=1)).sum()), beyond_3mad=int((dev > 3 * mad).sum()))


def check_summaries(g) -> None:
    """Mean and sd of D_b, mean of M_b, the relative gap, the t interval and the two-sided p (se = √(sd_D²/n +
    ref_term_sd²), t with n − 1 df), recomputed from D_b, M_b and the stored ref_term_sd."""
    for name, c in per_batch_contrasts(g):
        D, M, n = np.array(c["D_b"]), np.array(c["M_b"]), c["n"]
        assert len(D) == len(M) == n, name
        # relative 1e-9; the absolute term only matters for a mean near 0 (rounding of the sum, CI's 2 batches)
        tiny = 1e-12 * np.abs(D).max()
        assert D.mean() == pytest.approx(c["D"], rel=1e-9, abs=tiny), name
        # the notebook divides sd and half-width by the estimate of ‖g*‖², which can come out negative on a tiny
        # reference (CI's two batches): their sign is its sign
        sign = math.copysign(1, c["norm2_ref"])
        assert sign * D.std(ddof=1) == pytest.approx(c["sd_D"], rel=1e-9), name
        assert M.mean() == pytest.approx(c["mse_b"], rel=1e-9), name
        assert D.mean() / M.mean() == pytest.approx(c["rel_gap"], rel=1e-9, abs=tiny / abs(M.mean())), name
        se = math.sqrt(D.std(ddof=1) ** 2 / n + c["ref_term_sd"] ** 2)
        assert sign * stats.t.ppf(0.975, n - 1) * se == pytest.approx(c["D_ci95"], rel=1e-9), name
        assert 2 * stats.t.sf(abs(D.mean()) / se, n - 1) == pytest.approx(c["p"], rel=1e-6, abs=1e-300), name


def check_robust(g) -> None:
    """The robust check (descriptive, post hoc), recomputed by hand from D_b and M_b."""
    for name, c in per_batch_contrasts(g):
        D, M, r = np.array(c["D_b"]), np.array(c["M_b"]), c["robust"]
        tiny = 1e-12 * np.abs(D).max()
        assert set(r) == ROBUST_KEYS and r["trim"] == 0.2, name
        tm, hw, df = yuen(D)
        assert r["trimmed_per_end"] == len(D) // 5 and r["df"] == df, name
        assert r["median"] == pytest.approx(np.median(D), rel=1e-12), name
        assert r["trimmed_mean"] == pytest.approx(tm, rel=1e-9, abs=tiny), name
        assert r["trimmed_ci95"] == pytest.approx(hw, rel=1e-9), name
        assert r["median_rel"] == pytest.approx(np.median(D) / M.mean(), rel=1e-9), name
        assert r["trimmed_rel"] == pytest.approx(tm / M.mean(), rel=1e-9, abs=tiny / abs(M.mean())), name
        assert r["trimmed_rel_ci95"] == pytest.approx(hw / M.mean(), rel=1e-9), name
        assert r["outliers"] == outliers(D), name


@pytest.fixture(scope="module")
def g10():
    return json.loads(JSON.read_text())


def test_the_json_keeps_each_contrasts_per_batch_values(g10):
    """The primary and S1-S3 each carry n values of D_b and of M_b, finite, with M_b (each batch's squared error of
    MIS or IS against the reference, plus ‖g*‖²) positive on average."""
    for name, c in per_batch_contrasts(g10):
        D, M = np.array(c["D_b"]), np.array(c["M_b"])
        assert D.shape == M.shape == (c["n"],) and np.isfinite(D).all() and np.isfinite(M).all(), name
        assert M.mean() > 0, name


def test_the_mean_sd_gap_and_p_follow_from_the_per_batch_values(g10):
    check_summaries(g10)


def test_the_robust_check_follows_from_the_per_batch_values(g10):
    check_robust(g10)


def test_yuen_and_outliers_by_hand_on_a_worked_example():
    """1, ..., 10: g = 2, trimmed mean of 3..8 = 5.5; winsorized 3,3,3,4,5,6,7,8,8,8 has squared deviations summing to
    42.5, so s_w² = 42.5 / 9, se = s_w / (0.6 √10), df = 5. With 100 in place of 10: one batch beyond 3 sd (30.2)
    and beyond 3 × 1.4826 × 2.5 of the median 5.5; none in 1, ..., 10."""
    tm, hw, df = yuen(np.arange(1.0, 11.0))
    assert tm == 5.5 and df == 5
    assert hw == pytest.approx(stats.t.ppf(0.975, 5) * math.sqrt(42.5 / 9) / (0.6 * math.sqrt(10)), rel=1e-12)
    assert outliers(np.arange(1.0, 11.0)) == dict(beyond_3sd=0, beyond_3mad=0)
    assert outliers(np.r_[np.arange(1.0, 10.0), 100.0]) == dict(beyond_3sd=1, beyond_3mad=1)
    assert yuen(np.arange(1.0, 3.0))[2] == 1  # two batches (CI's size): nothing trimmed, the plain t's df
