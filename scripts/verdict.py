"""The verdict page's numbers and its forest plot, from the committed figures/*.json, under the page's inference rule.

    python scripts/verdict.py            # print the generated blocks of docs/verdict.md and README.md
    python scripts/verdict.py --write    # rewrite those blocks, figures/verdict_forest.{png,json}

The rule (docs/verdict.md, "The inference rule"), as this file applies it:

1. every paired contrast the notebooks report (arm − arm in final clean reward, per seed) is one row;
2. replicates of a notebook on another CPU model (figures/other_cpu/) are pooled: a seed is one unit, the mean of
   its replicates (`pool_replicates`), and the replicates are compared paired by seed (`heterogeneity_p`);
3. the test a row needs comes from the claim's wording (`KINDS`: one-sided, non-inferiority at −0.05, TOST within
   ±0.05; two-sided for rows no claim reads), computed by `paired_test` over the seed units;
4. Holm's correction runs within the family the row's notebook pre-registered (`FAMILIES`), never over the page:
   the page-wide correction is a sensitivity column (`page_holm`);
5. a status follows (`decide`): reproduced / equivalent within ±0.05 / non-inferior / contradicted / not decided,
   with the seeds that would decide it (`seeds_needed`).

`tested_rows()` makes the rows, `claims()` the claims table, `holm_interval` a row's Holm-level interval (the
deck's). The older single-CPU rows with a page-wide Holm correction (`with_tests`, `replicate_rows`) are no
longer read by the page or the deck. tests/test_verdict.py checks the page and the README against this file, and the rule's pieces against
independent computations.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from scrl_min import holm, mean_ci95, p_text  # noqa: E402  (the scaffold's statistics, from the repository)

FIG = REPO / "figures"
PAGE = REPO / "docs" / "verdict.md"
README = REPO / "README.md"
OTHER_CPU = FIG / "other_cpu"  # the same notebooks, code and seeds run on another CPU model (a replicate)

MARGIN = 0.05  # M: the equivalence / non-inferiority margin, in final clean reward (declared in the rule)
ALPHA = 0.05  # family-wise level of Holm's correction within a family
POWER = 0.80  # the power at which `seeds_needed` counts the seeds that would decide a claim

# The test each wording needs (docs/verdict.md, "The inference rule", item 4): name → how the page writes it
KINDS = {"greater": "one-sided (> 0)", "less": "one-sided (< 0)", "noninferior": f"non-inferiority at −{MARGIN:g}",
         "equivalent": f"TOST within ±{MARGIN:g}", "two-sided": "two-sided"}

# The families each notebook pre-registered (or, marked exploratory, the family this page names for contrasts no
# notebook pre-registered): key → (how the page names it, exploratory?)
FAMILIES = {
    "02": ("notebook 02's five primary contrasts", False),
    "11 slopes": ("notebook 11's two declared slopes", False),
    "11 reference": ("the ladder's no-mismatch reference, one contrast per rung (exploratory)", True),
    "06 map": ("notebook 06's 54 map cells (its Holm p)", False),
    "07": ("notebook 07's eight SC + IS − IS contrasts (exploratory: 07 declared none)", True),
    "10": ("notebook 10's declared gradient tests", False),
}

# The test each contrast of notebook 02's family needs, from the claim it answers (docs/verdict.md's claims table)
KIND_02 = {"sc − mis": "noninferior", "sc − tis": "noninferior", "sc_mis − mis": "greater", "sc − plain": "greater",
           "plain − bf16": "less"}

# Notebook 10: the cell that decides each gradient claim, by its label in figures/10_gradient_test.json's
# "contrasts". None: the notebook declared no primary cell (the claim is then not decided, and the page says
# why). A redesigned notebook 10 can name its primary contrasts in its JSON ("primary_contrasts": {"C1": label,
# ...}), which take precedence over this table.
GRADIENT_PRIMARY = {"C1": None, "C2": None, "C3": None, "S1": None}


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The rule's pieces (tests/test_verdict.py checks each against an independent computation)
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def pool_replicates(replicates) -> np.ndarray:
    """The seed units of a contrast: the mean over replicates of each seed's paired difference.

    replicates: (k, n) array-like, k ≥ 1 replicates (CPU models) × n seeds in the same seed order. Returns (n,).
    Raises ValueError when the replicates do not hold the same number of seeds."""
    r = [np.asarray(x, dtype=float) for x in replicates]
    if not r or any(x.shape != r[0].shape or x.ndim != 1 for x in r):
        raise ValueError(f"replicates must be k ≥ 1 equal-length seed vectors, got shapes {[x.shape for x in r]}")
    return np.mean(r, axis=0)


def heterogeneity_p(replicates) -> float | None:
    """Whether the replicates of a design differ, paired by seed: two-sided p of the seed × replicate F test
    (replicate effect, seeds as blocks; for k = 2 it is the paired t test of the replicates' per-seed difference,
    F = t²). None for a single replicate. replicates: (k, n), k replicates × n ≥ 2 seeds. p < 0.05 flags the row
    "replicates differ"; it never changes its status (the rule, item 3)."""
    from scipy import stats

    x = np.asarray(replicates, dtype=float)
    if x.ndim != 2:
        raise ValueError(f"replicates must be a (k, n) array, got shape {x.shape}")
    k, n = x.shape
    if k < 2:
        return None
    if n < 2:
        raise ValueError(f"a heterogeneity test needs at least 2 seeds, got {n}")
    grand = x.mean()
    resid = x - x.mean(axis=0, keepdims=True) - x.mean(axis=1, keepdims=True) + grand
    ss_rep = n * float(((x.mean(axis=1) - grand) ** 2).sum())
    ss_err = float((resid ** 2).sum())
    df_rep, df_err = k - 1, (k - 1) * (n - 1)
    if ss_err == 0:
        return 1.0 if ss_rep == 0 else 0.0
    return float(stats.f.sf((ss_rep / df_rep) / (ss_err / df_err), df_rep, df_err))


def _t_sf(x: float, df: int) -> float:
    from scipy import stats

    return float(stats.t.sf(x, df))


def paired_test(units, kind: str, margin: float = MARGIN) -> dict:
    """The test a claim's wording needs, over the seed units of one contrast (Student t, n − 1 df).

    units: (n,) per-seed paired differences (n ≥ 2). kind: one of KINDS:
      greater      H0: d ≤ 0,  H1: d > 0        p = P(T ≥ t),           t = mean / se
      less         H0: d ≥ 0,  H1: d < 0        p = P(T ≤ t)
      noninferior  H0: d ≤ −M, H1: d > −M       p = P(T ≥ (mean + M) / se)
      equivalent   H0: |d| ≥ M, H1: |d| < M     p = max(P(T ≥ (mean + M)/se), P(T ≤ (mean − M)/se))  (TOST)
      two-sided    H0: d = 0                    p = 2 P(T ≥ |t|)
    Returns n, mean, sd, ci95 (half-width of the 95% t interval), p, and p_opposite: the p of the test in the
    opposite direction (for `decide`'s "contradicted"; d < 0, d < −M, or d outside ±M with the two sides
    Bonferroni-combined; None for two-sided). Raises ValueError for fewer than 2 seeds or an unknown kind."""
    from scipy import stats

    d = np.asarray(units, dtype=float)
    if kind not in KINDS:
        raise ValueError(f"unknown test {kind!r}; choose one of {list(KINDS)}")
    n = len(d)
    if n < 2:
        raise ValueError(f"a paired t test needs at least 2 seeds, got {n}")
    m, sd, df = float(d.mean()), float(d.std(ddof=1)), n - 1
    se = sd / math.sqrt(n)

    def z(c):  # (mean − c) / se, ±inf or 0 when every seed gives the same difference
        return (m - c) / se if se > 0 else (math.copysign(math.inf, m - c) if m != c else 0.0)

    def sf(c):
        return _t_sf(z(c), df)

    def cdf(c):
        return _t_sf(-z(c), df)

    if kind == "greater":
        p, opp = sf(0.0), cdf(0.0)
    elif kind == "less":
        p, opp = cdf(0.0), sf(0.0)
    elif kind == "noninferior":
        p, opp = sf(-margin), cdf(-margin)
    elif kind == "equivalent":
        p, opp = max(sf(-margin), cdf(margin)), min(1.0, 2 * min(cdf(-margin), sf(margin)))
    else:
        p, opp = min(1.0, 2 * _t_sf(abs(z(0.0)), df)), None
    return dict(n=n, mean=m, sd=sd, ci95=float(stats.t.ppf(0.975, df) * se), p=float(p),
                p_opposite=None if opp is None else float(opp))


def seeds_needed(mean: float, sd: float, kind: str, level: float, margin: float = MARGIN, power: float = POWER,
                 n_max: int = 100_000) -> int | None:
    """The smallest number of seeds n ≥ 2 at which the claim's test at `level` (one-sided) has `power`, if the
    true paired difference were `mean` and its per-seed standard deviation `sd`; normal approximation with the
    t quantile: power = Φ(Δ √n / sd − t_{1−level, n−1}), with Δ = mean (greater), −mean (less), mean + M
    (noninferior); for equivalence (TOST) power = Φ((M − mean)√n/sd − t) + Φ((M + mean)√n/sd − t) − 1.
    None when the mean lies on the wrong side of the claim's threshold (no n decides it at this effect), or
    when n_max seeds do not reach `power`. Raises ValueError for a two-sided kind (no claim to decide)."""
    from scipy import stats

    if kind == "greater":
        delta = mean
    elif kind == "less":
        delta = -mean
    elif kind == "noninferior":
        delta = mean + margin
    elif kind == "equivalent":
        delta = margin - abs(mean)
    else:
        raise ValueError(f"seeds_needed decides a claim; {kind!r} is not one of greater, less, noninferior, equivalent")
    if delta <= 0:
        return None
    if sd == 0:
        return 2

    def pw(n):
        c, s = stats.t.ppf(1 - level, n - 1), sd / math.sqrt(n)
        if kind == "equivalent":
            return stats.norm.cdf((margin - mean) / s - c) + stats.norm.cdf((margin + mean) / s - c) - 1
        return stats.norm.cdf(delta / s - c)

    lo, hi = 2, 2
    while pw(hi) < power:  # double, then bisect: power grows with n
        lo, hi = hi, hi * 2
        if hi > n_max:
            return None
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if pw(mid) < power else (lo, mid)
    return lo


def decide(kind: str, p_holm: float, p_opposite_holm: float | None, alpha: float = ALPHA) -> str:
    """A claim's status from its Holm-adjusted p and the Holm-adjusted p of the opposite test, within its family:
    'reproduced' (greater / less), 'equivalent within ±0.05' (equivalent), 'non-inferior' (noninferior) when
    p_holm < alpha; 'contradicted' when the opposite test's is; 'not decided' otherwise. '' for a two-sided
    (descriptive) row. Raises ValueError for an unknown kind."""
    if kind not in KINDS:
        raise ValueError(f"unknown test {kind!r}; choose one of {list(KINDS)}")
    if kind == "two-sided":
        return ""
    if p_holm < alpha:
        return {"equivalent": f"equivalent within ±{MARGIN:g}", "noninferior": "non-inferior"}.get(kind, "reproduced")
    if p_opposite_holm is not None and p_opposite_holm < alpha:
        return "contradicted"
    return "not decided"


def wins(units, kind: str, margin: float = MARGIN) -> int:
    """Seeds on the claim's side: d > 0 (greater, two-sided), d < 0 (less), d > −M (noninferior), |d| < M
    (equivalent)."""
    d = np.asarray(units, dtype=float)
    return int({"less": d < 0, "noninferior": d > -margin, "equivalent": np.abs(d) < margin}.get(kind, d > 0).sum())


def apply_holm(rs: list, alpha: float = ALPHA) -> list:
    """Holm within each row's family (rows with family None are descriptive: no correction, no status). Adds
    p_holm, p_opposite_holm, m (the family's size), status and seeds (seeds_needed at the family's strictest
    Holm level α/m) to every row; a row that carries its notebook's own Holm p (`p_holm_given`, notebook 06)
    keeps it. Returns rs."""
    fams = {}
    for r in rs:
        if r["family"] is not None:
            fams.setdefault(r["family"], []).append(r)
    for fam, members in fams.items():
        adj = holm([r["p"] for r in members])
        opp = [r["p_opposite"] for r in members]
        adj_opp = holm(opp) if all(v is not None for v in opp) else [None] * len(members)
        for r, ph, po in zip(members, adj, adj_opp):
            r.update(p_holm=r.get("p_holm_given", float(ph)), p_opposite_holm=None if po is None else float(po),
                     m=r.get("m_given", len(members)))
    for r in rs:
        if r["family"] is None:
            r.update(p_holm=None, p_opposite_holm=None, m=None, status="", seeds=None)
            continue
        r["status"] = decide(r["kind"], r["p_holm"], r["p_opposite_holm"], alpha)
        r["seeds"] = (seeds_needed(r["mean"], r["sd"], r["kind"], alpha / r["m"])
                      if r["status"] == "not decided" else None)
    return rs


def holm_interval(r: dict, rs: list, alpha: float = ALPHA) -> tuple:
    """The Holm-level interval of tested row `r` (after `apply_holm`) in its family, the rows of `rs` that share
    r's family: the (1 − 2a) two-sided t interval over r's seed units, a = α/(m − k) the level at which Holm's
    step k tests it (k: r's 0-based rank by p within the family, ties in page order). Its end on the claim's
    side decides the test at level a: the lower end above 0 (greater), above −M (noninferior); the upper end below
    0 (less); both ends within ±M (equivalent). Returns (lower, upper, a). Raises ValueError for a descriptive row
    (no family), a row whose Holm p its notebook gave (notebook 06), or a row that is not in `rs`."""
    from scipy import stats

    if r.get("family") is None or "p_holm_given" in r:
        raise ValueError(f"{r.get('contrast')!r} has no Holm step of this page's: family {r.get('family')!r}")
    fam = [x for x in rs if x["family"] == r["family"]]
    order = sorted(range(len(fam)), key=lambda i: fam[i]["p"])
    k = next((j for j, i in enumerate(order) if fam[i] is r), None)
    if k is None:
        raise ValueError(f"{r.get('contrast')!r} is not among the rows of its family {r['family']!r}")
    a = alpha / (len(fam) - k)
    h = float(stats.t.ppf(1 - a, r["n"] - 1) * r["sd"] / math.sqrt(r["n"]))
    return r["mean"] - h, r["mean"] + h, a


def page_holm(rs: list) -> list:
    """The sensitivity column: Holm over every row of `rs` at once (each row's own test's p); adds p_page."""
    for r, ph in zip(rs, holm([r["p"] for r in rs])):
        r["p_page"] = float(ph)
    return rs


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The rows: every paired contrast of the committed JSON, per replicate
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def _load(name, fig: Path = FIG):
    """figures/NAME, or fig/NAME where `fig` (figures/other_cpu/) has that file."""
    path = fig / name if (fig / name).exists() else FIG / name
    return json.loads(path.read_text()) if path.exists() else None


def _row(source, setting, name, diffs, kl=None):
    return dict(source=source, setting=setting, contrast=name, per_seed=[float(d) for d in diffs], kl=kl)


def rows(fig: Path = FIG) -> list:
    """Every paired contrast of one replicate's JSON, as (source, setting, contrast, per-seed differences, KL), in
    page order: the headline (02), the severity ladder (11), the regime map (06), staleness (07). With
    fig=OTHER_CPU, the notebooks that folder holds come from there (the other CPU model's runs), the others from
    figures/. `tested_rows` pools these over replicates."""
    out = []
    d = _load("02_fp8_arms.json", fig)
    if d:
        fin = {a: np.array(v["final_eval_per_seed"]) for a, v in d["final"].items()}
        kl = d.get("kl_qp_step0", {}).get("plain")
        setting = d.get("setting", f"FP8 + σ {d['parameters']['noise_std']}") + f", {d['parameters']['advantage_mode']}"
        names = d.get("primary_contrasts") or ["sc − mis", "sc − tis", "sc_mis − mis", "sc − plain", "plain − bf16"]
        for name in names:
            a, b = name.split(" − ")
            if a in fin and b in fin:
                out.append(_row("02", setting, name, fin[a] - fin[b], kl))
    d = _load("11_severity_slope.json", fig)
    if d:
        for rung in d["rungs"]:
            r = d["per_rung"][rung]
            for name in r["contrasts"]:
                a, b = name.split(" − ")
                diffs = np.array(r["final"][a]["per_seed"]) - np.array(r["final"][b]["per_seed"])
                out.append(_row("11", f"{rung}, {d['parameters']['advantage_mode']}", name, diffs, r["kl_run_mean"]))
    d = _load("06_regime_map.json", fig)
    if d:
        p, runs = d["parameters"], d["final_per_run"]
        for mode in p["modes"]:
            for prec, sigma in zip(p["severity_formats"], p["severity_noise"]):
                label = prec + (f" σ={sigma:g}" if sigma > 0 else "")
                cell = f"{mode} · {label}"
                kl = d["measured"].get(cell, {}).get("kl_qp")
                for a, b in (("sc", "plain"), ("sc", "mis"), ("sc", "tis"), ("sc_mis", "mis"), ("plain", "reference")):
                    def f(arm, s):
                        key = f"{mode} / reference / bf16 / {s}" if arm == "reference" else f"{mode} / {label} / {arm} / {s}"
                        return runs[key]
                    if all(x == "reference" or x in p["arms"] for x in (a, b)):
                        diffs = [f(a, s) - f(b, s) for s in p["seeds"]]
                        out.append(_row("06", f"{label}, {mode}", f"{a} − {b}".replace("reference", "bf16"), diffs, kl))
    d = _load("07_staleness.json", fig)
    if d:
        p, fin = d["parameters"], d["final"]
        for s in p["staleness"]:
            key = f"s={s}"
            for a, b in (("sc_tis", "tis"), ("sc_mis", "mis"), ("plain", "reference_s0")):
                if a in fin and b in fin:
                    va = np.array(fin[a][key]["per_seed"])
                    vb = np.array(fin[b]["per_seed"] if b == "reference_s0" else fin[b][key]["per_seed"])
                    out.append(_row("07", f"staleness s = {s}, {p['sampler_precision']}, {p['advantage_mode']}",
                                    f"{a} − {b}".replace("reference_s0", "s = 0"), va - vb, fin[a][key].get("kl_qp")))
    return out


REPLICATED = {"02": "02_fp8_arms.json", "11": "11_severity_slope.json"}  # notebooks figures/other_cpu/ may hold


def replicated(source: str) -> bool:
    """Whether figures/other_cpu/ holds notebook `source`'s JSON (rows(OTHER_CPU) otherwise falls back to figures/)."""
    return source in REPLICATED and (OTHER_CPU / REPLICATED[source]).exists()


def replicate_dirs(source: str) -> list:
    """The folders that hold replicates of notebook `source`'s runs: figures/, then figures/other_cpu/ if it has them."""
    return [FIG] + ([OTHER_CPU] if replicated(source) else [])


def ladder_reference(fig: Path = FIG) -> list:
    """The severity ladder's no-mismatch reference (notebook 11 runs notebook 02's configuration, so 02's bf16 runs
    of the same seeds are its reference): per rung, plain − bf16 per seed, as rows(). Empty when either JSON is
    missing. Raises ValueError when notebook 11 has a seed notebook 02 lacks."""
    d11, d02 = _load("11_severity_slope.json", fig), _load("02_fp8_arms.json", fig)
    if not d11 or not d02:
        return []
    seeds02 = d02["parameters"]["seeds"]
    missing = [s for s in d11["parameters"]["seeds"] if s not in seeds02]
    if missing:
        raise ValueError(f"notebook 11's seeds {missing} have no bf16 run in notebook 02's JSON ({fig})")
    bf16 = np.array(d02["final"]["bf16"]["final_eval_per_seed"])[[seeds02.index(s) for s in d11["parameters"]["seeds"]]]
    out = []
    for rung in d11["rungs"]:
        r = d11["per_rung"][rung]
        out.append(_row("11", f"{rung}, {d11['parameters']['advantage_mode']}", "plain − bf16 (02's)",
                        np.array(r["final"]["plain"]["per_seed"]) - bf16, r["kl_run_mean"]))
    return out


def _family_of(r) -> tuple:
    """(family key or None, test kind) of a reward row, by the rule: 02's five with the test their claims need;
    the ladder reference (exploratory, 'costs'); 06's map cells (its own Holm, two-sided); 07's SC + IS − IS
    (exploratory, 'beats'); every other row descriptive (two-sided, no family)."""
    src, c = r["source"], r["contrast"]
    if src == "02" and c in KIND_02:
        return "02", KIND_02[c]
    if src == "11" and c == "plain − bf16 (02's)":
        return "11 reference", "less"
    if src == "06" and c in ("sc − plain", "plain − bf16"):
        return "06 map", "two-sided"
    if src == "07" and c in ("sc_tis − tis", "sc_mis − mis"):
        return "07", "greater"
    return None, "two-sided"


def _map_holm_06() -> dict:
    """Notebook 06's own Holm p over its 54 map cells, by (setting as rows() writes it, contrast)."""
    d = _load("06_regime_map.json")
    out = {}
    if not d:
        return out
    for key, base in (("minus_reference", "bf16"), ("minus_plain", "plain")):
        mp = d["maps"][key]
        for i, cell in enumerate(mp["rows"]):
            mode, label = cell.split(" · ")
            for j, arm in enumerate(mp["cols"]):
                out[(f"{label}, {mode}", f"{arm} − {base}")] = float(mp["p_holm"][i][j])
    return out


def tested(source, setting, contrast, replicates, kl=None, family=None, kind="two-sided") -> dict:
    """One row under the rule: the seed units (mean over `replicates`, (k, n)), the test `kind` over them,
    the heterogeneity p, each replicate's own mean ± 95%, wins on the claim's side. Holm comes later
    (`apply_holm`, within `family`). replicates: (k, n) per-seed differences, k replicates × n ≥ 2 seeds; raises
    ValueError when their lengths differ or n < 2 (`pool_replicates`, `paired_test`)."""
    reps = [[float(v) for v in x] for x in replicates]
    units = pool_replicates(reps)
    r = dict(source=source, setting=setting, contrast=contrast, family=family, kind=kind, kl=kl, k=len(reps),
             replicates=reps, per_seed=units.tolist(), het_p=heterogeneity_p(reps),
             replicate_means=[[float(v) for v in mean_ci95(x)] for x in reps], wins=wins(units, kind))
    r.update(paired_test(units, kind))
    return r


def tested_rows() -> list:
    """Every paired contrast in final clean reward, pooled over replicates, with its family's Holm p, its status
    and the page-wide Holm p (sensitivity only), in page order: 02, 11 (per rung, then the ladder reference),
    06, 07. Rows of one (source, setting, contrast) are matched across replicates; a replicate that lacks a row
    leaves the row to the replicates that have it."""
    by_dir = {f: rows(f) for f in {f for src in ("02", "11", "06", "07") for f in replicate_dirs(src)}}
    ref = [ladder_reference(f) for f in replicate_dirs("11")]
    holm06 = _map_holm_06()
    out = []
    for src in ("02", "11", "06", "07"):
        reps = [[r for r in by_dir[f] if r["source"] == src] for f in replicate_dirs(src)]
        if src == "11":
            reps = [a + b for a, b in zip(reps, ref)]
        for base in reps[0]:
            key = (base["setting"], base["contrast"])
            same = [base["per_seed"]] + [r["per_seed"] for rep in reps[1:] for r in rep
                                         if (r["setting"], r["contrast"]) == key]
            family, kind = _family_of(base)
            row = tested(src, base["setting"], base["contrast"], same, base["kl"], family, kind)
            if family == "06 map":
                row.update(p_holm_given=holm06[key], m_given=54)
            out.append(row)
    return page_holm(apply_holm(out))


def slope_rows() -> list:
    """Notebook 11's declared slopes under the rule: each seed's own slope of the paired difference against
    log10 KL (the seed-respecting version its pre-registration names), the mean over replicates per seed, a
    one-sided t test (the edge grows: slope > 0), Holm over the two slopes."""
    out = []
    reps = [_load("11_severity_slope.json", f) for f in replicate_dirs("11")]
    if not reps[0]:
        return out
    for name in reps[0]["slopes"]:
        per = [d["slopes"][name]["per_seed_slopes"] for d in reps if name in d["slopes"]]
        out.append(tested("11", f"severity ladder, {len(reps[0]['rungs'])} rungs", f"{name} slope", per,
                          family="11 slopes", kind="greater"))
    return apply_holm(out)


def gradient_rows(g) -> list:
    """Notebook 10's declared family (its contrasts C1-C3 per cell and slopes S1), each tested one-sided in SC's
    favour (the claims: SC's MSE is lower, SC's edge grows: estimate < 0), with Holm over the whole family as the
    notebook declared it. Each row: label, mean (estimate, MSE relative to ‖g*‖²), ci95, sd (over replicates,
    from the jackknife t), n (replicates). [] when notebook 10 has not run."""
    if g is None:
        return []
    n = g["parameters"]["replicates"]
    out = []
    for c in g["contrasts"]:
        t, est = c["t"], c["estimate"]
        sd = abs(est / t) * math.sqrt(n) if t not in (0, None) and np.isfinite(t) else 0.0
        out.append(dict(label=c["label"], family="10", kind="less", mean=est, ci95=c["ci95"], sd=sd, n=n,
                        p=_t_sf(-t, n - 1), p_opposite=_t_sf(t, n - 1)))
    return apply_holm(out)


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Claims, tables and the page's generated text
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def fmt(x, signed=True, d=3):
    return f"{x:+.{d}f}" if signed else f"{x:.{d}f}"


SIDE = {"greater": "above 0", "less": "below 0", "noninferior": f"above −{MARGIN:g}",
        "equivalent": f"within ±{MARGIN:g}", "two-sided": "above 0"}


def _find(rs, source, contrast, setting_prefix=None):
    for r in rs:
        if r["source"] == source and r["contrast"] == contrast and (setting_prefix is None
                                                                    or r["setting"].startswith(setting_prefix)):
            return r
    return None


def _seeds_text(r, unit="seeds") -> str:
    """The not-decided reason: the seeds that would decide it, or why no number would."""
    if r["seeds"] is not None and r["seeds"] > 1000:
        return f"more than 1000 {unit} (sd over {unit} {r['sd']:.3f})"
    if r["seeds"] is not None:
        return f"{r['seeds']} {unit} would decide it (80% power at Holm's α/{r['m']}, sd over {unit} {r['sd']:.3f})"
    threshold = {"greater": "0", "less": "0", "noninferior": f"−{MARGIN:g}", "equivalent": f"±{MARGIN:g}"}[r["kind"]]
    return f"no number of {unit} at this estimate (it lies on the wrong side of {threshold})"


def status_text(r, unit="seeds") -> str:
    """A tested row's status as the claims table writes it (bold when decided), with the exploratory label, the
    seeds that would decide it when not decided, and the replicates flag."""
    st = r["status"]
    text = f"not decided: {_seeds_text(r, unit)}" if st == "not decided" else f"**{st}**"
    if FAMILIES[r["family"]][1]:
        text = f"exploratory · {text}"
    if r.get("het_p") is not None and r["het_p"] < 0.05:
        text += f" · replicates differ (heterogeneity p {p_text(r['het_p'])})"
    return text


def short_status(r, unit="seeds") -> str:
    """The README's status in a few words."""
    st = r["status"]
    n = None if r["seeds"] is None else "more than 1000" if r["seeds"] > 1000 else r["seeds"]
    text = (f"not decided ({n} {unit} would)" if st == "not decided" and n is not None
            else st if st == "not decided" else f"**{st}**")
    if FAMILIES[r["family"]][1]:
        text = f"exploratory; {text}"
    if r.get("het_p") is not None and r["het_p"] < 0.05:
        text += "; replicates differ"
    return text


def number_text(r, what: str = "", unit: str = "") -> str:
    """A tested row's numbers: pooled mean ± 95%, seeds × replicates, wins on the claim's side, the test's p and
    its Holm p in the family, each replicate's mean ± 95% and the heterogeneity p, the page-wide Holm p."""
    k = "" if r["k"] == 1 else f" × {r['k']} CPU models"
    s = (f"{what}{fmt(r['mean'])} ± {r['ci95']:.3f}{unit} ({r['n']} seeds{k}; {r['wins']}/{r['n']} {SIDE[r['kind']]}); "
         f"{KINDS[r['kind']]} p {p_text(r['p'])}, Holm p {p_text(r['p_holm'])} in {FAMILIES[r['family']][0]}")
    if r["k"] > 1:
        s += ("; per CPU model " + " and ".join(f"{fmt(m)} ± {h:.3f}" for m, h in r["replicate_means"])
              + f", heterogeneity p {p_text(r['het_p'])}")
    if "p_page" in r:
        s += f"; page-wide Holm p {p_text(r['p_page'])} (sensitivity)"
    return s


def _where(r, name: str) -> str:
    k = "" if r["k"] == 1 else f" × {r['k']} CPU models"
    return f"{name}, {r['n']} seeds{k}"


def claims(rs: list | None = None, slopes: list | None = None, g=None) -> list:
    """Each claim of the article as a dict: claim, where, number, status, short (mean ± 95%), short_status, and
    the tested row it reads (row; None for the gradient summary and the top-k claim). rs: tested_rows();
    slopes: slope_rows(); g: notebook 10's JSON (read from figures/ when None)."""
    rs = tested_rows() if rs is None else rs
    slopes = slope_rows() if slopes is None else slopes
    g = _load("10_gradient_test.json") if g is None else g
    h = _load("02_fp8_arms.json")
    head = f"02 · {h.get('setting', 'FP8 + σ 0.1')}, raw" if h else "02"
    topk = _load("03_topk_estimator.json")
    out = []

    def add(claim, where, r, note=""):
        if r is None:
            out.append(dict(claim=claim, where=where.split(",")[0], number="–", status="untested here",
                            short="–", short_status="untested here", row=None))
            return
        k = "" if r["k"] == 1 else f" × {r['k']} CPU models"
        out.append(dict(claim=claim, where=_where(r, where), number=number_text(r) + note, status=status_text(r),
                        short=f"{fmt(r['mean'], d=2)} ± {r['ci95']:.2f} ({r['n']} seeds{k})",
                        short_status=short_status(r), row=r))

    add("A mismatched sampler costs plain training reward (plain < no-mismatch reference)", head,
        _find(rs, "02", "plain − bf16"))
    add("… also under FP8 alone (a real format, no noise)", "11 · fp8 rung − 02's bf16, raw",
        _find(rs, "11", "plain − bf16 (02's)", "fp8, "))
    add("Score centering recovers it (SC > plain)", head, _find(rs, "02", "sc − plain"))
    add("SC matches or beats TIS (non-inferior at −0.05)", head, _find(rs, "02", "sc − tis"))
    add("SC matches or beats MIS (non-inferior at −0.05)", head, _find(rs, "02", "sc − mis"))
    add("SC + IS beats IS (SC+MIS > MIS)", head, _find(rs, "02", "sc_mis − mis"),
        "; where every ratio and ρ are in the band, SC+MIS is MIS exactly (docs/method.md)")
    for r in slopes:
        name = r["contrast"].replace(" slope", "")
        out.append(dict(claim=f"SC's edge grows with the mismatch ({name} against log10 KL)",
                        where=_where(r, "11 · severity ladder, each seed's own slope"),
                        number=number_text(r, "slope ", " per tenfold KL"), status=status_text(r),
                        short=f"slope {fmt(r['mean'], d=2)} ± {r['ci95']:.2f} per tenfold KL",
                        short_status=short_status(r), row=r))
    if not slopes:
        out.append(dict(claim="SC's edge grows with the mismatch", where="11 · severity ladder", number="–", short="–",
                        status="untested here: notebook 11 has not run at full size yet (notebooks/pending.yaml)",
                        short_status="untested here", row=None))
    out.extend(gradient_claims(g))
    for s_ in (1, 8):
        add(f"Centering helps under staleness (SC+TIS > TIS), s = {s_}", f"07 · bf16 sampler, staleness {s_}",
            _find(rs, "07", "sc_tis − tis", f"staleness s = {s_},"))
    if topk:
        b = topk["settings"]["σ=0.1, T=1"]["by_k"]
        i = b["k"].index(128)
        out.append(dict(claim="A top-k head of k = 128 estimates the drift well",
                        where=f"03 · V = {topk['vocab_size']}, FP8 + σ 0.1, T = 1",
                        number=f"head mass {b['head_mass_mean'][i]:.2f}; relative L1 error of the drift "
                               f"{b['rel_err_l1_mean'][i]:.2f} (without the tail model: {b['naive_rel_err_l1_mean'][i]:.1f}); "
                               f"cosine to the exact update in parameter space {b['cos_sim'][i]:.3f}",
                        short=f"drift error {b['rel_err_l1_mean'][i]:.2f} (without the tail model {b['naive_rel_err_l1_mean'][i]:.1f})",
                        status=f"not tested: 'well' has no declared margin (measured at V = {topk['vocab_size']}, where "
                               f"k is 6% of the vocabulary; 0.1% of a 150k one is untested)",
                        short_status="not tested (no margin for 'well')", row=None))
    return out


GRADIENT_OTHERS = (("C1", "exact token IS"), ("C2", "TIS"), ("C3", "MIS"))


def _gradient_primary(g) -> dict:
    """The primary cell of each gradient claim: the JSON's own "primary_contrasts" when notebook 10 declares them,
    else GRADIENT_PRIMARY."""
    return {**GRADIENT_PRIMARY, **(g.get("primary_contrasts") or {})}


def gradient_claims(g, grs: list | None = None) -> list:
    """The gradient-level claims (notebook 10), one per declared contrast (C1-C3, S1), tested in the notebook's own
    family of declared tests. With a primary cell (`_gradient_primary`), its status; without one, 'not decided'
    with the reason, unless a cell holds in the family (then the cells that hold are named). No cell counts."""
    if g is None:
        return [dict(claim="SC's gradient is closer to the on-policy gradient than IS's, more so as the mismatch grows",
                     where="10 · gradient-level test", number="–", short="–", short_status="untested here", row=None,
                     status="untested here: notebook 10 has not run at full size yet (notebooks/pending.yaml)")]
    grs = gradient_rows(g) if grs is None else grs
    primary, m, reps = _gradient_primary(g), len(grs), g["parameters"]["replicates"]
    fam = f"notebook 10's family of {m} declared tests, one-sided in SC's favour"
    out = []
    specs = [(c, f"SC's gradient (k = {g['parameters']['k']}) is closer to the on-policy gradient than {o}'s (MSE per update)",
              lambda lab, c=c: lab.endswith(f" · {c}")) for c, o in GRADIENT_OTHERS]
    specs.append(("S1", "… and SC's edge over exact IS grows with the mismatch (slope of the MSE gap against log10 KL)",
                  lambda lab: " · S1" in lab))
    for c, claim, match in specs:
        cells = [r for r in grs if match(r["label"])]
        if not cells:
            continue
        where = f"10 · gradient-level test, {reps} replicates; {len(cells)} {c} cells"
        label = primary.get(c)
        if label is not None:
            r = next((x for x in grs if x["label"] == label), None)
            if r is None:
                raise ValueError(f"notebook 10's primary cell {label!r} for {c} is not among its contrasts")
            out.append(dict(claim=claim, where=where + f"; primary cell {label}",
                            number=f"{label}: {fmt(r['mean'], d=4)} ± {r['ci95']:.4f} (MSE relative to ‖g*‖²); "
                                   f"one-sided p {p_text(r['p'])}, Holm p {p_text(r['p_holm'])} in {fam}",
                            status=status_text(r, "replicates"), short=f"{fmt(r['mean'], d=3)} ± {r['ci95']:.3f} ‖g*‖²",
                            short_status=short_status(r, "replicates"), row=r))
            continue
        held = [r["label"] for r in cells if r["status"] == "reproduced"]
        against = [r["label"] for r in cells if r["status"] == "contradicted"]
        best = min(cells, key=lambda r: r["p_holm"])
        number = (f"no primary cell declared; in {fam}, the smallest Holm p of a {c} cell is "
                  f"{p_text(best['p_holm'])} ({best['label']}: {fmt(best['mean'], d=4)} ± {best['ci95']:.4f})")
        if held or against:
            status = "; ".join(x for x in (f"**reproduced** at {', '.join(held)}" if held else "",
                                           f"**contradicted** at {', '.join(against)}" if against else "") if x)
            short_st = "**reproduced** in some cells" if held and not against else "mixed"
        else:
            status = ("not decided: notebook 10 declared no primary cell, and no cell holds after Holm over its family "
                      "(one update's error is almost all batch noise at this size)")
            short_st = "not decided (no primary cell; none holds)"
        out.append(dict(claim=claim, where=where, number=number, status=status, short="no primary cell",
                        short_status=short_st, row=None))
    return out


def claims_table(cs: list | None = None) -> str:
    cs = claims() if cs is None else cs
    lines = ["| the article's claim | tested where | the project's number (paired; final clean reward unless named) | status |",
             "|---|---|---|---|"]
    lines += [f"| {c['claim']} | {c['where']} | {c['number']} | {c['status']} |" for c in cs]
    return "\n".join(lines)


def readme_table(rs=None, cs: list | None = None) -> str:
    """The README's short form of the claims table (`cs`, claims() when None): claim, where, mean ± 95%, status in
    a few words. `rs` is accepted for the deck's older call (readme_table(rows)) and ignored: the claims always
    come from tested_rows()."""
    lines = ["| the article's claim | where | paired difference | status |", "|---|---|---|---|"]
    for c in (claims() if cs is None else cs):
        lines.append(f"| {c['claim']} | {c['where'].split(' · ')[0]} | {c['short']} | {c['short_status']} |")
    return "\n".join(lines)


def forest_table(rs: list) -> str:
    lines = ["| source | setting | contrast | seeds × CPU models | mean ± 95% | heterogeneity p | test | p | family | "
             "Holm p in its family | page-wide Holm p (sensitivity) | wins | status | KL(q‖p) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        kl = f"{r['kl']:.1e}" if r["kl"] is not None else "–"
        fam = "descriptive" if r["family"] is None else FAMILIES[r["family"]][0]
        decided = r["status"] not in ("", "not decided")
        bold = "**" if decided else ""
        st = "–" if not r["status"] else short_status(r)
        lines.append(f"| {r['source']} | {r['setting']} | {bold}{r['contrast']}{bold} | {r['n']} × {r['k']} | "
                     f"{fmt(r['mean'])} ± {r['ci95']:.3f} | {'–' if r['het_p'] is None else p_text(r['het_p'])} | "
                     f"{KINDS[r['kind']]} | {p_text(r['p'])} | {fam} | "
                     f"{'–' if r['p_holm'] is None else p_text(r['p_holm'])} | {p_text(r['p_page'])} | "
                     f"{r['wins']}/{r['n']} | {st} | {kl} |")
    return "\n".join(lines)


def _pm(r, d=2) -> str:
    return f"{fmt(r['mean'], d=d)} ± {r['ci95']:.{d}f}"


def severity_text(rs: list | None = None, slopes: list | None = None) -> str:
    """The severity section's generated part: per rung, the ladder reference (plain − 02's bf16), SC − plain and
    SC − MIS pooled over the CPU models' runs, then the slopes' and the reference's readings."""
    rs = tested_rows() if rs is None else rs
    slopes = slope_rows() if slopes is None else slopes
    d11 = _load("11_severity_slope.json")
    if not d11:
        return "Notebook 11 has not run at full size yet (notebooks/pending.yaml)."
    mode = d11["parameters"]["advantage_mode"]

    def cell(r):
        het = "" if r["het_p"] is None else f" (het. p {p_text(r['het_p'])})"
        return f"{_pm(r)}{het}"

    ref = {rung: _find(rs, "11", "plain − bf16 (02's)", f"{rung}, ") for rung in d11["rungs"]}
    k = ref[d11["rungs"][0]]["k"]
    n = ref[d11["rungs"][0]]["n"]
    lines = [f"| rung | run-mean KL(q‖p) (committed run) | plain − bf16 (02's bf16, same seeds) | sc − plain | sc − mis |",
             "|---|---|---|---|---|"]
    for rung in d11["rungs"]:
        sp, sm = _find(rs, "11", "sc − plain", f"{rung}, "), _find(rs, "11", "sc − mis", f"{rung}, ")
        lines.append(f"| {rung} | {d11['per_rung'][rung]['kl_run_mean']:.1e} | {cell(ref[rung])} | {cell(sp)} | {cell(sm)} |")
    fp8, int4 = ref.get("fp8"), ref.get("int4_g128")
    sl = {r["contrast"].replace(" slope", ""): r for r in slopes}
    text = [
        f"({n} seeds × {k} CPU models, {mode} rewards; a seed is the mean of its {k} runs, 95% t intervals over "
        f"seeds; het. p: the replicates compared paired by seed. Per-rung differences are descriptive, as notebook 11 "
        f"declared them; the reference column is the exploratory family of the rule, one contrast per rung.)",
        f"**The ladder has a no-mismatch reference**: notebook 11 runs notebook 02's configuration (its σ 0.1 rung *is* "
        f"02's seeds 0-{n - 1}), so 02's bf16 runs of the same seeds are its reference. Plain − bf16 is "
        f"{_pm(fp8)} under FP8 alone ({short_status(fp8)}; the claims table's row) and {_pm(int4)} at the real int4 "
        f"g128 format ({short_status(int4)}).",
    ]
    for name, r in sl.items():
        per = " and ".join(f"{fmt(m, d=2)} ± {h:.2f}" for m, h in r["replicate_means"])
        text.append(f"**{name}'s slope** (each seed's own slope against log10 KL, per tenfold KL): {_pm(r)} pooled "
                    f"({per} per CPU model; heterogeneity p {p_text(r['het_p'])}): {status_text(r)}.")
    sp = _find(rs, "11", "sc − plain", "int4_g128, ")
    if sp is not None and sp["k"] > 1:
        (m1, h1), (m2, h2) = sp["replicate_means"][:2]
        text.append(f"At int4 g128, SC − plain is {fmt(m1, d=2)} ± {h1:.2f} on the committed run and "
                    f"{fmt(m2, d=2)} ± {h2:.2f} on the other CPU model's ({_pm(sp)} pooled, heterogeneity p "
                    f"{p_text(sp['het_p'])}): descriptive, and the place to add seeds.")
    return "\n".join(lines) + "\n\n" + "\n\n".join(text)


def gradient_text(g, grs: list | None = None) -> str:
    """The gradient section's generated part: the family, its smallest Holm p, and where SC's MSE gap comes from
    (variance or bias²), from figures/10_gradient_test.json."""
    if g is None:
        return "Notebook 10 has not run at full size yet (notebooks/pending.yaml)."
    grs = gradient_rows(g) if grs is None else grs
    res, samplers = g["results"], g["samplers"]
    cells = [(panel, s) for panel in res for s in samplers]
    var_ref = [res[p][f"{s} · var_ref_rel"]["value"] for p, s in cells]
    corrected = [e for e in g["parameters"]["estimators"] if e != "plain"]
    b_corr = max(res[p][f"{s} · {e} · bias2"]["value"] for p, s in cells for e in corrected)
    plain_b = max((res[p][f"{s} · plain · bias2"] for p, s in cells), key=lambda v: v["value"])
    d_mse = [res[p][f"{s} · sc · mse"]["value"] - res[p][f"{s} · is · mse"]["value"] for p, s in cells]
    d_b2 = [res[p][f"{s} · sc · bias2"]["value"] - res[p][f"{s} · is · bias2"]["value"] for p, s in cells]
    best = min(grs, key=lambda r: r["p_holm"])
    return (f"**One update's error is almost all batch noise**: the on-policy estimator's own variance is "
            f"{min(var_ref):.0f}-{max(var_ref):.0f} ‖g*‖² across the {len(cells)} cells (sampler × policy × advantage "
            f"mode), the corrected estimators' bias² at most {b_corr:.2f} ‖g*‖², plain's up to {plain_b['value']:.0f} ± "
            f"{plain_b['ci95']:.0f}. Tested as the rule asks (one-sided in SC's favour, Holm over notebook 10's "
            f"{len(grs)} declared tests, {g['parameters']['replicates']} replicates), no test holds: the smallest Holm p "
            f"is {p_text(best['p_holm'])} ({best['label']}). The notebook declared no primary cell, so each claim is "
            f"\"not decided\" rather than read off a count of cells. **Where SC's MSE differs from exact IS's, the "
            f"difference is variance, not bias**: over the {len(cells)} cells the bias² gap is at most "
            f"{max(map(abs, d_b2)):.2f} ‖g*‖² in size while the MSE gap reaches {max(map(abs, d_mse)):.1f}.")


def readme_note(cs: list | None = None) -> str:
    """The README's paragraph after the claims: the headline statuses in words, from the claims' rows."""
    cs = claims() if cs is None else cs
    by = {c["claim"].split(" (")[0]: c["row"] for c in cs}
    cost, rec = by["A mismatched sampler costs plain training reward"], by["Score centering recovers it"]
    tis, mis = by["SC matches or beats TIS"], by["SC matches or beats MIS"]
    alone = by["… also under FP8 alone"]

    def st(r):
        return short_status(r).replace("**", "")

    def per(r):
        return " and ".join(f"{fmt(m, d=2)} ± {h:.2f}" for m, h in r["replicate_means"])

    return (f"Under the page's rule (each claim in the family its notebook pre-registered; the two CPU models' runs "
            f"pooled per seed, with a heterogeneity test; margins ±{MARGIN:g}), a mismatched sampler costs plain "
            f"training reward, plain − bf16 {_pm(cost)} over {cost['n']} seeds ({per(cost)} on the two CPU models): "
            f"{st(cost)}. Score centering recovers it, SC − plain {_pm(rec)} ({per(rec)}): {st(rec)}. SC against TIS "
            f"and MIS (\"matches or beats\": non-inferiority at −{MARGIN:g}): SC − TIS {_pm(tis)}, {st(tis)}; "
            f"SC − MIS {_pm(mis)}, {st(mis)}. Under FP8 alone, the ladder's no-mismatch reference gives "
            f"plain − bf16 {_pm(alone)}, {st(alone)}. At the gradient, one update's error is almost all batch noise at "
            f"this size, and SC's edge over IS, where its point estimate has one, is variance, not bias (notebook 10).")


def ladder_table() -> str:
    sev, mm = _load("04_severity.json"), _load("04_sampler_mismatch.json")
    lines = ["| sampler (torch, emulated numerics) | KL(q‖p) per token (k3 estimate) | mean \\|Δ log p\\| | tokens outside the MIS band [0.5, 5] |",
             "|---|---|---|---|"]
    rows_ = []
    if sev:
        for name, v in sev["samplers"].items():
            s_ = v["summary"]
            rows_.append((s_["kl_k3"], name, s_["abs_dlogp_mean"], s_["token_out_of_band"]))
    if mm:
        for name, v in mm["samplers"].items():
            if "σ" in name:
                b = v["by_temperature"]["1"]
                rows_.append((b["kl_k3"], name.replace("torch ", "") + " (the headline's sampler)", b["abs_dlogp_mean"],
                              b["token_out_of_band"]))
    for kl, name, d, oob in sorted(rows_):
        bold = "**" if "headline" in name else ""
        lines.append(f"| {bold}{name}{bold} | {kl:.1e} | {d:.3f} | {oob:.2%} |")
    src = f"notebook 04, {sev['parameters']['n_prompts']} prompts, T = 1, measured on {sev['hardware']['cpu']}" if sev else "notebook 04"
    lines.append("")
    lines.append(f"({src}.) The headline's FP8 + 10% weight noise sits above every real format measured here.")
    return "\n".join(lines)


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The forest plot, and the deck's older rows
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def forest_plot(rs: list, path: Path = None, fontsize: float = 6.5, width: float = 10,
                title: str = "Every paired contrast: 95% t intervals over seeds (filled: decided in its family)"):
    """One row per contrast of `rs`: the 95% interval thick, the point filled where the row's status is decided in
    its family (tested_rows()), dashed lines at ±M, the row's KL(q‖p) at the right. Rows of the deck's older
    `with_tests` (which carry ci_holm, the page-wide Holm level) get that interval thin and are filled where their
    page-wide Holm p < 0.05. Saved to `path` when given; returns the figure."""
    import matplotlib

    if path is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    row_h = 0.04 * fontsize
    fig, ax = plt.subplots(figsize=(width, row_h * len(rs) + 0.25 * fontsize))
    colors = {"02": "tab:blue", "11": "tab:green", "06": "tab:purple", "07": "tab:orange"}
    lim = 1.0  # rewards lie in [0, 1]: a difference beyond ±1 is off the scale
    for i, r in enumerate(rs):
        c = colors.get(r["source"], "k")
        if "ci_holm" in r:
            ax.plot([max(r["mean"] - r["ci_holm"], -lim), min(r["mean"] + r["ci_holm"], lim)], [i, i], color=c, lw=0.8, alpha=0.6)
            filled = r["p_holm"] < 0.05
        else:
            filled = r["status"] not in ("", "not decided")
        ax.plot([max(r["mean"] - r["ci95"], -lim), min(r["mean"] + r["ci95"], lim)], [i, i], color=c, lw=0.4 * fontsize)
        ax.plot(r["mean"], i, "o", color=c if filled else "white", mec=c, ms=0.8 * fontsize)
        if r["kl"] is not None:
            ax.text(1.02, i, f"{r['kl']:.1e}", va="center", fontsize=fontsize, transform=ax.get_yaxis_transform())
    ax.axvline(0, color="0.3", lw=0.8)
    if not any("ci_holm" in r for r in rs):
        for x in (-MARGIN, MARGIN):
            ax.axvline(x, color="0.5", lw=0.6, ls="--")
    ax.set_yticks(range(len(rs)), [f"{r['source']} · {r['setting']} · {r['contrast']}" for r in rs], fontsize=fontsize)
    ax.tick_params(axis="x", labelsize=fontsize)
    ax.set_ylim(len(rs) - 0.4, -1.4)  # top to bottom, room above the first row for the KL heading
    ax.set_xlim(-1, 1)
    ax.set_xlabel("paired difference in final clean reward, seeds pooled over CPU models (thick: 95%; dashed: the "
                  f"±{MARGIN:g} margin)" if not any("ci_holm" in r for r in rs) else
                  "paired difference in final clean reward (thick: 95%; thin: Holm level over all rows; filled: Holm p < 0.05)",
                  fontsize=fontsize)
    ax.text(1.02, -0.9, "KL", fontsize=fontsize, transform=ax.get_yaxis_transform())
    ax.set_title(title, fontsize=1.4 * fontsize)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def with_tests(rs: list, alpha: float = ALPHA) -> list:
    """The deck's older reading (slides/journal_club.py): adds mean, ci95, p (two-sided paired t), wins (a > b),
    p_holm and ci_holm (Holm over all rows at once) to one replicate's rows(). The page no longer takes a status
    from it: a page-wide correction is a sensitivity column only (docs/verdict.md, "The inference rule")."""
    from scipy import stats

    for r in rs:
        d = np.array(r["per_seed"])
        m, h = mean_ci95(d)
        sd = d.std(ddof=1)
        r.update(n=len(d), mean=float(m), ci95=float(h), wins=int((d > 0).sum()),
                 p=1.0 if sd == 0 else float(2 * stats.t.sf(abs(m) / (sd / math.sqrt(len(d))), len(d) - 1)))
    adj = holm([r["p"] for r in rs])
    order = np.argsort(np.argsort([r["p"] for r in rs], kind="stable"), kind="stable")
    for r, ph, k in zip(rs, adj, order):
        level = alpha / (len(rs) - k)
        sd = float(np.std(r["per_seed"], ddof=1))
        r.update(p_holm=float(ph), ci_holm=float(stats.t.ppf(1 - level / 2, r["n"] - 1) * sd / math.sqrt(r["n"])))
    return rs


def replicate_rows() -> list | None:
    """The deck's older reading: with_tests(rows(OTHER_CPU)) when figures/other_cpu/ holds a notebook's JSON."""
    return with_tests(rows(OTHER_CPU)) if any(map(replicated, REPLICATED)) else None


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The blocks of docs/verdict.md and README.md
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def made(rs: list | None = None) -> dict:
    """Everything generated, by block name: the page's (claims, ladder, forest, severity, gradient) and the
    README's (readme, readme_note), from one computation of the rows."""
    rs = tested_rows() if rs is None else rs
    slopes, g = slope_rows(), _load("10_gradient_test.json")
    grs = gradient_rows(g)
    cs = claims(rs, slopes, g)
    return {"claims": claims_table(cs), "ladder": ladder_table(), "forest": forest_table(rs),
            "severity": severity_text(rs, slopes), "gradient": gradient_text(g, grs),
            "readme": readme_table(cs=cs), "readme_note": readme_note(cs)}


PAGE_BLOCKS = ("claims", "ladder", "forest", "severity", "gradient")
README_BLOCKS = ("readme", "readme_note")


def blocks(rs=None) -> dict:
    """The generated blocks of docs/verdict.md, by name."""
    m = made(rs)
    return {k: m[k] for k in PAGE_BLOCKS}


def readme_blocks(rs=None) -> dict:
    """The generated blocks of README.md, by name."""
    m = made(rs)
    return {k: m[k] for k in README_BLOCKS}


def write_blocks(path: Path, made_: dict, kind: str = "verdict") -> None:
    """Replace each <!-- KIND:NAME --> block of the file at `path` by made_[NAME]; SystemExit when one is missing.
    (scripts/results_table.py writes its `results` blocks with it too.)"""
    text_ = path.read_text()
    for name, text in made_.items():
        text_, n = re.subn(rf"<!-- {kind}:{name} -->\n(?:.*?\n)?<!-- /{kind}:{name} -->",
                           lambda m: f"<!-- {kind}:{name} -->\n{text}\n<!-- /{kind}:{name} -->", text_, flags=re.S)
        if n != 1:
            raise SystemExit(f"{path.relative_to(REPO)} has no block {kind}:{name}")
    path.write_text(text_)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite docs/verdict.md's and README.md's blocks and the forest plot")
    args = ap.parse_args(argv)
    rs = tested_rows()
    m = made(rs)
    if not args.write:
        for name, text in m.items():
            print(f"<!-- verdict:{name} -->\n{text}\n<!-- /verdict:{name} -->\n")
        return
    write_blocks(PAGE, {k: m[k] for k in PAGE_BLOCKS})
    write_blocks(README, {k: m[k] for k in README_BLOCKS})
    forest_plot(rs, FIG / "verdict_forest.png", fontsize=8.5, width=12)
    (FIG / "verdict_forest.json").write_text(json.dumps(rs, indent=1))
    print(f"wrote {PAGE.relative_to(REPO)}, README.md's verdict blocks and figures/verdict_forest.{{png,json}} "
          f"({len(rs)} rows)")


if __name__ == "__main__":
    main()
