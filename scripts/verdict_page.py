"""The verdict page's wording: the claims table, the page's other generated blocks and the README's front door,
rendered from the verdict's data alone (figures/verdict.json, which scripts/verdict.py collects under the page's
rule; the deck takes its statuses, p values and intervals from the same JSON).

`blocks(v)` takes that data (a dict: the rows of the rule and the readings the page quotes, see `scripts/verdict.py`'s
`collect`) and returns each generated block's text; it reads no file. The rule itself is `scrl_min.stats`'; what this
file owns is the article's wording mapped to each row (the claim ids and their sentences), how a status is written
out, and the layout of the tables. tests/test_verdict.py renders the committed figures/verdict.json and compares.
"""
from __future__ import annotations

from pathlib import Path

from scrl_min import p_text
from scrl_min.stats import ALPHA, MARGIN, effect_beyond_null


# The test each wording needs (docs/verdict.md, "The inference rule", item 4): name → how the page writes it
KINDS = {"greater": "one-sided (> 0)", "less": "one-sided (< 0)", "noninferior": f"non-inferiority at −{MARGIN:g}",
         "equivalent": f"TOST within ±{MARGIN:g}", "two-sided": "two-sided"}
SIDE = {"greater": "above 0", "less": "below 0", "noninferior": f"above −{MARGIN:g}",
        "equivalent": f"within ±{MARGIN:g}", "two-sided": "above 0"}
THRESHOLD = {"greater": "0", "less": "0", "noninferior": f"−{MARGIN:g}", "equivalent": f"±{MARGIN:g}"}

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
    "16": ("notebook 16's pre-registered family G1-G4 on the AUC (group-centred advantages)", False),
    "14": ("notebook 14's pre-registered primary (its second design), a family of one", False),
}

# Notebook 10's pre-registered tests (its section 3) by their key in figures/10_gradient_test.json, as the article words
# the claim each answers (formatted with the notebook's parameters)
GRADIENT_WORDING = {
    "primary": "SC's one-update gradient is closer to the on-policy gradient than MIS's (MSE, a variance effect, not "
               "bias; the pre-registered primary)",
    "S1": "… closer than exact token IS's (the same cell; secondary S1)",
    "S2": "… closer than MIS's at a real format, {secondary_sampler} (secondary S2)",
    "S3": "… closer than MIS's after {ref_steps} updates of training (secondary S3)"}


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Rendering: a row's numbers and status, the claims (the article's wording → a row)
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def fmt(x, signed=True, d=3):
    return f"{x:+.{d}f}" if signed else f"{x:.{d}f}"


def _pm(r, d=2) -> str:
    return f"{fmt(r['mean'], d=d)} ± {r['ci95']:.{d}f}"


def _pct(x, signed=True) -> str:
    return f"{x:+.2%}" if signed else f"{x:.2%}"


def _find(rs, source, contrast, setting_prefix=None):
    return next((r for r in rs if r["source"] == source and r["contrast"] == contrast
                 and (setting_prefix is None or r["setting"].startswith(setting_prefix))), None)


def _count(seeds: dict) -> str | None:
    """'N' or 'N1-N2' from a row's seeds (scripts/verdict.py's `with_seeds`); 'N1 to more than 100,000' where one
    does not reach the power; None when no count does."""
    ns = [n for n in seeds["n"] if n is not None]
    if not ns:
        return None
    if len(ns) < len(seeds["n"]):
        return f"{min(ns):,} to more than 100,000"
    return f"{ns[0]:,}" if len(set(ns)) == 1 else f"{min(ns):,}-{max(ns):,}"


def _wrong_side(r) -> str:
    """Where the estimate lies when it is on the far side of the claim's threshold ('outside ±M' for TOST), else ''."""
    if effect_beyond_null(r["mean"], r["kind"]) > 0:
        return ""
    return f"outside ±{MARGIN:g}" if r["kind"] == "equivalent" else f"on the wrong side of {THRESHOLD[r['kind']]}"


def _powered(r, unit="seeds") -> str:
    """'its N seeds had 80% power <at the stated effect>; 95% interval [lo, hi]' when the row ran at least the units
    every count of its stated effect needs, else ''."""
    if not all(n is not None and n <= r["n"] for n in r["seeds"]["n"]):
        return ""
    return (f"its {r['n']} {unit} had 80% power {r['seeds']['label']}; 95% interval [{fmt(r['mean'] - r['ci95'])}, "
            f"{fmt(r['mean'] + r['ci95'])}]")


def _seeds_text(r, unit="seeds") -> str:
    """The not-decided reason: where the estimate lies, and the seeds that would decide the row at its stated
    effect (its seeds: scripts/verdict.py's `with_seeds`)."""
    n, sd = _count(r["seeds"]), f"sd over {unit} {r['sd']:.3f}" + (" ‖g*‖²" if unit == "batches" else "")
    at = f"(80% power at its Holm level {r['seeds']['level']:.3g}, {sd})"
    if n is None:
        return f"no number of {unit} at this estimate (it lies {_wrong_side(r)}; {sd})"
    if _wrong_side(r):
        return f"its estimate lies {_wrong_side(r)}; {n} {unit} would decide it {r['seeds']['label']} {at}"
    return _powered(r, unit) or f"{n} {unit} would decide it {r['seeds']['label']} {at}"


