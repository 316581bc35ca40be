"""Statistics over seeds and figure checks: what the experiment notebooks, scripts/verdict.py and the
deck compute from the metrics records of finished runs. Nothing here trains; the runs are `driver.py`'s
(`run_grid`, `train_many`), the method is `core.py`.

Reading order: `mean_ci95` (a mean over seeds with its 95% t interval) · `eval_curve`,
`moving_average` (curves of one run) · `final_reward`, `curve_auc`, `collapsed` (one number per run) ·
`p_text`, `holm`, `paired_contrasts`, `mcnemar_exact` (arms compared over paired seeds) · `ARM_COLORS`,
`band_plot`, `check_layout` (figures fit for a slide).
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


def check_layout(fig) -> None:
    """A figure fit for a slide: no legend covers a bar of its own axes, and no title, suptitle,
    legend or table overlaps another. Draws the figure (pixel boxes need a renderer); call it just
    before `savefig`. Raises ValueError naming the two overlapping elements and their axes titles."""
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
    for i, (a, box_a) in enumerate(extents):
        for b, box_b in extents[i + 1:]:
            if box_a.overlaps(box_b):
                raise ValueError(f"the {a} overlaps the {b}")
