"""The verdict's data: every claim row of the committed figures/*.json under the page's rule, and the readings the
page quotes beside them, collected into figures/verdict.json. The page's and the README's generated blocks render from that JSON alone
(scripts/verdict_page.py); the deck takes every status, p and interval from it (its plots read the figures' JSON).

    python scripts/verdict.py            # print the generated blocks of docs/verdict.md and README.md
    python scripts/verdict.py --write    # write figures/verdict.json, those blocks and figures/verdict_forest.{png,json}

The rule itself (docs/verdict.md, "The inference rule": the test a claim's wording needs, Holm within the family its
notebook pre-registered, the status, the seeds that would decide it, pooling replicates with the heterogeneity test)
is `scrl_min.stats`'. This file collects the rows: the notebooks that saved their claim rows (07, 10, 13, 14, 16) and
readings (13's recovery table) as saved; notebooks 02, 06 and 11 from their per-seed values, pooled over the
replicates in figures/replicates/<cpu>/ (a seed is one unit). The wording (the article's claims mapped to the rows,
statuses written out, the tables) is scripts/verdict_page.py's; this file adds to each row only what the deck reads
beside it, in that file's words: the seeds' label (`with_seeds`), the short status and notebook 16's claim wording.
tests/test_verdict.py checks that the committed page, README and JSON are what these two files make, and that the page
renders from the committed JSON alone.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
from scipy import stats

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
import verdict_page as page  # noqa: E402  (the wording: it reads only what collect() returns)
from scrl_min import holm, mean_ci95  # noqa: E402  (the rule, defined once, in scrl_min.stats)
from scrl_min.stats import ALPHA, MARGIN, describe_difference, pool_replicates  # noqa: E402
from scrl_min.stats import replicate_heterogeneity, test_differences  # noqa: E402

FIG = REPO / "figures"
PAGE = REPO / "docs" / "verdict.md"
README = REPO / "README.md"
REPLICATES = FIG / "replicates"  # <cpu>/: the same notebooks, code and seeds run on another CPU model (a replicate)

# The test each contrast of notebook 02's family needs, from the claim it answers (docs/verdict.md's claims table)
KIND_02 = {"sc − mis": "noninferior", "sc − tis": "noninferior", "sc_mis − mis": "greater", "sc − plain": "greater",
           "plain − bf16": "less"}

# Notebook 10's pre-registered tests (its section 3, committed before the run): the primary contrast alone in its
# family, the three secondaries with Holm among themselves. Per test: its key in figures/10_gradient_test.json
# ("primary", or the S1-S3 prefix of a "secondary" name), family, the estimator SC is compared with, and the row of
# the notebook's power computation ("prediction" → "power"). The claim each answers: verdict_page.GRADIENT_WORDING.
GRADIENT_TESTS = (("primary", "10 primary", "MIS", "primary · SC − MIS"), ("S1", "10 secondaries", "IS", "primary · SC − IS"),
                  ("S2", "10 secondaries", "MIS", "secondary · SC − MIS"), ("S3", "10 secondaries", "MIS", "after · SC − MIS"))


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The rule over the page's rows (its pieces are scrl_min.stats', tested there against independent computations)
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def decide_families(rs: list) -> list:
    """The rule over rows that carry per_seed, family and kind: each family's rows through
    `scrl_min.stats.test_differences` (the test its wording needs, Holm within the family, the status); a row outside
    every family, or one whose Holm p its notebook gave (`p_holm_given`, notebook 06), described
    (`describe_difference`: two-sided, no status). Adds m (the family's size) and `with_seeds`. Returns rs."""
    fams = {}
    for r in rs:
        if r["family"] is None or "p_holm_given" in r:
            r.update(describe_difference(r["per_seed"]), p_holm=r.get("p_holm_given"), p_opposite_holm=None,
                     m=r.get("m_given"), status="")
        else:
            fams.setdefault(r["family"], []).append(r)
    for members in fams.values():
        for r, t in zip(members, test_differences([(r["contrast"], r["per_seed"], r["kind"]) for r in members])):
            r.update({k: v for k, v in t.items() if k not in ("name", "test")}, m=len(members))
    return with_seeds(rs)


def with_seeds(rs: list) -> list:
    """Adds seeds to each row of `rs` (None unless undecided): the seeds (batches, for notebook 10) that would decide
    it at 80% power at its Holm level, with its per-seed sd, at its stated effect. A row with an `effect_label` was
    saved with its count at its notebook's stated effect (`seeds_at_stated_effect`: notebook 10's predicted gap, a
    range; notebook 14's predicted plain − SC); notebook 11's slopes, which declared no effect, count at the observed
    mean (optimistic); every other row at the margin beyond the null's edge (a true mean of 0 for an equivalence
    row). {n: [counts, None where none reaches the power], label, level}. Returns rs."""
    for r in rs:
        if r.get("status") != "not decided":
            r["seeds"] = None
        elif "effect_label" in r:  # a row's own stated effect: notebook 10's predicted gap (a range), 14's prediction
            n = r["seeds_at_stated_effect"]
            r["seeds"] = dict(n=n if isinstance(n, list) else [n], label=r["effect_label"], level=r["holm_level"])
        elif r["family"].startswith("11 slopes"):
            r["seeds"] = dict(n=[r["seeds_to_decide"]], level=r["holm_level"],
                              label=f"if the true slope were the observed {page.fmt(r['mean'])}, no effect having been declared")
        else:
            r["seeds"] = dict(n=[r["seeds_at_stated_effect"]], level=r["holm_level"], label=(
                f"if the true difference were 0 (TOST within ±{MARGIN:g})" if r["kind"] == "equivalent"
                else f"at a {MARGIN:g} effect beyond {page.THRESHOLD[r['kind']]}"))
    return rs


def holm_interval(r: dict) -> tuple:
    """A tested row's Holm-level interval (lower, upper, a): mean ± its ci_holm at its Holm level (the deck's;
    `scrl_min.decide_family`'s ci_holm and holm_level). Raises ValueError for a row with no Holm step of the page's (descriptive, or its
    Holm p given by its notebook)."""
    if r.get("family") is None or "p_holm_given" in r or "ci_holm" not in r:
        raise ValueError(f"{r.get('contrast')!r} has no Holm step of this page's: family {r.get('family')!r}")
    return r["mean"] - r["ci_holm"], r["mean"] + r["ci_holm"], r["holm_level"]


def page_holm(rs: list) -> list:
    """The sensitivity column: Holm over every row of `rs` at once (each row's own test's p); adds p_page."""
    for r, ph in zip(rs, holm([r["p"] for r in rs])):
        r["p_page"] = float(ph)
    return rs


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The rows: every paired contrast of the committed JSON, per replicate, and the rows notebooks saved
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def _load(name, fig: Path = FIG):
    """figures/NAME, or fig/NAME where `fig` (a folder of figures/replicates/) has that file."""
    path = fig / name if (fig / name).exists() else FIG / name
    return json.loads(path.read_text()) if path.exists() else None


def rows(fig: Path = FIG) -> list:
    """Every paired contrast of one replicate's JSON (fig: figures/, or a folder of figures/replicates/, where a
    notebook the folder lacks comes from figures/) as dict(source, setting, contrast, per_seed: its differences, kl,
    family, kind), in page order: the headline (02, the tests its claims need), the severity ladder (11: per rung,
    then its no-mismatch reference, plain − 02's bf16 of the same seeds, exploratory), the regime map (06: its own Holm
    p over 54 cells, two-sided). `tested_rows` pools them over replicates. Raises ValueError when notebook 11 has a seed
    notebook 02 lacks."""
    out = []

    def add(source, setting, name, diffs, kl, family=None, kind="two-sided"):
        out.append(dict(source=source, setting=setting, contrast=name, per_seed=[float(x) for x in diffs], kl=kl,
                        family=family, kind=kind))

    d02, d11, d06 = (_load(f"{n}.json", fig) for n in ("02_fp8_arms", "11_severity_slope", "06_regime_map"))
    fin = {a: np.array(v["final_eval_per_seed"]) for a, v in d02["final"].items()}
    setting = d02.get("setting", f"FP8 + σ {d02['parameters']['noise_std']}") + f", {d02['parameters']['advantage_mode']}"
    for name in d02.get("primary_contrasts") or list(KIND_02):
        a, b = name.split(" − ")
        add("02", setting, name, fin[a] - fin[b], d02.get("kl_qp_step0", {}).get("plain"), "02", KIND_02[name])
    seeds02, seeds11 = d02["parameters"]["seeds"], d11["parameters"]["seeds"]
    if any(s not in seeds02 for s in seeds11):
        raise ValueError(f"notebook 11's seeds {seeds11} are not all in notebook 02's JSON ({fig})")
    per = {rung: (f"{rung}, {d11['parameters']['advantage_mode']}", d11["per_rung"][rung]) for rung in d11["rungs"]}
    for setting, r in per.values():
        for name in r["contrasts"]:
            a, b = name.split(" − ")
            add("11", setting, name, np.subtract(r["final"][a]["per_seed"], r["final"][b]["per_seed"]), r["kl_run_mean"])
    bf16 = np.array(fin["bf16"])[[seeds02.index(s) for s in seeds11]]
    for setting, r in per.values():
        add("11", setting, "plain − bf16 (02's)", np.array(r["final"]["plain"]["per_seed"]) - bf16, r["kl_run_mean"],
            "11 reference", "less")
    p, runs = d06["parameters"], d06["final_per_run"]
    holm06 = {(cell, f"{arm} − {base}"): float(mp["p_holm"][i][j]) for key, base in (("minus_reference", "bf16"),
              ("minus_plain", "plain")) for mp in [d06["maps"][key]] for i, cell in enumerate(mp["rows"])
              for j, arm in enumerate(mp["cols"])}
    for mode in p["modes"]:
        for prec, sigma in zip(p["severity_formats"], p["severity_noise"]):
            label = prec + (f" σ={sigma:g}" if sigma > 0 else "")
            kl = d06["measured"].get(f"{mode} · {label}", {}).get("kl_qp")
            for a, b in (("sc", "plain"), ("sc", "mis"), ("sc", "tis"), ("sc_mis", "mis"), ("plain", "reference")):
                run = {x: [runs[f"{mode} / reference / bf16 / {s}" if x == "reference" else f"{mode} / {label} / {x} / {s}"]
                           for s in p["seeds"]] for x in (a, b) if x == "reference" or x in p["arms"]}
                if len(run) == 2:
                    name = f"{a} − {b}".replace("reference", "bf16")
                    add("06", f"{label}, {mode}", name, np.subtract(run[a], run[b]), kl)
                    if (f"{mode} · {label}", name) in holm06:  # a map cell: its notebook's Holm p, no status
                        out[-1].update(family="06 map", p_holm_given=holm06[f"{mode} · {label}", name], m_given=54)
    return out


REPLICATED = {"02": "02_fp8_arms.json", "11": "11_severity_slope.json"}  # notebooks figures/replicates/* may hold


def replicate_dirs(source: str) -> list:
    """The folders that hold replicates of notebook `source`'s runs: figures/ (the committed notebook's), then each
    folder of figures/replicates/ (one per other CPU model) that has them."""
    return [FIG] + ([d for d in sorted(REPLICATES.iterdir()) if (d / REPLICATED[source]).is_file()]
                    if source in REPLICATED and REPLICATES.is_dir() else [])



def tested(source, setting, contrast, replicates, kl=None, family=None, kind="two-sided", names=None) -> dict:
    """One row of the page before the rule runs (`decide_families`): the seed units (the mean over `replicates`, (k,
    n): k replicates × n ≥ 2 seeds), the heterogeneity p, each replicate's own mean ± 95% and where it ran (`names`:
    "committed run", or a folder of figures/replicates/; default "replicate 1", ...), the family and the test its
    wording needs. Raises ScrlError when the replicates' lengths differ (`pool_replicates`)."""
    reps = [[float(v) for v in x] for x in replicates]
    return dict(source=source, setting=setting, contrast=contrast, family=family, kind=kind, kl=kl, k=len(reps),
                replicates=reps, per_seed=pool_replicates(reps).tolist(), het_p=replicate_heterogeneity(reps),
                replicate_means=[[float(v) for v in mean_ci95(x)] for x in reps],
                replicate_names=names or [f"replicate {i + 1}" for i in range(len(reps))])


def _name(folder: Path) -> str:
    return "committed run" if folder == FIG else folder.name


def tested_rows() -> list:
    """Every paired contrast in final clean reward of notebooks 02, 11 and 06 (`rows`), pooled over replicates, with
    its family's Holm p, its status and the page-wide Holm p (sensitivity only), in page order. Rows of one (source,
    setting, contrast) are matched across replicates; a replicate that lacks a row leaves it to those that have it."""
    by_dir = {f: rows(f) for f in {f for src in ("02", "11") for f in replicate_dirs(src)}}
    out = []
    for base in by_dir[FIG]:
        same = [(FIG, base)] + [(f, r) for f in replicate_dirs(base["source"])[1:] for r in by_dir[f]
                                if (r["source"], r["setting"], r["contrast"]) ==
                                (base["source"], base["setting"], base["contrast"])]
        row = tested(base["source"], base["setting"], base["contrast"], [r["per_seed"] for _, r in same], base["kl"],
                     base["family"], base["kind"], [_name(f) for f, _ in same])
        out.append(dict(row, **{k: base[k] for k in ("p_holm_given", "m_given") if k in base}))
    return page_holm(decide_families(out))


def saved_rows(saved: list, source: str, family: str, setting, par: dict) -> list:
    """A pre-registered notebook's claim rows as it saved them in its JSON (written by `scrl_min.test_family`: p,
    Holm p within the family, status; tests/test_stats_rule.py recomputes them from the per-seed values), as the
    page's rows: named by source, setting(row) and family, k = 1 (one run per seed and arm: nothing to pool), with
    the seeds that would decide an undecided one (`with_seeds`). Raises ValueError when a row's notebook used
    another margin or α than the page's (its labels would be wrong)."""
    if (par.get("margin", MARGIN), par.get("alpha", ALPHA)) != (MARGIN, ALPHA):
        raise ValueError(f"notebook {source} tested at margin {par.get('margin')}, α {par.get('alpha')}; the page reads "
                         f"margin {MARGIN}, α {ALPHA}")
    return with_seeds([dict(r, source=source, setting=setting(r), contrast=r["name"].split(": ")[-1], family=family,
                            kind=r["test"], k=1, kl=None, m=len(saved)) for r in saved])


# Notebook 13's JSON per family (its pre-registration, committed before its runs); its claim ids start with the letter
CONFIRMATORY = (("13_confirmatory.json", "13 A", "lr"), ("13_gentle_optimizer.json", "13 B", "gentle_lr"))
METRICS = (("primary (AUC)", "", "AUC"), ("secondary (final clean reward)", " final", "final clean reward"))


def confirmatory_rows(fig: Path = FIG) -> list:
    """Notebook 13's pre-registered families as it saved them ("claims", each with its id: A1-A7, B1-B4): family A
    (lr 0.5) and family B (the gentler lr), each on the AUC (its primary) and the final clean reward (its secondary
    family). Empty when the notebook's JSON is missing."""
    out = []
    for name, family, lr_key in CONFIRMATORY:
        d = _load(name, fig)
        for key, suffix, label in METRICS if d else ():
            par = d["parameters"]
            out += [dict(r, metric=label) for r in saved_rows(
                [r for r in d["claims"] if r["family"] == key], "13", family + suffix,
                lambda r: f"FP8 + σ {par['noise_std']:g}, raw, lr {par[lr_key]:g}, {label}", par)]
    return out


def staleness_rows(fig: Path = FIG) -> list:
    """Notebook 07's redesign (staleness where the optimizer is stable; its pre-registration and amendment 1) as it
    saved its families: per schedule, SC + IS − IS per seed, averaged over its lags and IS kinds, one-sided (P1, P3:
    > 0) and non-inferior at −M (P2, P4), Holm over the four; the AUC its primary family, the final clean reward its
    secondary. Empty when the JSON is the first design's or missing."""
    d = _load("07_staleness.json", fig)
    if not d or "runs" not in d:
        return []
    par = d["parameters"]
    return [r for (_, suffix, label), key in zip(METRICS, ("primary (auc)", "secondary: final reward"))
            for r in saved_rows(d["families"][key], "07", "07 P" + suffix, lambda r: (
                f"{r['name'].split(':')[0]} schedule, staleness {', '.join(map(str, par['staleness']))}, "
                f"{par['sampler_precision']} sampler, lr {par['lr']:g}, {label}"), par)]


def regime_rows() -> list:
    """Notebook 16's pre-registered primary family (group-centred advantages, the AUC) as it saved it (`saved_rows`),
    each row with the article's wording (verdict_page.REGIME_WORDING, by claim id G1-G4). Empty before its JSON is committed."""
    g = _load("16_grpo_regime.json")
    if g is None:
        return []
    fam = [r for r in g["claims"] if r["family"] == "primary (AUC)"]
    par = g["parameters"]
    return [dict(r, wording=page.REGIME_WORDING[r["id"]]) for r in saved_rows(fam, "16", "16", lambda r: (
        f"{par['sampler_precision'].upper()} + σ {par['noise_std']:g}, group-centred, lr {par['lr']:g}, AUC"), par)]


def slope_rows() -> list:
    """Notebook 11's declared slopes under the rule: each seed's own slope of the paired difference against
    log10 KL (the seed-respecting version its pre-registration names), the mean over replicates per seed, a
    one-sided t test (the edge grows: slope > 0), Holm over the two slopes."""
    reps = [(f, _load("11_severity_slope.json", f)) for f in replicate_dirs("11")]
    if not reps[0][1]:
        return []
    return decide_families([tested("11", f"severity ladder, {len(reps[0][1]['rungs'])} rungs", f"{name} slope",
                                   [d["slopes"][name]["per_seed_slopes"] for _, d in reps if name in d["slopes"]],
                                   family="11 slopes", kind="greater",
                                   names=[_name(f) for f, d in reps if name in d["slopes"]])
                            for name in reps[0][1]["slopes"]])


def gradient_rows(g) -> list:
    """Notebook 10's claim rows as it saved them (its section 5: each pre-registered test one-sided in SC's favour,
    H1: D < 0, with the reference's term in the standard error; the primary alone, S1-S3 under Holm,
    `scrl_min.decide_family`), with the numbers the page quotes beside them from its contrast's dict: key, label,
    family (GRADIENT_TESTS'), kind, rel_gap, rel_ci95, predicted (the relative gap, 2-3 × KL), kl, p_notebook and
    p_holm_notebook (its declared two-sided p), power (its power computation), decision (the primary's, by its
    declared rule), robust (its post hoc robust check), and the batches that would decide an undecided row at the
    predicted gap (`with_seeds`)."""
    sec = {name.split(" · ")[0]: (name, c) for name, c in g["secondary"].items()}
    p, saved = g["parameters"], {r["id"]: r for r in g["claims"]}
    out = []
    for key, family, other, power_key in GRADIENT_TESTS:
        label, c = (f"primary · SC − MIS, {p['primary_sampler']}, start", g["primary"]) if key == "primary" else sec[key]
        out.append(dict(saved[key], key=key, label=label, family=family, kind=saved[key]["test"], p_notebook=c["p"],
                        p_holm_notebook=c.get("p_holm"), rel_gap=c["rel_gap"], rel_ci95=c["rel_ci95"],
                        predicted=list(c["predicted_rel_gap"]), kl=c["kl"], decision=c.get("decision"),
                        power=g.get("prediction", {}).get("power", {}).get(power_key), robust=c.get("robust"),
                        m=sum(r["family"] == saved[key]["family"] for r in g["claims"]),
                        effect_label=f"at the predicted gap, {-c['predicted_rel_gap'][0]:.1%} to "
                                     f"{-c['predicted_rel_gap'][1]:.1%} of MSE_{other} (2-3 × KL)"))
    return with_seeds(out)




# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The readings the page quotes beside the rows, each from the notebook's JSON as saved
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def gradient_data(g) -> dict:
    """Notebook 10's rows (`gradient_rows`) and what the page quotes beside them: its parameters, each placebo
    sampler's KL, batches and ‖E ĝ(A = 1)‖² / ‖g*‖² ± 95% per estimator ("a1"), the estimators' labels, the
    SC − MIS relative gap per cell sorted by KL, the primary cell's bias² and variance (jackknife) with the bias²
    differences' standard errors (the half-width over t with groups − 1 df), and the predicted reversal batches."""
    p, bv = g["parameters"], g["bias_variance"]

    def placebo(key):
        return {name: dict(kl=P["kl"], n=P["n"], a1={k.split(" · ")[0]: [v["value"], v["ci95"]]
                                                     for k, v in P["stats"].items() if k.endswith("A = 1")})
                for name, P in g[key].items()} if g.get(key) else None
    return dict(parameters=p, rows=gradient_rows(g), placebo=placebo("placebo"),
                placebo_post_hoc=placebo("placebo_post_hoc"), estimator_labels=g["estimator_labels"],
                gap_against_kl=sorted((c["sc − mis"] for c in g["gap_against_kl"].values() if "sc − mis" in c),
                                      key=lambda c: c["kl"]),
                bias_variance=bv, primary=dict(D=g["primary"]["D"], n=g["primary"]["n"]),
                bias2_difference_se={k: bv[f"Δbias2 · {k}"]["ci95"] / stats.t.ppf(0.975, p["groups"] - 1)
                                     for k in ("sc − mis", "sc − is")},
                reversal_batches=g["prediction"]["reversal_batches"])


def length_drift_data(it: dict, ld: dict | None) -> dict:
    """Claim C7 from notebook 14's second design (`it`: figures/14_length_drift_iterated.json, the exact expected
    update iterated) as it saved its row (`saved_rows`, its seeds at the predicted plain − SC), with the prediction,
    the parameters and the first design's status (`ld`: figures/14_length_drift_runs.json; None without it)."""
    pred, par = it["prediction"], it["parameters"]
    (r,) = saved_rows([dict(it["claims"][0], effect_label=f"at the predicted {page.fmt(pred['delta'])} nats")], "14",
                      "14", lambda r: "the drift iterated", par)
    return dict(row=r, prediction=pred, first_status=ld["primary"].get("status", "–") if ld else None,
                parameters={k: par[k] for k in ("sampler_format", "sampler_noise", "lr", "mean_advantage", "steps")})


def readings() -> dict:
    """The page's other readings, by the verdict's key: the top-k claim (notebook 03 at k = 128, σ 0.1, T = 1), the
    severity ladder's rungs and run-mean KL (11), the sampler ladder sorted by KL (04), notebook 13's recovery table
    (with its baseline − bf16 row), its exploratory sc_baseline − baseline row and mean AUC of the baseline, SC and
    bf16 arms (centred_13), and the headline's setting (02)."""
    t, d11, c = _load("03_topk_estimator.json"), _load("11_severity_slope.json"), _load("13_confirmatory.json")
    sev, mm, d02 = _load("04_severity.json"), _load("04_sampler_mismatch.json"), _load("02_fp8_arms.json")
    b = t["settings"]["σ=0.1, T=1"]["by_k"] if t else None
    i = b["k"].index(128) if t else None
    ladder = [[v["summary"]["kl_k3"], name, v["summary"]["abs_dlogp_mean"], v["summary"]["token_out_of_band"]]
              for name, v in sev["samplers"].items()]
    ladder += [[x["kl_k3"], name.replace("torch ", "") + " (the headline's sampler)", x["abs_dlogp_mean"],
                x["token_out_of_band"]] for name, v in mm["samplers"].items() if "σ" in name
               for x in [v["by_temperature"]["1"]]]
    ex = next((r for r in c["families"].get("exploratory (AUC)", []) if r["name"] == "sc_baseline − baseline"), None)
    return dict(
        headline=f"02 · {d02.get('setting', 'FP8 + σ 0.1')}, raw" if d02 else "02",
        topk=dict(k=128, vocab_size=t["vocab_size"], setting="FP8 + σ 0.1, T = 1", head_mass=b["head_mass_mean"][i],
                  rel_err_l1=b["rel_err_l1_mean"][i], naive_rel_err_l1=b["naive_rel_err_l1_mean"][i],
                  cos_sim=b["cos_sim"][i]) if t else None,
        severity=dict(rungs=d11["rungs"], advantage_mode=d11["parameters"]["advantage_mode"],
                      kl={rung: d11["per_rung"][rung]["kl_run_mean"] for rung in d11["rungs"]}),
        ladder=dict(samplers=sorted(ladder), n_prompts=sev["parameters"]["n_prompts"], cpu=sev["hardware"]["cpu"]),
        recovery=c["recovery"],
        centred_13=dict(sc_added=ex, **{f"{a}_auc": c["per_arm"][a]["auc_mean"] for a in ("baseline", "sc", "bf16")}))


def collect() -> dict:
    """The verdict's data, as figures/verdict.json holds it (less the claims, which verdict_page renders): α and
    the margin; rows (`tested_rows`), slopes, confirmatory (13), staleness (07), gradient (10), length_drift (14) and
    regime (16: its parameters, rows, mean AUC of bf16 and plain, and notebook 15's drift shares; None before its
    JSON), each tested row with its short status and Holm-level interval; the folders each replicated notebook pools
    (replicates); and `readings`. Raises what the readers raise on a malformed JSON; a missing figure JSON of
    notebooks 02, 04, 10, 11, 13 or 14's second design is an error too (only 03, 07, 15 and 16 may be absent)."""
    rs, slopes, c13, st07, regime = tested_rows(), slope_rows(), confirmatory_rows(), staleness_rows(), regime_rows()
    for r in (x for group in (rs, slopes, c13, st07) for x in group):  # the deck's: the short status, Holm's interval
        r["short_status"] = page.short_status(r) if r.get("status") else ""
        r["holm_interval"] = list(holm_interval(r)) if r.get("family") is not None and "ci_holm" in r else None
    g16, p15 = _load("16_grpo_regime.json"), _load("15_grpo_gradient_pilot.json")
    return dict(alpha=ALPHA, margin=MARGIN, rows=rs, slopes=slopes, confirmatory=c13, staleness=st07,
                regime=dict(parameters=g16["parameters"], rows=regime,
                            auc_mean={a: float(np.mean(g16["per_arm"][a]["auc_per_seed"])) for a in ("bf16", "plain")},
                            drift_shares=[s["drift"]["plain − sc"]["share"] for s in p15["settings"]] if p15 else [])
                if regime else None,
                replicates={src: [str(d.relative_to(REPO)) for d in replicate_dirs(src)] for src in REPLICATED},
                gradient=gradient_data(_load("10_gradient_test.json")), length_drift=length_drift_data(_load("14_length_drift_iterated.json"),
                                               _load("14_length_drift_runs.json")), **readings())


def made() -> dict:
    """Everything generated: the page's and the README's blocks by name (verdict_page.PAGE_BLOCKS, README_BLOCKS),
    rendered from the data round-tripped through JSON (as the committed figures/verdict.json renders), the claims as
    dicts (`claim_rows`), the rows (`rows`: the forest's) and the deck's JSON (`deck`: the data with the claims)."""
    data = json.loads(json.dumps(collect()))
    out = page.blocks(data)
    return dict(out, rows=data["rows"], deck=dict(data, claims=out["claim_rows"]))


def write_blocks(path: Path, made_: dict, kind: str = "verdict") -> None:
    """Replace each <!-- KIND:NAME --> block of the file at `path` by made_[NAME]; SystemExit when one is missing."""
    text_ = path.read_text()
    for name, text in made_.items():
        text_, n = re.subn(rf"<!-- {kind}:{name} -->\n(?:.*?\n)?<!-- /{kind}:{name} -->",
                           lambda m: f"<!-- {kind}:{name} -->\n{text}\n<!-- /{kind}:{name} -->", text_, flags=re.S)
        if n != 1:
            raise SystemExit(f"{path.relative_to(REPO)} has no block {kind}:{name}")
    path.write_text(text_)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="write figures/verdict.json, docs/verdict.md's and README.md's "
                                                         "blocks and the forest plot")
    args = ap.parse_args(argv)
    m = made()
    if not args.write:
        for name in page.PAGE_BLOCKS + page.README_BLOCKS:
            print(f"<!-- verdict:{name} -->\n{m[name]}\n<!-- /verdict:{name} -->\n")
        return
    (FIG / "verdict.json").write_text(json.dumps(m["deck"], indent=1))
    write_blocks(PAGE, {k: m[k] for k in page.PAGE_BLOCKS})
    write_blocks(README, {k: m[k] for k in page.README_BLOCKS})
    page.forest_plot(m["rows"], FIG / "verdict_forest.png")
    (FIG / "verdict_forest.json").write_text(json.dumps(m["rows"], indent=1))
    print(f"wrote figures/verdict.json, {PAGE.relative_to(REPO)}, README.md's verdict blocks and "
          f"figures/verdict_forest.{{png,json}} ({len(m['rows'])} rows)")


if __name__ == "__main__":
    main()