def _flags(r, text: str, sep: str) -> str:
    if FAMILIES[r["family"]][1]:
        text = f"exploratory{sep}{text}"
    if r.get("het_p") is not None and r["het_p"] < 0.05:
        text += f"{sep}replicates differ" + (f" (heterogeneity p {p_text(r['het_p'])})" if sep == " · " else "")
    return text


def status_text(r, unit="seeds") -> str:
    """A tested row's status as the claims table writes it (bold when decided), with the exploratory label, the
    seeds that would decide it when not decided, and the replicates flag."""
    return _flags(r, f"not decided: {_seeds_text(r, unit)}" if r["status"] == "not decided" else f"**{r['status']}**",
                  " · ")


def short_status(r, unit="seeds") -> str:
    """The README's status in a few words."""
    n = None if r["seeds"] is None else _count(r["seeds"])
    if r["status"] != "not decided":
        text = f"**{r['status']}**"
    elif n is None or _wrong_side(r):
        text = f"not decided (estimate {_wrong_side(r)})"
    else:
        text = f"not decided ({_powered(r, unit) or f'{n} {unit} would'})"
    return _flags(r, text, "; ")


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


def per_replicate(r, d: int = 3) -> str:
    """A tested row's per-replicate mean ± 95%, each named by where it ran (its `replicate_names`: "committed run" for
    figures/, else the folder of figures/replicates/ that holds it, the CPU model), in the order pooled."""
    return ", ".join(f"{n} {fmt(m, d=d)} ± {h:.{d}f}" for n, (m, h) in zip(r["replicate_names"], r["replicate_means"]))


def _where(r, name: str) -> str:
    k = "" if r["k"] == 1 else f" × {r['k']} CPU models"
    return f"{name}, {r['n']} seeds{k}"


# Notebook 13's claims (their ids in its JSON) as the article words them, and notebook 02's earlier contrast of each
WORDING_13 = {
    "A1": ("A mismatched sampler costs plain training reward (plain < no-mismatch reference)", "plain − bf16"),
    "A2": ("Score centering recovers it (SC > plain)", "sc − plain"),
    "A4": ("SC matches TIS (equivalent within ±0.05)", None), "A3": ("SC matches MIS (equivalent within ±0.05)", None),
    "A6": ("SC matches or beats TIS (non-inferior at −0.05)", "sc − tis"),
    "A5": ("SC matches or beats MIS (non-inferior at −0.05)", "sc − mis"),
    "A7": ("SC is more than a group baseline (SC > the same sampler with group-centred advantages, no correction)", None),
    "B1": ("With a gentler optimizer the mismatch still costs plain (plain < bf16)", None),
    "B2": ("… and SC still recovers it (SC > plain)", None), "B3": ("… and SC matches MIS (equivalent within ±0.05)", None),
    "B4": ("… and SC matches or beats MIS (non-inferior at −0.05)", None)}
STALENESS_WORDING = {
    "greater": "Centering helps IS under staleness (SC + IS > IS, on average over lags and IS kinds)",
    "noninferior": "… and costs IS nothing (SC + IS non-inferior to IS at −0.05, on average over lags and IS kinds)",
    "refresh": "the sampler refreshed every s + 1 steps (the article's schedule)", "constant": "a constant lag of s steps"}


