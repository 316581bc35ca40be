"""The verdict page's numbers and its forest plot, from the committed figures/*.json, under the page's inference rule.

    python scripts/verdict.py            # print the generated blocks of docs/verdict.md and README.md
    python scripts/verdict.py --write    # rewrite those blocks, figures/verdict_forest.{png,json}, figures/verdict.json

The rule (docs/verdict.md, "The inference rule"), as this file applies it:

1. every paired contrast the notebooks report (arm − arm in final clean reward, per seed) is one row;
2. replicates of a notebook on other CPU models (figures/replicates/<cpu>/) are pooled: a seed is one unit, the mean
   of its replicates (`scrl_min.stats.pool_replicates`), and the replicates are compared paired by seed (`scrl_min.stats.replicate_heterogeneity`);
3. the test a row needs comes from the claim's wording (`KINDS`: one-sided, non-inferiority at −0.05, TOST within
   ±0.05; two-sided for rows no claim reads), computed by `paired_test` over the seed units;
4. Holm's correction runs within the family the row's notebook pre-registered (`FAMILIES`), never over the page:
   the page-wide correction is a sensitivity column (`page_holm`);
5. a status follows (`decide`): reproduced / equivalent within ±0.05 / non-inferior / contradicted / not decided,
   with the seeds that would decide it (`stated_seeds`).

`tested_rows()` makes the rows, `claims()` the claims table, `holm_interval` a row's Holm-level interval (the
deck's). Notebook 10's gradient tests (`gradient_rows`) are its pre-registered primary (a family of one) and its three
secondaries (one family), read from its JSON's "primary" and "secondary"; its placebo and gap against KL are
descriptive. Notebook 13 (the confirmatory run on fresh seeds, `confirmatory_rows`) is tested in its own
pre-registered families (A at lr 0.5, B at the gentler lr; the AUC primary, the final clean reward secondary), and
where it tests a claim its primary decides the claims-table row. tests/test_verdict.py checks the page and the README against this file, and the rule's pieces against
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
from scrl_min.stats import ALPHA, MARGIN  # noqa: E402  (the rule's margin and family-wise level, defined once)
from scrl_min.stats import holm_interval as rule_interval, pool_replicates  # noqa: E402
from scrl_min.stats import paired_test as rule_test, replicate_heterogeneity as heterogeneity_p  # noqa: E402
from scrl_min.stats import effect_beyond_null, seeds_to_decide, wins  # noqa: E402

FIG = REPO / "figures"
PAGE = REPO / "docs" / "verdict.md"
README = REPO / "README.md"
REPLICATES = FIG / "replicates"  # <cpu>/: the same notebooks, code and seeds run on another CPU model (a replicate)

POWER = 0.80  # the power at which `seeds_to_decide` counts the seeds that would decide a claim

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
    "07 P": ("notebook 07's redesign: its four pre-registered hypotheses P1-P4 on the AUC", False),
    "07 P final": ("notebook 07's redesign on the final clean reward (its secondary family)", False),
    "13 A": ("notebook 13's family A (lr 0.5, fresh seeds): its seven hypotheses on the AUC", False),
    "13 A final": ("notebook 13's family A on the final clean reward (its secondary family)", False),
    "13 B": ("notebook 13's family B (the gentler lr): its four hypotheses on the AUC", False),
    "13 B final": ("notebook 13's family B on the final clean reward (its secondary family)", False),
    "10 primary": ("notebook 10's pre-registered primary contrast, a family of one", False),
    "10 secondaries": ("notebook 10's three pre-registered secondaries", False),
}

# The test each contrast of notebook 02's family needs, from the claim it answers (docs/verdict.md's claims table)
KIND_02 = {"sc − mis": "noninferior", "sc − tis": "noninferior", "sc_mis − mis": "greater", "sc − plain": "greater",
           "plain − bf16": "less"}

# Notebook 10's pre-registered tests (its section 3, committed before the run): the primary contrast alone in its
# family, the three secondaries with Holm among themselves. Per test: its key in figures/10_gradient_test.json
# ("primary", or the S1-S3 prefix of a "secondary" name), family, the estimator SC is compared with, the row of the
# notebook's power computation ("prediction" → "power"), and the claim it answers (formatted with the parameters).
GRADIENT_TESTS = (
    ("primary", "10 primary", "MIS", "primary · SC − MIS",
     "SC's one-update gradient is closer to the on-policy gradient than MIS's (MSE, a variance effect, not bias; the "
     "pre-registered primary)"),
    ("S1", "10 secondaries", "IS", "primary · SC − IS",
     "… closer than exact token IS's (the same cell; secondary S1)"),
    ("S2", "10 secondaries", "MIS", "secondary · SC − MIS",
     "… closer than MIS's at a real format, {secondary_sampler} (secondary S2)"),
    ("S3", "10 secondaries", "MIS", "after · SC − MIS",
     "… closer than MIS's after {ref_steps} updates of training (secondary S3)"),
)

# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The rule's pieces (tests/test_verdict.py checks each against an independent computation)
# ═════════════════════════════════════════════════════════════════════════════════════════════════
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
    Bonferroni-combined; None for two-sided). The one-sided, non-inferiority and TOST p are scrl_min.stats.paired_test's
    (the notebooks' rule; with zero spread its p is 0 or 1, never ½). Raises ValueError for fewer than 2 seeds or an
    unknown kind."""
    from scipy import stats

    d = np.asarray(units, dtype=float)
    if kind not in KINDS:
        raise ValueError(f"unknown test {kind!r}; choose one of {list(KINDS)}")
    n = len(d)
    if n < 2:
        raise ValueError(f"a paired t test needs at least 2 seeds, got {n}")
    m, sd, df = float(d.mean()), float(d.std(ddof=1)), n - 1
    se = sd / math.sqrt(n)
    if kind == "two-sided":  # rows no claim reads: described, not decided
        z0 = m / se if se > 0 else (math.copysign(math.inf, m) if m != 0 else 0.0)
        p, opp = min(1.0, 2 * float(stats.t.sf(abs(z0), df))), None
    else:  # the claim's test and its opposite: the rule in scrl_min (stats.paired_test), defined once
        p, opp = rule_test(d, kind, margin), rule_test(d, kind, margin, opposite=True)
    return dict(n=n, mean=m, sd=sd, ci95=float(stats.t.ppf(0.975, df) * se), p=float(p),
                p_opposite=None if opp is None else float(opp))


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


def apply_holm(rs: list, alpha: float = ALPHA) -> list:
    """Holm within each row's family (rows with family None are descriptive: no correction, no status). Adds
    p_holm, p_opposite_holm, m (the family's size), status and seeds (`stated_seeds`) to every row; a row that
    carries its notebook's own Holm p (`p_holm_given`, notebook 06) keeps it. Returns rs."""
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
        r["seeds"] = stated_seeds(r, rs, alpha) if r["status"] == "not decided" else None
    return rs


def stated_seeds(r: dict, rs: list, alpha: float = ALPHA) -> dict:
    """The seeds (batches, for notebook 10) that would decide an undecided row: `scrl_min.seeds_to_decide` at 80%
    power, at the row's Holm level (the step it is tested at; α/m for a row whose Holm p its notebook gave), with the
    row's per-seed sd, at its stated effect: the row's `stated_effect` (one value or a range, with `effect_label`)
    where it has one (notebook 10: the predicted gap), else the margin beyond the null's edge (a true mean of 0 for
    an equivalence row) for rows in reward units, and the observed mean for notebook 11's slopes, which declared no
    effect (an optimistic count). Returns {n: [counts, None where no count reaches the power], label, level}."""
    level = alpha / r["m"] if "p_holm_given" in r else holm_interval(r, rs, alpha)[2]
    if "stated_effect" in r:
        effects, label = r["stated_effect"], r["effect_label"]
    elif r["family"].startswith("11 slopes"):
        effects = [effect_beyond_null(r["mean"], r["kind"])]
        label = f"if the true slope were the observed {fmt(r['mean'])}, no effect having been declared"
    else:
        effects = [MARGIN]
        label = (f"if the true difference were 0 (TOST within ±{MARGIN:g})" if r["kind"] == "equivalent"
                 else f"at a {MARGIN:g} effect beyond {THRESHOLD[r['kind']]}")
    tost = MARGIN if r["kind"] == "equivalent" else None
    return dict(n=[seeds_to_decide(r["sd"], e, level, POWER, equivalence_margin=tost) for e in effects],
                label=label, level=level)


def holm_interval(r: dict, rs: list, alpha: float = ALPHA) -> tuple:
    """`scrl_min.stats.holm_interval` of tested row `r` (after `apply_holm`) among the rows of `rs` in r's family
    (ties in page order): (lower, upper, a). Raises ValueError for a descriptive row (no family), a row whose Holm p
    its notebook gave (notebook 06), or a row that is not in `rs`."""
    if r.get("family") is None or "p_holm_given" in r:
        raise ValueError(f"{r.get('contrast')!r} has no Holm step of this page's: family {r.get('family')!r}")
    fam = [x for x in rs if x["family"] == r["family"]]
    i = next((j for j, x in enumerate(fam) if x is r), None)
    if i is None:
        raise ValueError(f"{r.get('contrast')!r} is not among the rows of its family {r['family']!r}")
    return rule_interval([x["p"] for x in fam], i, r["mean"], r["sd"], r["n"], alpha)