def claims(v: dict) -> list:
    """Each claim of the article as a dict: claim, where, number, status, short (mean ± 95%), short_status, and
    the tested row it reads (row; None for the descriptive gradient rows, the length drift and the top-k claim), from
    the verdict's data `v` (its rows, slopes, confirmatory, staleness, gradient, length_drift, topk and headline).
    Where notebook 13 (the confirmatory run on fresh seeds) tests a claim, its primary family decides the row, with
    its secondary family's result and notebook 02's earlier run in the number; elsewhere notebook 02 does."""
    rs, slopes, c13, st07 = v["rows"], v["slopes"], v["confirmatory"], v["staleness"]
    out = []

    def add(claim, where, r, note=""):
        k = "" if r["k"] == 1 else f" × {r['k']} CPU models"
        out.append(dict(claim=claim, where=_where(r, where), number=number_text(r) + note, status=status_text(r),
                        short=f"{fmt(r['mean'], d=2)} ± {r['ci95']:.2f} ({r['n']} seeds{k})",
                        short_status=short_status(r), row=r))

    def add_auc(claim, r, sec, earlier=None):
        """A claim decided on the AUC by a pre-registered primary row `r` (notebook 13 or 07's redesign), quoting its
        secondary-family row `sec` (final clean reward) and notebook 02's `earlier` row."""
        note = (f"; the final clean reward (its secondary family): {fmt(sec['mean'])} ± {sec['ci95']:.3f}, "
                f"Holm p {p_text(sec['p_holm'])}, {sec['status']}" if sec else "")
        if earlier is not None:
            note += (f"; notebook 02's earlier run (final clean reward): {_pm(earlier)}, {earlier['status']}")
        out.append(dict(claim=claim, where=_where(r, f"{r['source']} · {r['setting'].rsplit(',', 1)[0]}").replace(
                            " seeds", " fresh seeds"),  # 13 and 07: both pre-registered on seeds no run had used
                        number=number_text(r, "AUC ") + note, status=status_text(r),
                        short=f"{fmt(r['mean'], d=2)} ± {r['ci95']:.2f} AUC ({r['n']} fresh seeds)",
                        short_status=short_status(r), row=r, earlier=earlier))

    def add13(*ids):
        for cid in ids:
            wording, earlier = WORDING_13[cid]
            prim, sec = (next(r for r in c13 if r["id"] == cid and r["family"].endswith(" final") == f) for f in (0, 1))
            add_auc(wording, prim, sec, earlier and _find(rs, "02", earlier))

    add13("A1")
    add("… also under FP8 alone (a real format, no noise)", "11 · fp8 rung − 02's bf16, raw",
        _find(rs, "11", "plain − bf16 (02's)", "fp8, "))
    add13("A2", "A4", "A3", "A6", "A5")
    add("SC + IS beats IS (SC+MIS > MIS)", v["headline"], _find(rs, "02", "sc_mis − mis"),
        "; where every ratio and ρ are in the band, SC+MIS is MIS exactly (docs/method.md)")
    add13("A7", "B1", "B2", "B3", "B4")
    for r in slopes:
        out.append(dict(claim=f"SC's edge grows with the mismatch ({r['contrast'].replace(' slope', '')} against log10 KL)",
                        where=_where(r, "11 · severity ladder, each seed's own slope"),
                        number=number_text(r, "slope ", " per tenfold KL"), status=status_text(r),
                        short=f"slope {fmt(r['mean'], d=2)} ± {r['ci95']:.2f} per tenfold KL",
                        short_status=short_status(r), row=r))
    out.extend(gradient_claims(v["gradient"]))
    for sched in ("refresh", "constant"):  # notebook 07's redesign: P1-P4
        for kind in ("greater", "noninferior"):
            r, sec = (next((x for x in st07 if x["family"] == fam and x["kind"] == kind
                            and x["setting"].startswith(sched)), None) for fam in ("07 P", "07 P final"))
            if r is not None:
                add_auc(f"{STALENESS_WORDING[kind]}; {STALENESS_WORDING[sched]}", r, sec)
    out.append(length_drift_claim(v["length_drift"]))
    t = v["topk"]
    if t:
        out.append(dict(claim=f"A top-k head of k = {t['k']} estimates the drift well",
                        where=f"03 · V = {t['vocab_size']}, {t['setting']}",
                        number=f"head mass {t['head_mass']:.2f}; relative L1 error of the drift {t['rel_err_l1']:.2f} "
                               f"(without the tail model: {t['naive_rel_err_l1']:.1f}); cosine to the exact update in "
                               f"parameter space {t['cos_sim']:.3f}",
                        short=f"drift error {t['rel_err_l1']:.2f} (without the tail model {t['naive_rel_err_l1']:.1f})",
                        status=f"not tested: 'well' has no declared margin (measured at V = {t['vocab_size']}, where "
                               f"k is {t['k'] / t['vocab_size']:.0%} of the vocabulary; 0.1% of a 150k one is untested)",
                        short_status="not tested (no margin for 'well')", row=None))
    return out


def length_drift_claim(ld: dict) -> dict:
    """Claim C7 from notebook 14's second design (the exact expected update iterated, its amendment 2), `ld` the
    verdict's length_drift: its claim row as saved (plain − SC > 0 in the change of the trainer's mean log p(EOS) over
    fixed held-out prefixes, with the seeds that would decide it at the predicted plain − SC), the prediction, the
    parameters and the first design's status (sampled training runs; None without its JSON), written as the claims
    table writes every row. Where plain's push took both signs over the seeds, the status says so (the test then
    reads the sign of an average over noise draws, not one sampler's drift) and gives its exploratory reading: SC's
    share of plain's change, in size (no "|" in the text: it sits in Markdown tables)."""
    r, pred, par, rd = ld["row"], ld["prediction"], ld["parameters"], ld["row"]["reading"]
    first = "" if ld["first_status"] is None else f"; the first design (sampled training runs): {ld['first_status']}"
    out = dict(claim="A mismatched sampler drifts the completion length, and SC removes it (plain − SC in Δ log "
                     "p(EOS))", row=None, status=status_text(r), short_status=short_status(r),
               where=(f"14 · the drift alone (the expected update iterated, no sampled tokens), {par['sampler_format']}"
                      f" + σ {par['sampler_noise']:g}, lr × E[A] = {par['lr'] * par['mean_advantage']:g}, {par['steps']} "
                      f"updates"),
               number=number_text(r, unit=" nats") + f"; predicted {fmt(pred['delta'])} (the notebook's own rule's "
                                                      f"no-drift band ± {pred['no_drift_half_band']:.3f}){first}",
               short=f"{fmt(r['mean'], d=2)} ± {r['ci95']:.2f} nats ({r['n']} seeds, iterated drift)")
    if not rd["plain_takes_both_signs"]:
        return out
    lo, hi = rd["plain_range"]
    return dict(out, status=out["status"] + (
        f" · plain's push took both signs over the seeds ({lo:+.2f} to {hi:+.2f} nats; a seed sets the weight-noise "
        f"draw, the prompts and the sampling), so this test reads the sign of an average over noise draws, not one "
        f"sampler's drift; exploratory: the size of SC's change in log p(EOS) is {rd['sc_share']:.1%} of plain's, "
        f"smaller at "
        f"{rd['sc_smaller']} of {r['n']} seeds"),
        short_status=f"{out['short_status']}; plain's push took both signs; SC's change is {rd['sc_share']:.1%} of "
                     f"plain's in size (exploratory)")