def page_holm(rs: list) -> list:
    """The sensitivity column: Holm over every row of `rs` at once (each row's own test's p); adds p_page."""
    for r, ph in zip(rs, holm([r["p"] for r in rs])):
        r["p_page"] = float(ph)
    return rs


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The rows: every paired contrast of the committed JSON, per replicate
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def _load(name, fig: Path = FIG):
    """figures/NAME, or fig/NAME where `fig` (a folder of figures/replicates/) has that file."""
    path = fig / name if (fig / name).exists() else FIG / name
    return json.loads(path.read_text()) if path.exists() else None


def _row(source, setting, name, diffs, kl=None):
    return dict(source=source, setting=setting, contrast=name, per_seed=[float(d) for d in diffs], kl=kl)


def rows(fig: Path = FIG) -> list:
    """Every paired contrast of one replicate's JSON, as (source, setting, contrast, per-seed differences, KL), in
    page order: the headline (02), the severity ladder (11), the regime map (06), staleness (07). With fig a
    folder of figures/replicates/, the notebooks that folder holds come from there (that CPU model's runs), the
    others from figures/. `tested_rows` pools these over replicates."""
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
    return out


REPLICATED = {"02": "02_fp8_arms.json", "11": "11_severity_slope.json"}  # notebooks figures/replicates/* may hold


def replicate_folders(source: str) -> list:
    """The folders of figures/replicates/ that hold notebook `source`'s JSON (one per other CPU model), by name."""
    if source not in REPLICATED or not REPLICATES.is_dir():
        return []
    return [d for d in sorted(REPLICATES.iterdir()) if (d / REPLICATED[source]).is_file()]


def replicate_names(source: str) -> list:
    """How the page names each of replicate_dirs(source): "committed run" (figures/), then each folder's name (the
    CPU model, e.g. "xeon_amx")."""
    return ["committed run"] + [d.name for d in replicate_folders(source)]


def per_replicate(r, d: int = 3) -> str:
    """A tested row's per-replicate mean ± 95%, each named by where it ran (`replicate_names`), in the order pooled."""
    names = replicate_names(r["source"])
    if len(names) != r["k"]:
        names = [f"replicate {i + 1}" for i in range(r["k"])]
    return ", ".join(f"{n} {fmt(m, d=d)} ± {h:.{d}f}" for n, (m, h) in zip(names, r["replicate_means"]))


def replicate_dirs(source: str) -> list:
    """The folders that hold replicates of notebook `source`'s runs: figures/ (the committed notebook's), then each
    folder of figures/replicates/ that has them."""
    return [FIG] + replicate_folders(source)


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


# Notebook 13's JSON per family (its pre-registration, committed before its runs), and per metric the JSON's key
CONFIRMATORY = (("13_confirmatory.json", "13 A", "lr"), ("13_gentle_optimizer.json", "13 B", "gentle_lr"))
CONFIRMATORY_METRICS = (("auc", "primary (AUC)", "", "AUC"),
                        ("final", "secondary (final clean reward)", " final", "final clean reward"))


def _holm_as_the_notebook(fam: list, given: list, where: str) -> list:
    """Holm within `fam` (`apply_holm`), checked against the Holm p its notebook saved (`given`, in the same order);
    returns fam. Raises ValueError naming `where` when the counts differ or a p differs by more than 1e-9."""
    apply_holm(fam)
    if len(given) != len(fam) or any(abs(r["p_holm"] - g) > 1e-9 for r, g in zip(fam, given)):
        raise ValueError(f"{where}: the notebook's Holm p differs from the page's (notebook {given}, page "
                         f"{[r['p_holm'] for r in fam]})")
    return fam


def confirmatory_rows(fig: Path = FIG) -> list:
    """Notebook 13's pre-registered families under the rule: for family A (lr 0.5) and family B (the gentler lr),
    and for each metric (the AUC, its primary; the final clean reward, its secondary family), every declared
    hypothesis (a, b, test) as a tested row over the seeds' paired differences a − b (one run per seed and arm,
    so k = 1: nothing to pool), Holm within that family alone. The notebook's own per-CPU-kind heterogeneity p
    is carried for the flag. Empty when the notebook's JSON is missing. Raises ValueError when a Holm p the
    notebook saved differs from this page's by more than 1e-9 (the page and the notebook would disagree)."""
    out = []
    for name, family, lr_key in CONFIRMATORY:
        d = _load(name, fig)
        if not d:
            continue
        par = d["parameters"]
        for metric, key, suffix, label in CONFIRMATORY_METRICS:
            fam = []
            for (a, b, kind), given in zip(d["hypotheses"], d["families"][key], strict=True):
                diffs = (np.asarray(d["per_arm"][a][f"{metric}_per_seed"], float)
                         - np.asarray(d["per_arm"][b][f"{metric}_per_seed"], float))
                r = tested("13", f"FP8 + σ {par['noise_std']:g}, raw, lr {par[lr_key]:g}, {label}", f"{a} − {b}",
                           [diffs], None, family + suffix, kind)
                r.update(metric=label, het_p=given.get("het_p"), p_holm_notebook=given["p_holm"])
                fam.append(r)
            out.extend(_holm_as_the_notebook(fam, [r["p_holm_notebook"] for r in fam], f"{name}, {key}"))
    return out


STALENESS_PAIRS = (("sc_tis", "tis"), ("sc_mis", "mis"))  # notebook 07's SC + IS − IS, per IS kind
STALENESS_METRICS = (("auc", "primary (auc)", "", "AUC"), ("final", "secondary: final reward", " final", "final clean reward"))


def staleness_rows(fig: Path = FIG) -> list:
    """Notebook 07's redesign (staleness where the optimizer is stable; its pre-registration and amendment 1) under the
    rule: per schedule, SC + IS − IS per seed, the mean over its lags and IS kinds of the paired differences, tested
    one-sided (P1, P3: > 0) and for non-inferiority at −M (P2, P4), Holm over the four; the AUC its primary family,
    the final clean reward its secondary. Empty when the JSON is the first design's or missing. Raises ValueError
    when a Holm p the notebook saved differs from this page's by more than 1e-9."""
    d = _load("07_staleness.json", fig)
    if not d or "runs" not in d:
        return []
    par, runs = d["parameters"], d["runs"]
    pairs = [(a, b) for a, b in STALENESS_PAIRS if a in par["arms"] and b in par["arms"]]
    out = []
    for metric, key, suffix, label in STALENESS_METRICS:
        fam = []
        for sched in par["schedules"]:
            units = np.mean([np.subtract(runs[f"{sched} / s={s} / {a}"][metric], runs[f"{sched} / s={s} / {b}"][metric])
                             for s in par["staleness"] for a, b in pairs], axis=0)  # (seeds,)
            setting = (f"{sched} schedule, staleness {', '.join(map(str, par['staleness']))}, "
                       f"{par['sampler_precision']} sampler, lr {par['lr']:g}, {label}")
            for kind in ("greater", "noninferior"):
                fam.append(tested("07", setting, "SC + IS − IS", [units], None, "07 P" + suffix, kind))
        out.extend(_holm_as_the_notebook(fam, [r["p_holm"] for r in d["families"][key]], f"07_staleness.json, {key}"))
    return out


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


def _gradient_contrasts(g) -> list:
    """Notebook 10's pre-registered contrasts in figures/10_gradient_test.json, in GRADIENT_TESTS' order: (key, the
    notebook's name, its dict). Raises KeyError when the JSON lacks one (a run of another design)."""
    sec = {name.split(" · ")[0]: (name, c) for name, c in g["secondary"].items()}
    p = g["parameters"]
    return [(key, f"primary · SC − MIS, {p['primary_sampler']}, start", g["primary"]) if key == "primary"
            else (key, *sec[key]) for key, *_ in GRADIENT_TESTS]


def gradient_rows(g) -> list:
    """Notebook 10's pre-registered tests under the rule: the primary contrast (a family of one) and the three
    secondaries (Holm among themselves), each one-sided in SC's favour (the claim: SC's MSE is lower, D < 0; the
    rule's test for "SC beats X", which replaces the notebook's two-sided one, the families staying the
    notebook's). The statistic is the notebook's: D = mean of D_b = ‖ĝ_SC‖² − ‖ĝ_X‖² − 2(ĝ_SC − ĝ_X)·ĝ*_ref over n
    batches, in ‖g*‖² units, with standard error √(sd_D² / n + ref_term_sd²) (its t interval widened by the
    reference's term), t with n − 1 df. Each row: key, label, family, kind, mean (D), ci95 (the notebook's D_ci95),
    sd (sd_D, per batch), n (batches), p and p_opposite (one-sided), p_notebook (its two-sided p) and
    p_holm_notebook, rel_gap, rel_ci95, predicted (the predicted relative gap, 2-3 × KL), kl, other (the estimator
    SC is compared with), power (the notebook's power computation for it), decision (the primary's, by the
    notebook's decision rule); then apply_holm's p_holm, status and seeds (batches). [] when notebook 10 has not
    run."""
    from scipy.stats import t as t_dist

    out = []
    for (key, label, c), (_, family, other, power_key, _) in zip(_gradient_contrasts(g), GRADIENT_TESTS):
        n = c["n"]
        t = c["D"] / math.sqrt(c["sd_D"] ** 2 / n + c["ref_term_sd"] ** 2)
        out.append(dict(key=key, label=label, family=family, kind="less", mean=c["D"], ci95=c["D_ci95"], sd=c["sd_D"],
                        n=n, p=float(t_dist.sf(-t, n - 1)), p_opposite=float(t_dist.sf(t, n - 1)), p_notebook=c["p"],
                        p_holm_notebook=c.get("p_holm"), rel_gap=c["rel_gap"], rel_ci95=c["rel_ci95"],
                        predicted=list(c["predicted_rel_gap"]), kl=c["kl"], other=other,
                        power=g.get("prediction", {}).get("power", {}).get(power_key), decision=c.get("decision"),
                        robust=c.get("robust"),
                        stated_effect=[-gap * c["mse_b"] for gap in c["predicted_rel_gap"]],
                        effect_label=f"at the predicted gap, {-c['predicted_rel_gap'][0]:.1%} to "
                                     f"{-c['predicted_rel_gap'][1]:.1%} of MSE_{other} (2-3 × KL)"))
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


THRESHOLD = {"greater": "0", "less": "0", "noninferior": f"−{MARGIN:g}", "equivalent": f"±{MARGIN:g}"}


def _count(seeds: dict) -> str | None:
    """'N' or 'N1-N2' from `stated_seeds`' counts ('N1 to more than 100,000' where one does not reach the power);
    None when no count does."""
    ns = [n for n in seeds["n"] if n is not None]
    if not ns:
        return None
    if len(ns) < len(seeds["n"]):
        return f"{min(ns):,} to more than 100,000"
    return f"{ns[0]:,}" if len(set(ns)) == 1 else f"{min(ns):,}-{max(ns):,}"


def _wrong_side(r) -> bool:
    """The estimate lies on the far side of the claim's threshold (for TOST: outside the margin)."""
    return effect_beyond_null(r["mean"], r["kind"]) <= 0


def _powered(r) -> bool:
    """The row ran at least the units its stated effect needs (every count of a range)."""
    return all(n is not None and n <= r["n"] for n in r["seeds"]["n"])


def _seeds_text(r, unit="seeds") -> str:
    """The not-decided reason: where the estimate lies, and the seeds that would decide the row at its stated
    effect (`stated_seeds`)."""
    n, sd = _count(r["seeds"]), f"sd over {unit} {r['sd']:.3f}"
    at = f"(80% power at its Holm level {r['seeds']['level']:.3g}, {sd})"
    if n is None:
        return f"no number of {unit} at this estimate (it lies on the wrong side of {THRESHOLD[r['kind']]}; {sd})"
    if _wrong_side(r):
        return (f"its estimate lies on the wrong side of {THRESHOLD[r['kind']]}; {n} {unit} would decide it "
                f"{r['seeds']['label']} {at}")
    if _powered(r):
        return f"its {r['n']} {unit} had 80% power {r['seeds']['label']} ({n} would do) {at}"
    return f"{n} {unit} would decide it {r['seeds']['label']} {at}"


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
    n = None if r["seeds"] is None else _count(r["seeds"])
    if st != "not decided":
        text = f"**{st}**"
    elif n is None or _wrong_side(r):
        text = f"not decided (estimate on the wrong side of {THRESHOLD[r['kind']]})"
    elif _powered(r):
        text = "not decided (powered for the stated effect)"
    else:
        text = f"not decided ({n} {unit} would)"
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
        s += f"; per CPU model: {per_replicate(r)}; heterogeneity p {p_text(r['het_p'])}"
    if "p_page" in r:
        s += f"; page-wide Holm p {p_text(r['p_page'])} (sensitivity)"
    return s


def _where(r, name: str) -> str:
    k = "" if r["k"] == 1 else f" × {r['k']} CPU models"
    return f"{name}, {r['n']} seeds{k}"


def claims(rs: list | None = None, slopes: list | None = None, g=None, c13: list | None = None,
           st07: list | None = None) -> list:
    """Each claim of the article as a dict: claim, where, number, status, short (mean ± 95%), short_status, and
    the tested row it reads (row; None for the gradient summary and the top-k claim). rs: tested_rows();
    slopes: slope_rows(); g: notebook 10's JSON (read from figures/ when None); c13: confirmatory_rows(); st07:
    staleness_rows() (notebook 07's redesign: its P1-P4 give the staleness rows when it has run).
    Where notebook 13 (the confirmatory run on fresh seeds) tests a claim, its primary family decides the row,
    with its secondary family's result and notebook 02's earlier run in the number; elsewhere notebook 02 does."""
    rs = tested_rows() if rs is None else rs
    slopes = slope_rows() if slopes is None else slopes
    g = _load("10_gradient_test.json") if g is None else g
    c13 = confirmatory_rows() if c13 is None else c13
    st07 = staleness_rows() if st07 is None else st07
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

    def find13(family, contrast, kind):
        return next((r for r in c13 if (r["family"], r["contrast"], r["kind"]) == (family, contrast, kind)), None)

    def add_auc(claim, r, sec, earlier=None):
        """A claim decided on the AUC by a pre-registered primary row `r` (notebook 13 or 07's redesign), quoting its
        secondary-family row `sec` (final clean reward) and notebook 02's `earlier` row."""
        note = (f"; the final clean reward (its secondary family): {fmt(sec['mean'])} ± {sec['ci95']:.3f}, "
                f"Holm p {p_text(sec['p_holm'])}, {sec['status']}" if sec else "")
        if earlier is not None:
            note += (f"; notebook 02's earlier run (final clean reward): {fmt(earlier['mean'], d=2)} ± "
                     f"{earlier['ci95']:.2f}, {earlier['status']}")
        fresh = " fresh" if r["source"] in ("13", "07") else ""  # both pre-registered on seeds no run had used
        out.append(dict(claim=claim, where=_where(r, f"{r['source']} · {r['setting'].rsplit(',', 1)[0]}").replace(
                            " seeds", f"{fresh} seeds"),
                        number=number_text(r, "AUC ") + note, status=status_text(r),
                        short=f"{fmt(r['mean'], d=2)} ± {r['ci95']:.2f} AUC ({r['n']}{fresh} seeds)",
                        short_status=short_status(r), row=r, earlier=earlier))

    def add13(claim, family, contrast, kind, earlier=None):
        """The claim from notebook 13's `family` (primary, the AUC), its secondary and notebook 02's `earlier` row."""
        add_auc(claim, find13(family, contrast, kind), find13(f"{family} final", contrast, kind), earlier)

    add13("A mismatched sampler costs plain training reward (plain < no-mismatch reference)", "13 A", "plain − bf16",
          "less", _find(rs, "02", "plain − bf16"))
    add("… also under FP8 alone (a real format, no noise)", "11 · fp8 rung − 02's bf16, raw",
        _find(rs, "11", "plain − bf16 (02's)", "fp8, "))
    add13("Score centering recovers it (SC > plain)", "13 A", "sc − plain", "greater", _find(rs, "02", "sc − plain"))
    add13("SC matches TIS (equivalent within ±0.05)", "13 A", "sc − tis", "equivalent")
    add13("SC matches MIS (equivalent within ±0.05)", "13 A", "sc − mis", "equivalent")
    add13("SC matches or beats TIS (non-inferior at −0.05)", "13 A", "sc − tis", "noninferior",
          _find(rs, "02", "sc − tis"))
    add13("SC matches or beats MIS (non-inferior at −0.05)", "13 A", "sc − mis", "noninferior",
          _find(rs, "02", "sc − mis"))
    add("SC + IS beats IS (SC+MIS > MIS)", head, _find(rs, "02", "sc_mis − mis"),
        "; where every ratio and ρ are in the band, SC+MIS is MIS exactly (docs/method.md)")
    add13("SC is more than a group baseline (SC > the same sampler with group-centred advantages, no correction)", "13 A", "sc − baseline",
          "greater")
    add13("With a gentler optimizer the mismatch still costs plain (plain < bf16)", "13 B", "plain − bf16", "less")
    add13("… and SC still recovers it (SC > plain)", "13 B", "sc − plain", "greater")
    add13("… and SC matches MIS (equivalent within ±0.05)", "13 B", "sc − mis", "equivalent")
    add13("… and SC matches or beats MIS (non-inferior at −0.05)", "13 B", "sc − mis", "noninferior")
    for r in slopes:
        name = r["contrast"].replace(" slope", "")
        out.append(dict(claim=f"SC's edge grows with the mismatch ({name} against log10 KL)",
                        where=_where(r, "11 · severity ladder, each seed's own slope"),
                        number=number_text(r, "slope ", " per tenfold KL"), status=status_text(r),
                        short=f"slope {fmt(r['mean'], d=2)} ± {r['ci95']:.2f} per tenfold KL",
                        short_status=short_status(r), row=r))
    out.extend(gradient_claims(g))
    for sched, which in (("refresh", "the sampler refreshed every s + 1 steps (the article's schedule)"),
                         ("constant", "a constant lag of s steps")):  # notebook 07's redesign: P1-P4
        for kind, wording in (("greater", "Centering helps IS under staleness (SC + IS > IS, on average over lags and IS kinds)"),
                              ("noninferior", "… and costs IS nothing (SC + IS non-inferior to IS at −0.05, on average over lags "
                                              "and IS kinds)")):
            r, sec = (next((x for x in st07 if x["family"] == fam and x["kind"] == kind
                            and x["setting"].startswith(sched)), None) for fam in ("07 P", "07 P final"))
            if r is not None:
                add_auc(f"{wording}; {which}", r, sec)
    out.append(length_drift_claim(_load("14_length_drift_runs.json"), _load("14_length_drift_iterated.json")))
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