def _gradient_number(g, r) -> tuple:
    """A gradient row's (where, numbers): D ± 95% in ‖g*‖², the relative gap and the predicted one, the rule's
    one-sided p and Holm p in its family beside the notebook's two-sided ones, the power the notebook computed for it,
    its decision rule (the primary) and the post hoc robust check."""
    p, b = g["parameters"], r["other"]
    sampler = p["secondary_sampler"] if r["key"] == "S2" else p["primary_sampler"]
    policy = f"after {p['ref_steps']} updates" if r["key"] == "S3" else "start policy"
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
    return f"10 · {sampler}, {policy}, raw, k = {p['k']}, {r['n']} batches", s


def _placebo(g, key: str) -> tuple:
    """Notebook 10's placebo (A = 1) at its largest-KL sampler, per estimator ‖E ĝ(1)‖² / ‖g*‖² ± 95%, and for
    each estimator the samplers where its 95% interval excludes 0; key "placebo" (pre-registered) or
    "placebo_post_hoc" (further, independent batches per sampler, added after the run); (text, short: plain's and
    SC's there). Each sampler's values are in notebook 10's outputs and figures/10_placebo.json."""
    vals = [(name, P, {e: tuple(x) for e, x in P["a1"].items()}) for name, P in sorted(g[key].items(),
                                                                                    key=lambda kv: kv[1]["kl"])]
    name, P, st = vals[-1]
    counts = ", ".join(f"{n} ({x['n']} batches)" if n == "on-policy" else n for n, x, _ in vals)
    names = {e: {"sc": "SC"}.get(e, lab.split(" (")[0]) for e, lab in g["estimator_labels"].items()}
    excl = {e: [n for n, _, v in vals if e in v and abs(v[e][0]) > v[e][1]] for e in names if any(e in v for *_, v in vals)}
    none = [f"{names[e]}'s" for e, v in excl.items() if not v]
    some = [f"{names[e]}'s at {', '.join(v)}" for e, v in excl.items() if v]
    none_ = ", ".join(none[:-1]) + f" and {none[-1]}" if len(none) > 1 else "".join(none)
    return (f"{counts}; at {name} (KL {P['kl']:.1e}, {P['n']} batches): "
            + ", ".join(f"{names[e]} {fmt(v, d=1)} ± {h:.1f}" for e, (v, h) in st.items())
            + "; the 95% interval excludes 0: " + "; ".join(some + ([f"{none_} at no sampler"] if none else [])),
            f"at {name}: plain {fmt(st['plain'][0], d=0)} ± {st['plain'][1]:.0f}, SC {fmt(st['sc'][0], d=0)} ± "
            f"{st['sc'][1]:.0f} ‖g*‖² ({P['n']} batches)")


def gradient_claims(g: dict) -> list:
    """The gradient-level claims (notebook 10; `g` the verdict's gradient), as claims() writes them: the
    pre-registered primary and the three secondaries under the rule (its rows; row: the tested row, batches, not
    seeds × CPU models); then the placebo and the gap against KL, descriptive (no test declared, no status, row
    None)."""
    out = []
    for r in g["rows"]:
        where, number = _gradient_number(g, r)
        out.append(dict(claim=GRADIENT_WORDING[r["key"]].format(**g["parameters"]), where=where, number=number,
                        status=status_text(r, "batches"), short=f"{_pct(r['rel_gap'])} ± {_pct(r['rel_ci95'], False)} "
                        f"of MSE_{r['other']} ({r['n']} batches)", short_status=short_status(r, "batches"), row=r))
    number, short = _placebo(g, "placebo")
    number = f"pre-registered as descriptive (no test), ‖E ĝ(A = 1)‖² / ‖g*‖² with 95% jackknife intervals; samplers: {number}"
    if g.get("placebo_post_hoc"):
        more, more_short = _placebo(g, "placebo_post_hoc")
        number += f"; post hoc (not pre-registered), further independent batches: {more}"
        short += f"; post hoc {more_short}"
    out.append(dict(claim="Plain's update carries a drift that SC removes (placebo: A = 1, no signal)",
                    where="10 · placebo (each sampler's values: notebook 10's section 7)", number=number,
                    status="descriptive: the notebook declared no test of the placebo", short=short,
                    short_status="descriptive", row=None))
    cells = g["gap_against_kl"]
    out.append(dict(claim="SC's edge at the gradient grows with the mismatch (relative MSE gap SC − MIS against KL)",
                    where=f"10 · {len(cells)} cells at the start policy (each: notebook 10's section 6)",
                    number=f"(MSE_SC − MSE_MIS)/MSE_MIS from {_pct(cells[0]['rel_gap'])} ± "
                           f"{_pct(cells[0]['rel_ci95'], False)} at KL {cells[0]['kl']:.1e} to "
                           f"{_pct(cells[-1]['rel_gap'])} ± {_pct(cells[-1]['rel_ci95'], False)} at KL "
                           f"{cells[-1]['kl']:.1e}", status="descriptive: the notebook declared no test of the trend",
                    short=f"{_pct(cells[0]['rel_gap'])} at KL {cells[0]['kl']:.1e} to {_pct(cells[-1]['rel_gap'])} "
                          f"at KL {cells[-1]['kl']:.1e}", short_status="descriptive", row=None))
    return out