def length_drift_claim(ld, iterated) -> dict:
    """Claim C7 from notebook 14: its second design (figures/14_length_drift_iterated.json: the exact expected update
    iterated, its amendment 2) decides the row under the notebook's declared rule (two-sided: reproduced above 0,
    contradicted below), plain − SC in the change of the trainer's mean log p(EOS) over fixed held-out prefixes; the
    first design's status (figures/14_length_drift_runs.json, `ld`, sampled training runs) is noted. Where plain's
    push takes either sign with the seed's noise draw, no number of seeds decides a signed claim (the page's rule 4
    needs a direction the design fixes): the row says so and gives SC's share of plain's |Δ log p(EOS)|, exploratory."""
    claim = "A mismatched sampler drifts the completion length, and SC removes it (plain − SC in Δ log p(EOS))"
    p, pred, par = iterated["primary"], iterated["prediction"], iterated["parameters"]
    where = (f"14 · the drift alone (the expected update iterated, no sampled tokens), {par['sampler_format']} + σ "
             f"{par['sampler_noise']:g}, lr E[A] = {par['lr'] * par['mean_advantage']:g}, {par['steps']} updates")
    first = "" if not ld else f"; the first design (sampled training runs): {ld['primary'].get('status', '–')}"
    number = (f"{fmt(p['mean'])} ± {p['ci95']:.3f} nats ({p['n']} seeds; predicted {fmt(pred['delta'])}, "
              f"no-drift band ± {pred['no_drift_half_band']:.3f}){first}")
    short = f"{fmt(p['mean'], d=2)} ± {p['ci95']:.2f} nats ({p['n']} seeds, iterated drift)"
    status = p["status"]
    arms = iterated.get("per_arm", {})
    plain_d = np.array(arms.get("plain", {}).get("d_logp_eos_per_seed", []))
    sc_d = np.array(arms.get("sc", {}).get("d_logp_eos_per_seed", []))
    if status.startswith("not decided") and len(plain_d) and plain_d.min() < 0 < plain_d.max() and len(sc_d):
        share, smaller = float(np.abs(sc_d).sum() / np.abs(plain_d).sum()), int((np.abs(sc_d) < np.abs(plain_d)).sum())
        status = (f"not decided: the sign of plain's push on log p(EOS) follows each seed's noise draw "
                  f"({plain_d.min():+.2f} to {plain_d.max():+.2f} nats), so this design cannot decide a signed claim; "
                  f"exploratory: SC's |Δ log p(EOS)| is {share:.1%} of plain's, smaller at {smaller} of {len(sc_d)} seeds")
        return dict(claim=claim, where=where, number=number, status=status, short=short, row=None,
                    short_status=f"not decided (its sign follows the noise draw); SC leaves {share:.1%} of plain's, exploratory")
    if p["mean"] < 0 and status.startswith("not decided"):  # more seeds at this mean would contradict the claim
        status = status.replace(" would decide it", " would decide it, as contradicted,")
        status += "; the mean is on the side the claim does not predict (notebook 14's two-sided rule)"
    short_status = status.split("; the mean is on the side")[0].replace(", at the observed sd", "")  # the page has it
    return dict(claim=claim, where=where, number=number, status=status, short=short, short_status=short_status, row=None)


def _pct(x, signed=True) -> str:
    return f"{x:+.2%}" if signed else f"{x:.2%}"


def _gradient_where(g, r) -> str:
    p = g["parameters"]
    sampler = p["secondary_sampler"] if r["key"] == "S2" else p["primary_sampler"]
    policy = f"after {p['ref_steps']} updates" if r["key"] == "S3" else "start policy"
    return f"10 · {sampler}, {policy}, raw, k = {p['k']}, {r['n']} batches"


def _gradient_number(r) -> str:
    """A gradient row's numbers: D ± 95% in ‖g*‖², the relative gap and the predicted one, the rule's one-sided p
    and Holm p in its family beside the notebook's two-sided ones, the power the notebook computed for it."""
    b = r["other"]
    s = (f"MSE_SC − MSE_{b} {fmt(r['mean'])} ± {r['ci95']:.3f} ‖g*‖² ({r['n']} batches); relative gap "
         f"{_pct(r['rel_gap'])} ± {_pct(r['rel_ci95'], False)} of MSE_{b}, predicted {r['predicted'][0]:.1%} to "
         f"{r['predicted'][1]:.1%} (2-3 × KL {r['kl']:.4f}); {KINDS[r['kind']]} p {p_text(r['p'])}, Holm p "
         f"{p_text(r['p_holm'])} in {FAMILIES[r['family']][0]} (the notebook's two-sided p {p_text(r['p_notebook'])}"
         + ("" if r["p_holm_notebook"] is None else f", Holm p {p_text(r['p_holm_notebook'])}") + ")")
    if r["power"]:
        s += f"; pre-registered power {r['power']['power_2kl']:.2f} at 2 × KL"
    if r["decision"]:
        s += f"; the notebook's decision rule: {r['decision']}"
    if r.get("robust"):  # post hoc, descriptive: is the mean carried by a few batches?
        rb = r["robust"]
        s += (f"; robust check (post hoc, descriptive): median {_pct(rb['median_rel'])}, 20% trimmed mean "
              f"{_pct(rb['trimmed_rel'])} ± {_pct(rb['trimmed_rel_ci95'], False)} of MSE_{b} (Yuen), "
              f"{rb['outliers']['beyond_3mad']} of {r['n']} batches beyond 3 MAD of the median")
    return s


def _placebo(g, key: str = "placebo") -> tuple:
    """Notebook 10's placebo (A = 1), the pre-registered cells (key "placebo") or the post hoc ones
    ("placebo_post_hoc": further, independent batches per sampler, added after the run): the samplers by KL, each
    with its {estimator: (value, ci95)} of ‖E ĝ(1)‖² / ‖g*‖², and for each estimator the samplers where its 95%
    interval excludes 0."""
    pl = sorted(g[key].items(), key=lambda kv: kv[1]["kl"])
    vals = [(name, P, {k.split(" · ")[0]: (v["value"], v["ci95"]) for k, v in P["stats"].items() if k.endswith("A = 1")})
            for name, P in pl]
    ests = [e for e in g["estimator_labels"] if any(e in v for _, _, v in vals)]
    excl = {e: [name for name, _, v in vals if e in v and abs(v[e][0]) > v[e][1]] for e in ests}
    return vals, excl


def _estimator(g, e) -> str:
    return {"sc": "SC"}.get(e, g["estimator_labels"][e].split(" (")[0])


def _placebo_text(g, key: str = "placebo") -> str:
    vals, excl = _placebo(g, key)
    none = [f"{_estimator(g, e)}'s" for e, v in excl.items() if not v]
    some = [f"{_estimator(g, e)}'s at {', '.join(v)}" for e, v in excl.items() if v]
    none_ = ", ".join(none[:-1]) + f" and {none[-1]}" if len(none) > 1 else "".join(none)
    return "the 95% interval excludes 0: " + "; ".join(some + ([f"{none_} at no sampler"] if none else []))


def _cell(name: str) -> str:
    """A cell's name as notebook 10's gap_against_kl writes it, 'fp8 (placebo cell)', without its parentheses."""
    return name.replace(" (", ", ").rstrip(")")


def _gap_cells(g) -> list:
    """The descriptive gap against KL: (cell, its SC − MIS contrast) sorted by the cell's KL."""
    return sorted(((name, c["sc − mis"]) for name, c in g["gap_against_kl"].items() if "sc − mis" in c),
                  key=lambda x: x[1]["kl"])


def gradient_claims(g, grs: list | None = None) -> list:
    """The gradient-level claims (notebook 10), as claims() writes them: the pre-registered primary (SC's update
    closer to the on-policy gradient than MIS's, a family of one) and the three secondaries (Holm among
    themselves), each with its status under the rule (`gradient_rows`; row: the tested row, which has no "k":
    batches, not seeds × CPU models); then the placebo and the gap against KL, descriptive (no test declared, no
    status, row None). No cell counts."""
    grs = gradient_rows(g) if grs is None else grs
    p = g["parameters"]
    out = []
    for r, (_, _, _, _, claim) in zip(grs, GRADIENT_TESTS):
        out.append(dict(claim=claim.format(**p), where=_gradient_where(g, r), number=_gradient_number(r),
                        status=status_text(r, "batches"), short=f"{_pct(r['rel_gap'])} ± {_pct(r['rel_ci95'], False)} of "
                        f"MSE_{r['other']} ({r['n']} batches)", short_status=short_status(r, "batches"), row=r))
    vals, _ = _placebo(g)
    per = "; ".join(f"{name} (KL {P['kl']:.1e}, {P['n']} batches): " + ", ".join(
        f"{_estimator(g, e)} {fmt(v, d=1)} ± {h:.1f}" for e, (v, h) in st.items()) for name, P, st in vals)
    top_name, top, top_st = vals[-1]
    short = (f"at {top_name}: plain {fmt(top_st['plain'][0], d=0)} ± {top_st['plain'][1]:.0f}, SC "
             f"{fmt(top_st['sc'][0], d=0)} ± {top_st['sc'][1]:.0f} ‖g*‖² ({top['n']} batches)")
    number = (f"pre-registered, ‖E ĝ(A = 1)‖² / ‖g*‖², 95% jackknife over {p['groups']} groups: {per}; "
              f"{_placebo_text(g)}")
    if g.get("placebo_post_hoc"):
        ph, _ = _placebo(g, "placebo_post_hoc")
        number += ("; post hoc (not pre-registered), further independent batches: " + "; ".join(
            f"{name} (KL {P['kl']:.1e}, {P['n']} batches): " + ", ".join(
                f"{_estimator(g, e)} {fmt(v, d=1)} ± {h:.1f}" for e, (v, h) in st.items()) for name, P, st in ph)
            + f"; {_placebo_text(g, 'placebo_post_hoc')}")
        name, P, st = ph[-1]
        short += (f"; post hoc {P['n']} batches: plain {fmt(st['plain'][0], d=0)} ± {st['plain'][1]:.0f}, SC "
                  f"{fmt(st['sc'][0], d=0)} ± {st['sc'][1]:.0f}")
    out.append(dict(claim="Plain's update carries a drift that SC removes (placebo: A = 1, no signal)",
                    where=f"10 · placebo, {len(vals) - 1} samplers and the on-policy row", number=number,
                    status="descriptive: the notebook declared no test of the placebo", short=short,
                    short_status="descriptive", row=None))
    cells = _gap_cells(g)
    out.append(dict(claim="SC's edge at the gradient grows with the mismatch (relative MSE gap SC − MIS against KL)",
                    where=f"10 · {len(cells)} cells at the start policy",
                    number="(MSE_SC − MSE_MIS)/MSE_MIS by cell, in order of KL: " + "; ".join(
                        f"{_cell(name)} (KL {c['kl']:.1e}, {c['n']} batches) {_pct(c['rel_gap'])} ± {_pct(c['rel_ci95'], False)}"
                        f" (predicted {c['predicted_rel_gap'][0]:.1%} to {c['predicted_rel_gap'][1]:.1%})"
                        for name, c in cells),
                    status="descriptive: the notebook declared no test of the trend",
                    short=f"{_pct(cells[0][1]['rel_gap'])} at KL {cells[0][1]['kl']:.1e} to {_pct(cells[-1][1]['rel_gap'])} "
                          f"at KL {cells[-1][1]['kl']:.1e}",
                    short_status="descriptive", row=None))
    return out


def claims_table(cs: list | None = None) -> str:
    cs = claims() if cs is None else cs
    lines = ["| the article's claim | tested where | the project's number (paired; final clean reward unless named) | status |",
             "|---|---|---|---|"]
    lines += [f"| {c['claim']} | {c['where']} | {c['number']} | {c['status']} |" for c in cs]
    return "\n".join(lines)


# The README's short table: these claims (the full table is the page's); a claim is chosen by how its text begins
README_CLAIMS = ("A mismatched sampler costs plain training reward", "Score centering recovers it",
                 "SC matches TIS (", "SC matches MIS (", "SC + IS beats IS", "SC is more than a group baseline",
                 "SC's edge grows with the mismatch (sc − plain", "SC's one-update gradient is closer",
                 "… and costs IS nothing (SC + IS non-inferior to IS at −0.05, on average over lags and IS kinds); the "
                 "sampler refreshed",
                 "A mismatched sampler drifts the completion length")


README_REGIME = ("G1", "G2")  # notebook 16's rows on the README: the cost and the recovery with group-centred advantages


def readme_table(cs: list) -> str:
    """The README's short form of the claims table: claim, where, the advantages its runs used, mean ± 95%, status in
    a few words (README_CLAIMS, every one with raw rewards as advantages), then notebook 16's cost and recovery rows
    (README_REGIME, group-centred advantages) when its JSON is committed."""
    lines = ["| the article's claim | where | advantages | paired difference | status |", "|---|---|---|---|---|"]
    for c in cs:
        if not c["claim"].startswith(README_CLAIMS):
            continue
        adv = "raw (SC) against group-centred" if "group baseline" in c["claim"] else "raw (A = r)"
        lines.append(f"| {c['claim']} | {c['where'].split(' · ')[0]} | {adv} | {c['short']} | {c['short_status']} |")
    g = _load("16_grpo_regime.json")
    for r in [] if g is None else [r for r in g["claims"] if r["family"] == "primary (AUC)" and r["id"] in README_REGIME]:
        st = r["status"] if r["status"] == "not decided" else f"**{r['status']}**"
        lines.append(f"| {REGIME_WORDING[r['id']]} | 16 | group-centred | {fmt(r['mean'], d=2)} ± {r['ci95']:.2f} AUC "
                     f"({r['n']} fresh seeds) | {st} |")
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
        text.append(f"**{name}'s slope** (each seed's own slope against log10 KL, per tenfold KL): {_pm(r)} pooled "
                    f"(per CPU model: {per_replicate(r, 2)}; heterogeneity p {p_text(r['het_p'])}): {status_text(r)}.")
    sp = _find(rs, "11", "sc − plain", "int4_g128, ")
    if sp is not None and sp["k"] > 1:
        text.append(f"At int4 g128, SC − plain per CPU model is {per_replicate(sp, 2)} ({_pm(sp)} pooled over the "
                    f"{sp['k']}, heterogeneity p {p_text(sp['het_p'])}): descriptive, and the place to add seeds.")
    return "\n".join(lines) + "\n\n" + "\n\n".join(text)


def gradient_text(g, grs: list | None = None) -> str:
    """The gradient section's generated part, from figures/10_gradient_test.json: the primary and the secondaries
    under the rule (`gradient_rows`), beside the notebook's own decision; then, descriptive, bias² and variance in
    the primary cell, the placebo and the gap against KL."""
    grs = gradient_rows(g) if grs is None else grs
    p, bv = g["parameters"], g["bias_variance"]
    pr, secs = grs[0], grs[1:]

    def jk(key, d=2, signed=True):
        return f"{fmt(bv[key]['value'], signed, d)} ± {bv[key]['ci95']:.{d}f}"

    # the heading says "variance, not bias" only where the bias² difference's interval is far inside the MSE gap
    b2 = bv["Δbias2 · sc − mis"]
    head = ("The gap is variance, not bias" if abs(b2["value"]) + b2["ci95"] < abs(pr["mean"]) / 4
            else "Bias² and variance behind the gap")
    text = [
        f"**The primary contrast** ({FAMILIES[pr['family']][0]}; {p['primary_sampler']}, the starting policy, raw "
        f"advantages, k = {p['k']}, {pr['n']} batches of the trainer's batch): MSE_SC − MSE_MIS = {fmt(pr['mean'])} ± "
        f"{pr['ci95']:.3f} ‖g*‖² (95% t interval widened by the reference's term), a relative gap of "
        f"**{_pct(pr['rel_gap'])} ± {_pct(pr['rel_ci95'], False)}** of MSE_MIS against a predicted "
        f"{pr['predicted'][0]:.1%} to {pr['predicted'][1]:.1%} (2-3 × the measured KL of {pr['kl']:.4f} per token); "
        f"{KINDS[pr['kind']]} p {p_text(pr['p'])}: {status_text(pr, 'batches')}. The notebook's own decision rule "
        f"(two-sided, the 95% interval of the relative gap against 0 and the predicted gap) reads: {pr['decision']}.",
        f"**The secondaries** ({FAMILIES[secs[0]['family']][0]}, Holm among themselves, one-sided in SC's favour): "
        + "; ".join(f"{r['label']}: {_pct(r['rel_gap'])} ± {_pct(r['rel_ci95'], False)} ({r['n']} batches, KL "
                    f"{r['kl']:.4f}), Holm p {p_text(r['p_holm'])}, {short_status(r, 'batches')}"
                    + (f", pre-registered power {r['power']['power_2kl']:.2f} at 2 × KL" if r["power"] else "")
                    for r in secs) + ".",
        f"**{head}** (descriptive; the primary cell, 95% jackknife over {p['groups']} groups, "
        f"‖g*‖² units): variance SC {jk('sc · var', signed=False)}, MIS {jk('mis · var', signed=False)}, exact IS {jk('is · var', signed=False)}; bias² SC "
        f"{jk('sc · bias2', 3)}, MIS {jk('mis · bias2', 3)}, exact IS {jk('is · bias2', 3)}; bias² differences SC − MIS "
        f"{jk('Δbias2 · sc − mis', 3)} and SC − IS {jk('Δbias2 · sc − is', 3)} (a standard error of 0.01 ‖g*‖² on them "
        f"would need about {g['bias2_batches_to_resolve']['sc − mis']:.0f} and "
        f"{g['bias2_batches_to_resolve']['sc − is']:.0f} batches). The notebook predicted that SC's bias overtakes "
        f"MIS's extra variance only at {g['prediction']['reversal_batches'][0]:.0f}-"
        f"{g['prediction']['reversal_batches'][1]:.0f} training batches per update.",
        f"**The placebo** (descriptive; A = 1 on every token, so any expected update is drift; "
        f"{p['placebo_batches']} batches per sampler): ‖E ĝ(A = 1)‖² / ‖g*‖² for plain is "
        + ", ".join(f"{fmt(st['plain'][0], d=1)} ± {st['plain'][1]:.1f} at {name} (KL {P['kl']:.1e})"
                    for name, P, st in _placebo(g)[0])
        + f"; {_placebo_text(g)}."
        + ("" if not g.get("placebo_post_hoc") else
           f" Post hoc (added after the pre-registered run, not part of its design), "
           f"{p.get('placebo_more_batches', '')} further, independent batches per sampler: plain is "
           + ", ".join(f"{fmt(st['plain'][0], d=1)} ± {st['plain'][1]:.1f} at {name} (KL {P['kl']:.1e})"
                       for name, P, st in _placebo(g, "placebo_post_hoc")[0])
           + f"; {_placebo_text(g, 'placebo_post_hoc')}."),
        "**The gap against KL** (descriptive, SC − MIS): " + "; ".join(
            f"{_pct(c['rel_gap'])} ± {_pct(c['rel_ci95'], False)} at {_cell(name)} (KL {c['kl']:.1e}, {c['n']} batches)"
            for name, c in _gap_cells(g)) + ".",
    ]
    return "\n\n".join(text)