def gradient_text(g: dict) -> str:
    """The gradient section's generated part (its tests are the claims table's rows): bias² and variance behind the
    primary's gap, descriptive, from the verdict's gradient (notebook 10's jackknife values)."""
    p, bv, pr, se = g["parameters"], g["bias_variance"], g["primary"], g["bias2_difference_se"]

    def jk(key, d=2, signed=True):
        return f"{fmt(bv[key]['value'], signed, d)} ± {bv[key]['ci95']:.{d}f}"

    # the heading says "variance, not bias" only where the bias² difference's interval is far inside the MSE gap
    b2 = bv["Δbias2 · sc − mis"]
    head = ("The gap is variance, not bias" if abs(b2["value"]) + b2["ci95"] < abs(pr["D"]) / 4
            else "Bias² and variance behind the gap")
    return (f"**{head}** (descriptive; the primary cell, 95% jackknife over {p['groups']} groups, "
            f"‖g*‖² units): variance SC {jk('sc · var', signed=False)}, MIS {jk('mis · var', signed=False)}, exact IS "
            f"{jk('is · var', signed=False)}; bias² SC {jk('sc · bias2', 3)}, MIS {jk('mis · bias2', 3)}, exact IS "
            f"{jk('is · bias2', 3)}; bias² differences SC − MIS {jk('Δbias2 · sc − mis', 3)} and SC − IS "
            f"{jk('Δbias2 · sc − is', 3)} (standard errors about {se['sc − mis']:.3f} and {se['sc − is']:.3f} ‖g*‖² "
            f"from the {pr['n']} measured batches: enough to resolve a difference of about 0.02, not these). The notebook "
            f"predicted that SC's bias overtakes MIS's extra variance only at "
            f"{g['reversal_batches'][0]:.0f}-{g['reversal_batches'][1]:.0f} training "
            f"batches per update (a batch: {p['prompts_per_step']} prompts × {p['group_size']} completions).")


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The page's and the README's blocks
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def claims_table(cs: list) -> str:
    lines = ["| the article's claim | tested where | the project's number (paired; final clean reward unless named) | status |",
             "|---|---|---|---|"]
    return "\n".join(lines + [f"| {c['claim']} | {c['where']} | {c['number']} | {c['status']} |" for c in cs])


# The README's short table: these claims (the full table is the page's); a claim is chosen by how its text begins
README_CLAIMS = ("A mismatched sampler costs plain training reward", "Score centering recovers it",
                 "SC matches TIS (", "SC matches MIS (", "SC + IS beats IS", "SC is more than a group baseline",
                 "SC's edge grows with the mismatch (sc − plain", "SC's one-update gradient is closer",
                 "… and costs IS nothing (SC + IS non-inferior to IS at −0.05, on average over lags and IS kinds); the "
                 "sampler refreshed",
                 "A mismatched sampler drifts the completion length")
README_REGIME = ("G1", "G2")  # notebook 16's rows on the README: the cost and the recovery with group-centred advantages


def readme_table(cs: list, regime: list) -> str:
    """The README's short form of the claims table: claim, where, the advantages its runs used, mean ± 95%, status in
    a few words (README_CLAIMS, every one with raw rewards as advantages), then notebook 16's cost and recovery rows
    (README_REGIME of the verdict's regime rows, group-centred advantages)."""
    lines = ["| the article's claim | notebook | advantages | paired difference | status |", "|---|---|---|---|---|"]
    for c in cs:
        if c["claim"].startswith(README_CLAIMS):
            adv = "raw (SC) against group-centred" if "group baseline" in c["claim"] else "raw (A = r)"
            claim = c["claim"].replace("… and costs IS nothing", "Centering costs IS nothing under staleness")
            lines.append(f"| {claim} | {c['where'].split(' · ')[0]} | {adv} | {c['short']} | {c['short_status']} |")
    for r in (r for r in regime if r["id"] in README_REGIME):
        lines.append(f"| {REGIME_WORDING[r['id']]} | 16 | group-centred | {_pm(r)} AUC ({r['n']} fresh seeds) | {short_status(r)} |")
    return "\n".join(lines)