def readme_note(cs: list | None = None) -> str:
    """The README's paragraph after the claims: the headline statuses in words, from the claims' rows."""
    cs = claims() if cs is None else cs
    by = {c["claim"].split(" (")[0]: c["row"] for c in cs}
    alone = by["… also under FP8 alone"]

    def st(r):
        return short_status(r).replace("**", "")

    g = _load("16_grpo_regime.json")
    regime = "" if g is None else (f" In the article's own regime, group-centred advantages (notebook 16, its section "
                                   f"below): {_regime_sentences(g, cost_only=True)}")
    return _readme_note_13(cs, by, st) + f" Under FP8 alone, the ladder's no-mismatch reference gives plain − bf16 " \
        f"{_pm(alone)}, {st(alone)}.{_readme_gradient(cs)}{_readme_staleness(cs, st)}{regime}"


def _readme_note_13(cs: list, by: dict, st) -> str:
    """readme_note's headline sentences when notebook 13 (the confirmatory run) decides the headline claims."""
    cost, rec = by["A mismatched sampler costs plain training reward"], by["Score centering recovers it"]
    earlier = {c["claim"].split(" (")[0]: c.get("earlier") for c in cs}

    def both(name):  # "equivalence (±M) <status>; non-inferiority (−M) <status>" from one contrast's two rows
        parts = []
        for x in (by.get(f"SC matches {name}"), by.get(f"SC matches or beats {name}")):
            if x is not None:
                test = f"equivalence (±{MARGIN:g})" if x["kind"] == "equivalent" else f"non-inferiority (−{MARGIN:g})"
                parts.append(st(x) if x["status"] not in ("not decided", "contradicted") else f"{test}: {st(x)}")
        return "; ".join(parts)

    text = (f"Under the page's rule (each claim in the family its notebook pre-registered; margins ±{MARGIN:g}), the "
            f"confirmatory run on fresh seeds (notebook 13; its primary, the area under the clean-eval curve, Holm "
            f"within its family) gives: a mismatched sampler costs plain, plain − bf16 {_pm(cost)} over {cost['n']} "
            f"seeds: {st(cost)}. Score centering recovers it, SC − plain {_pm(rec)}: {st(rec)}.")
    for name in ("TIS", "MIS"):
        r = by.get(f"SC matches {name}") or by.get(f"SC matches or beats {name}")
        if r is not None:
            text += f" SC − {name} {_pm(r)}: {both(name)}."
    base = by.get("SC is more than a group baseline")
    if base is not None:
        text += f" SC − a group baseline {_pm(base)}: {st(base)}."
    gentle = by.get("With a gentler optimizer the mismatch still costs plain")
    if gentle is not None:
        text += (f" At the gentler learning rate ({gentle['setting'].split(', ')[2]}), plain − bf16 {_pm(gentle)}: "
                 f"{st(gentle)}.")
    e_cost, e_rec = earlier.get("A mismatched sampler costs plain training reward"), earlier.get("Score centering recovers it")
    if e_cost is not None and e_rec is not None:
        text += (f" Notebook 02's earlier, partly confirmatory run (final clean reward, {e_cost['n']} seeds × "
                 f"{e_cost['k']} CPU models): plain − bf16 {_pm(e_cost)}, {st(e_cost)}; SC − plain {_pm(e_rec)}, "
                 f"{st(e_rec)}.")
    return text


def _readme_staleness(cs: list, st) -> str:
    """The README note's sentence on notebook 07's redesign (P2 and P4 under each schedule; '' before it has run)."""
    rows = {k: [c["row"] for c in cs if c["row"] is not None and c["row"].get("family") == "07 P"
                and c["row"].get("kind") == k] for k in ("noninferior", "greater")}
    if not rows["noninferior"]:
        return ""
    parts = [f"{r['setting'].split(' schedule')[0]} {_pm(r)}, {st(r)}" for r in rows["noninferior"]]
    beats = "; ".join(f"{r['setting'].split(' schedule')[0]} {st(r)}" for r in rows["greater"])
    return (f" Under staleness (notebook 07's pre-registered redesign, {rows['noninferior'][0]['n']} fresh seeds), "
            f"SC + IS − IS on the AUC, per schedule: {'; '.join(parts)} at −{MARGIN:g}; that SC + IS beats IS: {beats}.")


def _readme_gradient(cs: list) -> str:
    """The README note's sentence on notebook 10's primary, from its claim's row ('' when notebook 10 has not run)."""
    r = next(c["row"] for c in cs if c["row"] is not None and c["row"].get("key") == "primary")
    return (f" At the gradient (notebook 10's pre-registered primary, {r['n']} batches), SC's one-update error "
            f"against MIS's is (MSE_SC − MSE_MIS)/MSE_MIS = {_pct(r['rel_gap'])} ± {_pct(r['rel_ci95'], False)} "
            f"(predicted {r['predicted'][0]:.1%} to {r['predicted'][1]:.1%}): {short_status(r, 'batches').replace('**', '')}.")


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
                title: str = "Paired contrasts in final clean reward, the earlier runs (notebook 13's: the claims table)\n"
                             "95% t intervals over seeds (filled: decided in its family)"):
    """One row per contrast of `rs`: the 95% interval thick, the point filled where the row's status is decided in
    its family (tested_rows()), dashed lines at ±M, the row's KL(q‖p) at the right. Saved to `path` when given;
    returns the figure."""
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
        filled = r["status"] not in ("", "not decided")
        ax.plot([max(r["mean"] - r["ci95"], -lim), min(r["mean"] + r["ci95"], lim)], [i, i], color=c, lw=0.4 * fontsize)
        ax.plot(r["mean"], i, "o", color=c if filled else "white", mec=c, ms=0.8 * fontsize)
        if r["kl"] is not None:
            ax.text(1.02, i, f"{r['kl']:.1e}", va="center", fontsize=fontsize, transform=ax.get_yaxis_transform())
    ax.axvline(0, color="0.3", lw=0.8)
    for x in (-MARGIN, MARGIN):
        ax.axvline(x, color="0.5", lw=0.6, ls="--")
    ax.set_yticks(range(len(rs)), [f"{r['source']} · {r['setting']} · {r['contrast']}" for r in rs], fontsize=fontsize)
    ax.tick_params(axis="x", labelsize=fontsize)
    ax.set_ylim(len(rs) - 0.4, -1.4)  # top to bottom, room above the first row for the KL heading
    ax.set_xlim(-1, 1)
    ax.set_xlabel("paired difference in final clean reward, seeds pooled over CPU models (thick: 95%; dashed: the "
                  f"±{MARGIN:g} margin)", fontsize=fontsize)
    ax.text(1.02, -0.9, "KL", fontsize=fontsize, transform=ax.get_yaxis_transform())
    ax.set_title(title, fontsize=1.4 * fontsize)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The blocks of docs/verdict.md and README.md
# ═════════════════════════════════════════════════════════════════════════════════════════════════
# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The article's regime (group-centred advantages): notebook 16's claim rows, collected from its JSON as written
# there by `scrl_min.test_family` (the rule is not recomputed here), and notebook 13's two centred arms beside them
# ═════════════════════════════════════════════════════════════════════════════════════════════════
REGIME_WORDING = {"G1": "A mismatched sampler costs GRPO (plain < bf16, both with group-centred advantages)",
                  "G1'": "… or costs it nothing worth a correction (plain and bf16 equivalent within ±0.05)",
                  "G2": "Score centering recovers it (SC > plain)",
                  "G3": "SC matches MIS (equivalent within ±0.05)",
                  "G3'": "SC matches or beats MIS (non-inferior at −0.05)",
                  "G4": "MIS trains worse than plain (MIS < plain; notebook 15's prediction from one update's error)"}


def _centred_arms_13() -> dict:
    """Notebook 13's centred arms (lr 0.25 with A = 2(r − mean_G r) on FP8 + σ 0.1) against its raw-reward arms,
    AUC per seed: {name: (mean, 95% half-width, n)}, descriptive, and its pre-registered A7 and exploratory rows."""
    c = _load("13_confirmatory.json")
    if c is None:
        return {}
    auc = {a: np.array(v["auc_per_seed"]) for a, v in c["per_arm"].items()}
    out = {name: (*map(float, mean_ci95(auc[a] - auc[b])), len(auc[a]))
           for name, a, b in (("baseline − bf16", "baseline", "bf16"), ("baseline − sc", "baseline", "sc"))}
    a7 = next(r for r in c["families"]["primary (AUC)"] if r["name"] == "sc − baseline")
    ex = next((r for r in c["families"].get("exploratory (AUC)", []) if r["name"] == "sc_baseline − baseline"), None)
    return dict(out, a7=a7, sc_added=ex, baseline_auc=float(auc["baseline"].mean()), sc_auc=float(auc["sc"].mean()),
                bf16_auc=float(auc["bf16"].mean()))


def recovery_text() -> str:
    """Notebook 13 (family A), exploratory: how close each correction comes to the no-mismatch reference, on the AUC
    and on the final reward. Per arm x in SC, TIS, MIS: x − bf16 mean ± 95% and its equivalence test within ±M (Holm
    over the three, per metric: `scrl_min.test_family`); and SC's share of the cost it recovers, (SC − plain) /
    (bf16 − plain), with a delta-method 95% t interval over seeds. '' when notebook 13's JSON is missing."""
    from scipy import stats as st

    from scrl_min import test_family

    c = _load("13_confirmatory.json")
    if c is None:
        return ""
    lines = ["| metric | SC − bf16 | TIS − bf16 | MIS − bf16 | SC's share of the cost recovered |", "|---|---|---|---|---|"]
    for metric, label in (("auc", "AUC (primary)"), ("final", "final clean reward (secondary)")):
        v = {a: np.asarray(x[f"{metric}_per_seed"], float) for a, x in c["per_arm"].items()}
        rows = test_family(v, [(a, "bf16", "equivalent") for a in ("sc", "tis", "mis")], margin=MARGIN)
        rec, cost = v["sc"] - v["plain"], v["bf16"] - v["plain"]
        share = rec.mean() / cost.mean()
        n = len(rec)
        se = (rec - share * cost).std(ddof=1) / math.sqrt(n) / cost.mean()
        half = st.t.ppf(0.975, n - 1) * se
        cells = [f"{fmt(r['mean'])} ± {r['ci95']:.3f}, {r['status'].split(' (')[0]}" for r in rows]
        lines.append(f"| {label} | {' | '.join(cells)} | {share:.0%} [{share - half:.0%}, {share + half:.0%}] |")
    return "\n".join(lines)


def row_status(r: dict) -> str:
    """A notebook's claim row (`scrl_min.test_family`) as the page writes its status: an undecided row adds where its
    estimate lies or the seeds that would decide it at the margin beyond the null's edge (a true difference of 0 for
    an equivalence row), as `_seeds_text` does for the page's own rows."""
    n = r.get("seeds_at_stated_effect")
    if r["status"] != "not decided" or n is None:
        return r["status"]
    at = "a true difference of 0" if r["test"] == "equivalent" else f"a {MARGIN:g} effect"
    if _wrong_side(dict(r, kind=r["test"])):
        return f"not decided (its estimate lies {'outside' if r['test'] == 'equivalent' else 'on the wrong side of'} " \
               f"{THRESHOLD[r['test']]})"
    if n <= r["n"]:
        return (f"not decided (its {r['n']} seeds had 80% power at {at}; 95% interval "
                f"[{fmt(r['mean'] - r['ci95'])}, {fmt(r['mean'] + r['ci95'])}])")
    return f"not decided ({n:,} seeds would decide it at {at})"


def regime_text() -> str:
    """The verdict page's section on the article's regime: notebook 16's primary rows when its JSON is committed
    (else a line saying it is pre-registered and running), then notebook 13's centred arms, A7 with what it mixes."""
    g = _load("16_grpo_regime.json")
    lines = []
    if g is None:
        lines.append("Notebook 16 (group-centred advantages for every arm, 85 fresh seeds, pre-registered with the "
                     "setting notebook 15's gradient pilot chose) has not finished: its claims G1-G4 are not decided "
                     "yet, and no row below decides them.")
    else:
        lines += ["| the article's claim, group-centred advantages | paired difference (AUC) | status |", "|---|---|---|"]
        for r in g["claims"]:
            if r["family"] == "primary (AUC)" and r["id"] in REGIME_WORDING:
                lines.append(f"| {REGIME_WORDING[r['id']]} | {fmt(r['mean'], d=3)} ± {fmt(r['ci95'], False, 3)} "
                             f"({r['n']} seeds) | {row_status(r)} |")
    c = _centred_arms_13()
    if c:
        a7, ex = c["a7"], c["sc_added"]
        d = c["baseline − bf16"]
        lines += ["", f"Notebook 13's row A7 (SC − baseline {fmt(a7['mean'])} ± {fmt(a7['ci95'], False)} AUC, "
                      f"{a7['status']}) mixes two things: its `baseline` arm has group-centred advantages on the "
                      f"mismatched sampler, and it beats even the no-mismatch reference with raw rewards (baseline − "
                      f"bf16 {fmt(d[0])} ± {fmt(d[1], False)}, {d[2]} seeds, descriptive), so most of A7 is the "
                      f"baseline's variance reduction, not the drift."
                      + (f" SC added to the group baseline (its exploratory row) gives sc_baseline − baseline "
                         f"{fmt(ex['mean'])} ± {fmt(ex['ci95'], False)}: {row_status(ex)}." if ex else "")]
    return "\n".join(lines)


def _drift_share_text() -> str:
    """Notebook 15's drift shares as '0.03-0.09%' (the smallest and largest setting), or '' before it has run."""
    p = _load("15_grpo_gradient_pilot.json")
    if p is None:
        return "not measured"
    shares = [s["drift"]["plain − sc"]["share"] for s in p["settings"]]
    return f"{100 * min(shares):.2f}-{100 * max(shares):.2f}%"