def forest_table(rs: list) -> str:
    lines = ["| source | setting | contrast | seeds × CPU models | mean ± 95% | heterogeneity p | test | p | family | "
             "Holm p in its family | page-wide Holm p (sensitivity) | wins | status | KL(q‖p) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        kl = f"{r['kl']:.1e}" if r["kl"] is not None else "–"
        fam = "descriptive" if r["family"] is None else FAMILIES[r["family"]][0]
        bold = "**" if r["status"] not in ("", "not decided") else ""
        lines.append(f"| {r['source']} | {r['setting']} | {bold}{r['contrast']}{bold} | {r['n']} × {r['k']} | "
                     f"{fmt(r['mean'])} ± {r['ci95']:.3f} | {'–' if r['het_p'] is None else p_text(r['het_p'])} | "
                     f"{KINDS[r['kind']]} | {p_text(r['p'])} | {fam} | "
                     f"{'–' if r['p_holm'] is None else p_text(r['p_holm'])} | {p_text(r['p_page'])} | "
                     f"{r['wins']}/{r['n']} | {short_status(r) if r['status'] else '–'} | {kl} |")
    return "\n".join(lines)


def severity_text(v: dict) -> str:
    """The severity section's generated part: per rung (the verdict's severity: rungs, kl, advantage_mode), the ladder
    reference (plain − 02's bf16), SC − plain and SC − MIS pooled over the CPU models' runs (the verdict's rows; the
    slopes are the claims table's rows), and the reference at int4."""
    rs, sev = v["rows"], v["severity"]

    def cell(r):
        return _pm(r) + ("" if r["het_p"] is None else f" (het. p {p_text(r['het_p'])})")

    ref = {rung: _find(rs, "11", "plain − bf16 (02's)", f"{rung}, ") for rung in sev["rungs"]}
    fp8, int4 = ref["fp8"], ref["int4_g128"]
    lines = ["| rung | run-mean KL(q‖p) (committed run) | plain − bf16 (02's bf16, same seeds) | sc − plain | sc − mis |",
             "|---|---|---|---|---|"]
    lines += [f"| {rung} | {sev['kl'][rung]:.1e} | {cell(ref[rung])} | "
              f"{cell(_find(rs, '11', 'sc − plain', f'{rung}, '))} | {cell(_find(rs, '11', 'sc − mis', f'{rung}, '))} |"
              for rung in sev["rungs"]]
    sp = _find(rs, "11", "sc − plain", "int4_g128, ")
    return "\n".join(lines) + "\n\n" + "\n\n".join([
        f"({fp8['n']} seeds × {fp8['k']} CPU models, {sev['advantage_mode']} rewards; a seed is the mean "
        f"of its {fp8['k']} runs, 95% t intervals over seeds; het. p: the replicates compared paired by seed. Per-rung "
        f"differences are descriptive, as notebook 11 declared them; the reference column is the exploratory family of "
        f"the rule, one contrast per rung; the slopes are the claims table's rows.)",
        f"**The ladder has a no-mismatch reference**: notebook 11 runs notebook 02's configuration (its σ 0.1 rung *is* "
        f"02's seeds 0-{fp8['n'] - 1}), so 02's bf16 runs of the same seeds are its reference. Plain − bf16 is "
        f"{_pm(fp8)} under FP8 alone ({short_status(fp8)}; the claims table's row) and {_pm(int4)} at the real int4 "
        f"g128 format ({short_status(int4)}).",
        f"At int4 g128, SC − plain per CPU model is {per_replicate(sp, 2)} ({_pm(sp)} pooled over the {sp['k']}, "
        f"heterogeneity p {p_text(sp['het_p'])}): descriptive, and the place to add seeds."])


def ladder_table(v: dict) -> str:
    """The sampler ladder (the verdict's ladder: notebook 04's samplers by KL, each sampler's mean |Δ log p| and share
    of tokens outside the MIS band, the headline's in bold)."""
    lad = v["ladder"]
    lines = ["| sampler (torch, emulated numerics) | KL(q‖p) per token (k3 estimate) | mean \\|Δ log p\\| | tokens outside the MIS band [0.5, 5] |",
             "|---|---|---|---|"]
    for kl, name, d, oob in lad["samplers"]:
        bold = "**" if "headline" in name else ""
        lines.append(f"| {bold}{name}{bold} | {kl:.1e} | {d:.3f} | {oob:.2%} |")
    lines += ["", f"(notebook 04, {lad['n_prompts']} prompts, T = 1, measured on {lad['cpu']}.) "
                  f"The headline's FP8 + 10% weight noise sits above every real format measured here."]
    return "\n".join(lines)


def recovery_text(v: dict) -> str:
    """Notebook 13's recovery table (family A, exploratory, as it saved it: "recovery"), per metric: x − bf16 mean ±
    95% and its equivalence status within ±M for x in SC, TIS, MIS (Holm over the three), and SC's share of the cost
    it recovers, (SC − plain) / (bf16 − plain), with its delta-method 95% t interval over seeds."""
    lines = ["| metric | SC − bf16 | TIS − bf16 | MIS − bf16 | SC's share of the cost recovered |", "|---|---|---|---|---|"]
    for label, r in v["recovery"].items():
        if "sc_share" in r:
            s = r["sc_share"]
            cells = [f"{fmt(x['mean'])} ± {x['ci95']:.3f}, {x['status'].split(' (')[0]}" for x in r["to_reference"]]
            lines.append(f"| {label} | {' | '.join(cells)} | {s['value']:.0%} [{s['value'] - s['ci95']:.0%}, "
                         f"{s['value'] + s['ci95']:.0%}] |")
    return "\n".join(lines)


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The article's regime (group-centred advantages): notebook 16's claim rows as it saved them, and the README's findings
# ═════════════════════════════════════════════════════════════════════════════════════════════════
PRIME = "'"  # notebook 16 writes G1′ as G1' in its ids
REGIME_WORDING = {"G1": "A mismatched sampler costs GRPO (plain < bf16, both with group-centred advantages)",
                  "G1'": "… or costs it nothing worth a correction (plain and bf16 equivalent within ±0.05)",
                  "G2": "Score centering recovers it (SC > plain)",
                  "G3": "SC matches MIS (equivalent within ±0.05)",
                  "G3'": "SC matches or beats MIS (non-inferior at −0.05)",
                  "G4": "MIS trains worse than plain (MIS < plain; notebook 15's prediction from one update's error)"}

# The README's sentence for each of notebook 16's questions, by the status its deciding row has ({pm}: its mean ±
# 95%). A rerun that moves a status to one this table lacks stops `findings` until its sentence is written by hand.
REGIME_SENTENCES = {
    ("G1", "contradicted"): "The article's claim that the mismatch costs GRPO is contradicted: the mismatched sampler "
                            "trains better than the reference here (plain − bf16 {pm}).",
    ("G2", "contradicted"): "The claim that score centering recovers a cost is contradicted too: SC trains worse than "
                            "plain here (SC − plain {pm}).",
    ("G3", "equivalent within ±0.05"): "SC and MIS are equivalent within ±0.05 (SC − MIS {pm}).",
    ("G4", "not decided"): "Notebook 15's prediction that MIS trains worse than plain is not decided (MIS − plain {pm}).",
}


def regime_text(v: dict) -> str:
    """The verdict page's section on the article's regime: notebook 16's primary rows (the verdict's regime), then
    notebook 13's A7 (its confirmatory row) with what it mixes (its recovery's baseline − bf16, its centred_13)."""
    regime = v["regime"]["rows"] if v["regime"] else []
    lines = ["| id | the claim, group-centred advantages | paired difference (AUC) | test | Holm p (its opposite's) | "
             "status |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['id'].replace(PRIME, '′')} | {REGIME_WORDING[r['id']]} | {fmt(r['mean'])} ± {fmt(r['ci95'], False)} ({r['n']} "
              f"seeds) | {KINDS[r['kind']]} | {p_text(r['p_holm'])} ({p_text(r['p_opposite_holm'])}) | {short_status(r)} |"
              for r in regime]
    a7 = next(r for r in v["confirmatory"] if r["id"] == "A7" and r["family"] == "13 A")
    ex, d = v["centred_13"]["sc_added"], v["recovery"]["baseline − bf16 (AUC)"]
    return "\n".join(lines + [
        "", f"The claims table's group-baseline row (notebook 13's A7: SC − baseline {fmt(a7['mean'])} ± {fmt(a7['ci95'], False)} AUC, {a7['status']}) "
            f"mixes two things: its `baseline` arm has group-centred advantages on the mismatched sampler, and it beats "
            f"even the no-mismatch reference with raw rewards (baseline − bf16 {fmt(d['mean'])} ± {fmt(d['ci95'], False)}, "
            f"{d['n']} seeds, descriptive), so most of A7 is the baseline's variance reduction, not the drift."
            + (f" SC added to the group baseline (notebook 13's exploratory row) gives sc_baseline − baseline {fmt(ex['mean'])} ± "
               f"{fmt(ex['ci95'], False)}: {ex['status']}" + (f" ({ex['seeds_at_stated_effect']} seeds would decide it at a "
               f"{MARGIN:g} effect)" if ex["status"] == "not decided" else "") + "." if ex else "")])


def _drift_share_text(shares: list) -> str:
    """Notebook 15's drift shares as '0.03-0.09%' (the smallest and largest setting), or 'not measured'."""
    return f"{100 * min(shares):.2f}-{100 * max(shares):.2f}%" if shares else "not measured"


def findings(v: dict) -> str:
    """The README's first-screen findings: a few plain sentences per regime, from notebook 13's claim rows (raw
    rewards; the verdict's confirmatory) and notebook 16's (its regime, group-centred advantages; REGIME_SENTENCES).
    Raises ValueError naming the claim when a notebook 16 status has no sentence."""
    c = v["centred_13"]
    rows = {r["id"]: r for r in v["confirmatory"] if r["family"] == "13 A"}
    cost, rec = rows["A1"], rows["A2"]
    raw = (f"**Raw rewards as advantages (A = r, REINFORCE without a baseline: the regime that favours score centering "
           f"most).** On {cost['n']} fresh seeds, pre-registered (notebook 13), a mismatched sampler (FP8 + 10% weight "
           f"noise) costs plain training {fmt(-cost['mean'], False, 2)} of the mean clean reward over training "
           f"({cost['status']}); score centering gets {fmt(rec['mean'], False, 2)} of it back ({rec['status']}) and "
           f"matches TIS and MIS within ±{MARGIN:g} ({rows['A4']['status'].split(' within')[0]}, both). Under FP8 alone "
           f"no cost is detectable at this size.")
    if not v["regime"]:
        return raw
    g = v["regime"]
    by = {r["id"]: r for r in g["rows"]}
    said = []
    for cid in ("G1", "G2", "G3", "G4"):
        r = by[cid]
        if (cid, r["status"]) not in REGIME_SENTENCES:
            raise ValueError(f"notebook 16's {cid} is now {r['status']!r}: write its README sentence in "
                             f"scripts/verdict_page.py's REGIME_SENTENCES")
        said.append(REGIME_SENTENCES[cid, r["status"]].format(pm=f"{fmt(r['mean'])} ± {fmt(r['ci95'], False)}"))
    par, auc = g["parameters"], g["auc_mean"]
    return raw + "\n\n" + (
        f"**Group-centred advantages (the article's advantages, A = 2(r − mean_G r); notebook 16, {by['G1']['n']} fresh "
        f"seeds, pre-registered, {par['sampler_precision'].upper()} + {par['noise_std']:.0%} weight noise, "
        f"{par['max_new_tokens']} tokens; the mean clean reward over training).** {' '.join(said)} For scale: the "
        f"reference (bf16) averages {auc['bf16']:.2f} over training, plain {auc['plain']:.2f}. At the gradient "
        f"(notebook 15) the drift is {_drift_share_text(g['drift_shares'])} of one update's error; in notebook 13 a group baseline alone, "
        f"on the σ 0.1 sampler, already trained far better than every raw-reward arm ({c['baseline_auc']:.2f} against "
        f"SC's {c['sc_auc']:.2f}).")


def forest_plot(rs: list, path: Path, fontsize: float = 8.5, width: float = 12) -> None:
    """figures/verdict_forest.png: one row per contrast of `rs` (the verdict's rows), the 95% interval thick, the point
    filled where the row's status is decided in its family, dashed lines at ±M, the row's KL(q‖p) at the right."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, 0.04 * fontsize * len(rs) + 0.25 * fontsize))
    colors = {"02": "tab:blue", "11": "tab:green", "06": "tab:purple"}
    for i, r in enumerate(rs):
        c = colors.get(r["source"], "k")
        ax.plot([max(r["mean"] - r["ci95"], -1), min(r["mean"] + r["ci95"], 1)], [i, i], color=c, lw=0.4 * fontsize)
        ax.plot(r["mean"], i, "o", color=c if r["status"] not in ("", "not decided") else "white", mec=c,
                ms=0.8 * fontsize)
        if r["kl"] is not None:
            ax.text(1.02, i, f"{r['kl']:.1e}", va="center", fontsize=fontsize, transform=ax.get_yaxis_transform())
    ax.axvline(0, color="0.3", lw=0.8)
    for x in (-MARGIN, MARGIN):
        ax.axvline(x, color="0.5", lw=0.6, ls="--")
    ax.set_yticks(range(len(rs)), [f"{r['source']} · {r['setting']} · {r['contrast']}" for r in rs], fontsize=fontsize)
    ax.tick_params(axis="x", labelsize=fontsize)
    ax.set_ylim(len(rs) - 0.4, -1.4)  # top to bottom, room above the first row for the KL heading
    ax.set_xlim(-1, 1)  # rewards lie in [0, 1]: a difference beyond ±1 is off the scale
    ax.set_xlabel("paired difference in final clean reward, seeds pooled over CPU models (thick: 95%; dashed: the "
                  f"±{MARGIN:g} margin)", fontsize=fontsize)
    ax.text(1.02, -0.9, "KL", fontsize=fontsize, transform=ax.get_yaxis_transform())
    ax.set_title("Paired contrasts in final clean reward, the earlier runs (notebook 13's: the claims table)\n"
                 "95% t intervals over seeds (filled: decided in its family)", fontsize=1.4 * fontsize)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


PAGE_BLOCKS = ("claims", "recovery", "ladder", "forest", "severity", "gradient", "regime")
README_BLOCKS = ("readme", "findings")


def blocks(v: dict) -> dict:
    """Every generated block's text by name (PAGE_BLOCKS of docs/verdict.md, README_BLOCKS of README.md), and under
    "claim_rows" the claims as dicts (`claims`), from the verdict's data `v` alone (scripts/verdict.py's `collect`, or
    figures/verdict.json read back). Raises ValueError when `v` was collected at another margin or α than the labels
    here are written for (scrl_min.stats')."""
    if (v["margin"], v["alpha"]) != (MARGIN, ALPHA):
        raise ValueError(f"the verdict's data has margin {v['margin']}, α {v['alpha']}; this page writes margin {MARGIN}, "
                         f"α {ALPHA}")
    cs = claims(v)
    regime = v["regime"]["rows"] if v["regime"] else []
    return {"claims": claims_table(cs), "recovery": recovery_text(v), "ladder": ladder_table(v),
            "forest": forest_table(v["rows"]), "severity": severity_text(v), "gradient": gradient_text(v["gradient"]),
            "regime": regime_text(v), "readme": readme_table(cs, regime), "findings": findings(v), "claim_rows": cs}