def _regime_sentences(g, cost_only: bool = False) -> str:
    """The README's plain sentences on notebook 16 (group-centred advantages), one per question, each worded by its
    pre-registered rows' status (scrl_min.test_family's, as the notebook saved them): the cost (G1, G1′), the
    recovery (G2), SC against MIS (G3, G3′) and the pilot's prediction (G4); on the AUC, its primary. cost_only: the
    cost's sentence alone (the page's opening paragraph)."""
    by = {r["id"]: r for r in g["claims"] if r["family"] == "primary (AUC)"}
    par = g.get("parameters", {})

    def pm(r):
        return f"{fmt(r['mean'], d=3)} ± {fmt(r['ci95'], False, 3)}"

    def ok(i):
        return by[i]["p_holm"] < ALPHA

    def against(i):
        return by[i]["status"] == "contradicted"

    def open_(i):  # an undecided row: the seeds a 0.05 effect would need, at its Holm level
        n = by[i].get("seeds_at_stated_effect")
        return "not decided" + (f"; about {n} seeds would decide a 0.05 effect" if n else "")

    c, c0 = by["G1"], by["G1'"]
    if ok("G1") and ok("G1'"):
        cost = f"The mismatch costs GRPO a little, less than 0.05 (plain − bf16 {pm(c)}: reproduced, and equivalent within ±{MARGIN:g})."
    elif ok("G1") and against("G1'"):
        cost = f"The mismatch costs GRPO more than {MARGIN:g} (plain − bf16 {pm(c)}: reproduced, and outside ±{MARGIN:g})."
    elif ok("G1"):
        cost = f"The mismatch costs GRPO reward (plain − bf16 {pm(c)}: reproduced)."
    elif against("G1"):
        cost = (f"The article's claim that the mismatch costs GRPO is contradicted: the mismatched sampler trains better "
                f"than the reference here (plain − bf16 {pm(c)}).")
    elif ok("G1'"):
        cost = (f"The mismatch costs GRPO nothing worth a correction at this scale (plain − bf16 {pm(c)}: "
                f"equivalent within ±{MARGIN:g}).")
    else:
        cost = f"Whether the mismatch costs GRPO anything is not decided (plain − bf16 {pm(c)}; {open_('G1')})."
    if cost_only:
        return cost
    r = by["G2"]
    rec = (f"Score centering improves on plain (SC − plain {pm(r)}: reproduced)." if ok("G2") else
           f"The claim that score centering recovers a cost is contradicted too: SC trains worse than plain here "
           f"(SC − plain {pm(r)})." if against("G2") else
           f"Score centering's gain over plain is not decided (SC − plain {pm(r)}; {open_('G2')}).")
    r = by["G3"]
    vs = (f"SC and MIS are equivalent within ±{MARGIN:g} (SC − MIS {pm(r)})." if ok("G3") else
          f"SC trains worse than MIS by more than {MARGIN:g} (SC − MIS {pm(r)})." if against("G3'") else
          f"SC beats MIS by more than {MARGIN:g} (SC − MIS {pm(r)})." if ok("G3'") and against("G3") else
          f"SC is non-inferior to MIS at −{MARGIN:g} (SC − MIS {pm(r)}), not shown equivalent." if ok("G3'") else
          f"SC against MIS is not decided (SC − MIS {pm(r)}; {open_('G3')}).")
    r = by["G4"]
    pilot = (f"As notebook 15's one-update error predicted, MIS trains worse than plain (MIS − plain {pm(r)})." if ok("G4")
             else f"Notebook 15's prediction that MIS trains worse than plain is contradicted (MIS − plain {pm(r)})."
             if against("G4") else f"Notebook 15's prediction that MIS trains worse than plain is not decided "
                                   f"(MIS − plain {pm(r)}).")
    setting = (f"{par['sampler_precision'].upper()} + {par['noise_std']:.0%} weight noise, {par['max_new_tokens']} tokens"
               if par else "the pilot's sampler")
    level = ""
    if "per_arm" in g:
        level = (f" For scale: the reference (bf16) averages {np.mean(g['per_arm']['bf16']['auc_per_seed']):.2f} over "
                 f"training, plain {np.mean(g['per_arm']['plain']['auc_per_seed']):.2f}.")
    c13 = _centred_arms_13()
    return (f"**Group-centred advantages (the article's advantages, A = 2(r − mean_G r); notebook 16, {c['n']} fresh "
            f"seeds, pre-registered, {setting}; the mean clean reward over training).** {cost} {rec} {vs} {pilot}{level} At the gradient "
            f"(notebook 15) the drift is {_drift_share_text()} of one update's error; in notebook 13 a group baseline "
            f"alone, on the σ 0.1 sampler, already trained far better than every raw-reward arm ({c13['baseline_auc']:.2f} "
            f"against SC's {c13['sc_auc']:.2f}).")


def findings() -> str:
    """The README's first-screen findings: a few plain sentences per regime, from notebooks 13 and 16's JSON."""
    c13, c = _load("13_confirmatory.json"), _centred_arms_13()
    if c13 is None:
        return ""
    rows = {r["name"]: r for r in c13["families"]["primary (AUC)"]}
    cost, rec = rows["plain − bf16"], rows["sc − plain"]
    mis = next(r for r in c13["families"]["primary (AUC)"] if r["name"] == "sc − mis" and r["test"] == "equivalent")
    tis = next(r for r in c13["families"]["primary (AUC)"] if r["name"] == "sc − tis" and r["test"] == "equivalent")
    raw = (f"**Raw rewards as advantages (A = r, REINFORCE without a baseline: the regime that favours score centering "
           f"most).** On {cost['n']} fresh seeds, pre-registered (notebook 13), a mismatched sampler (FP8 + 10% weight "
           f"noise) costs plain training {fmt(-cost['mean'], False, 2)} of the mean clean reward over training "
           f"({cost['status']}); score centering gets {fmt(rec['mean'], False, 2)} of it back ({rec['status']}) and "
           f"matches TIS and MIS within ±{MARGIN:g} ({tis['status'].split(' within')[0]}, both). Under FP8 alone no cost "
           f"is detectable at this size.")
    g = _load("16_grpo_regime.json")
    if g is None:
        ex = c["sc_added"]
        centred = (f"**Group-centred advantages (the article's GRPO recipe).** The same sampler with the group-mean "
                   f"baseline and no correction trains far better than any raw-reward arm (notebook 13: a mean clean "
                   f"reward of {c['baseline_auc']:.2f} over training, against SC's {c['sc_auc']:.2f} and the raw "
                   f"no-mismatch reference's {c['bf16_auc']:.2f}), and SC added to it changes "
                   f"{fmt(ex['mean'], d=2)} ± {fmt(ex['ci95'], False, 2)}, {ex['status'].split(' (')[0]}. At the gradient "
                   f"(notebook 15) the drift is still there with group-centred advantages but small: "
                   f"{_drift_share_text()} of one update's error. Whether the mismatch costs GRPO anything in "
                   f"training is notebook 16's question: pre-registered, its runs in progress.")
    else:
        centred = _regime_sentences(g)
    return raw + "\n\n" + centred


def made(rs: list | None = None) -> dict:
    """Everything generated, by block name: the page's (claims, ladder, forest, severity, gradient) and the
    README's (readme, readme_note), from one computation of the rows."""
    rs = tested_rows() if rs is None else rs
    slopes, g = slope_rows(), _load("10_gradient_test.json")
    grs = gradient_rows(g)
    cs = claims(rs, slopes, g, confirmatory_rows(), staleness_rows())
    return {"claims": claims_table(cs), "ladder": ladder_table(), "forest": forest_table(rs),
            "severity": severity_text(rs, slopes), "gradient": gradient_text(g, grs), "regime": regime_text(),
            "recovery": recovery_text(),
            "readme": readme_table(cs=cs), "readme_note": readme_note(cs), "findings": findings()}


PAGE_BLOCKS = ("claims", "readme_note", "recovery", "ladder", "forest", "severity", "gradient", "regime")
README_BLOCKS = ("readme", "findings")


def write_blocks(path: Path, made_: dict, kind: str = "verdict") -> None:
    """Replace each <!-- KIND:NAME --> block of the file at `path` by made_[NAME]; SystemExit when one is missing.
    """
    text_ = path.read_text()
    for name, text in made_.items():
        text_, n = re.subn(rf"<!-- {kind}:{name} -->\n(?:.*?\n)?<!-- /{kind}:{name} -->",
                           lambda m: f"<!-- {kind}:{name} -->\n{text}\n<!-- /{kind}:{name} -->", text_, flags=re.S)
        if n != 1:
            raise SystemExit(f"{path.relative_to(REPO)} has no block {kind}:{name}")
    path.write_text(text_)


def deck_data(rs: list) -> dict:
    """What the deck (slides/journal_club.py) shows, as figures/verdict.json: the rows of the rule (`tested_rows`,
    `slope_rows`, `confirmatory_rows`, `staleness_rows`), each decided row with its short status and its Holm-level
    interval [lower, upper, a] within its family (`holm_interval`; None for a descriptive row or one whose Holm p
    its notebook gave), the claims (`claims`), notebook 16's primary rows in the article's regime (None before its
    JSON is committed), and per replicated notebook the folders its seeds pool."""
    slopes, c13, st07 = slope_rows(), confirmatory_rows(), staleness_rows()

    def extra(rows, family_rows):
        for r in rows:
            decided = r.get("family") is not None and "p_holm_given" not in r
            r["short_status"] = short_status(r) if r.get("family") is not None else ""
            r["holm_interval"] = list(holm_interval(r, family_rows)) if decided else None
        return rows

    extra(rs, rs), extra(slopes, slopes), extra(c13, c13), extra(st07, st07)
    cs = claims(rs, slopes, None, c13, st07)
    g = _load("16_grpo_regime.json")  # the article's regime: notebook 16's primary rows as it saved them
    regime = None if g is None else dict(parameters=g["parameters"], rows=[
        dict(r, wording=REGIME_WORDING[r["id"]]) for r in g["claims"]
        if r["family"] == "primary (AUC)" and r["id"] in REGIME_WORDING])
    return dict(alpha=ALPHA, margin=MARGIN, rows=rs, slopes=slopes, confirmatory=c13, staleness=st07, claims=cs,
                regime=regime,
                replicates={src: [str(d.relative_to(REPO)) for d in replicate_dirs(src)] for src in REPLICATED})


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
    (FIG / "verdict.json").write_text(json.dumps(deck_data(tested_rows()), indent=1))
    print(f"wrote {PAGE.relative_to(REPO)}, README.md's verdict blocks, figures/verdict_forest.{{png,json}} and figures/verdict.json "
          f"({len(rs)} rows)")


if __name__ == "__main__":
    main()
