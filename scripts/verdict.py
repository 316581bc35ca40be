"""The verdict page's numbers and its forest plot, from the committed figures/*.json.

    python scripts/verdict.py            # print the generated blocks of docs/verdict.md
    python scripts/verdict.py --write    # rewrite those blocks, figures/verdict_forest.{png,json}

Every paired contrast the notebooks report (arm − arm in final clean reward, per seed) becomes one row:
its setting, its mean with the 95% t interval, the paired t test's p, and Holm's correction over every
row on the page (one family: the page reads them all). The row's KL(q‖p) per token, where the notebook
measured it, stands beside it. tests/test_docs.py checks that docs/verdict.md holds what this makes.
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


def _load(name, fig: Path = FIG):
    """figures/NAME, or fig/NAME where `fig` (figures/other_cpu/) has that file."""
    path = fig / name if (fig / name).exists() else FIG / name
    return json.loads(path.read_text()) if path.exists() else None


def _row(source, setting, name, diffs, kl=None):
    return dict(source=source, setting=setting, contrast=name, per_seed=[float(d) for d in diffs], kl=kl)


def rows(fig: Path = FIG) -> list:
    """Every paired contrast of the committed JSON, as (source, setting, contrast, per-seed differences,
    KL), in page order: the headline (02), the severity ladder (11), the regime map (06), staleness (07).
    With fig=OTHER_CPU, the notebooks that folder holds come from there: the same family of rows with
    another CPU model's runs where it has them."""
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


def with_tests(rs: list, alpha: float = 0.05) -> list:
    """Adds mean, ci95, p (paired t), p_holm and ci_holm (Holm over all rows) to every row."""
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


def fmt(x, signed=True, d=3):
    return f"{x:+.{d}f}" if signed else f"{x:.{d}f}"


def forest_table(rs: list) -> str:
    lines = ["| source | setting | contrast | mean ± 95% | Holm-level interval | p | Holm p | wins | KL(q‖p) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        kl = f"{r['kl']:.1e}" if r["kl"] is not None else "–"
        bold = "**" if r["p_holm"] < 0.05 else ""
        lines.append(f"| {r['source']} | {r['setting']} | {bold}{r['contrast']}{bold} | {fmt(r['mean'])} ± {r['ci95']:.3f} | "
                     f"± {r['ci_holm']:.3f} | {r['p']:.3f} | {r['p_holm']:.3f} | {r['wins']}/{r['n']} | {kl} |")
    return "\n".join(lines)


def forest_plot(rs: list, path: Path = None, fontsize: float = 6.5, width: float = 10,
                title: str = "Every paired contrast, one family (Holm over all rows)"):
    """One row per contrast of `rs` (rows of `with_tests`: their Holm intervals stay those of the whole family
    even when `rs` is a subset): the 95% interval thick, the Holm-level one thin, the point filled where
    Holm p < 0.05, the row's KL(q‖p) at the right. Saved to `path` when given; returns the figure."""
    import matplotlib

    if path is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    row_h = 0.04 * fontsize
    fig, ax = plt.subplots(figsize=(width, row_h * len(rs) + 0.25 * fontsize))
    colors = {"02": "tab:blue", "11": "tab:green", "06": "tab:purple", "07": "tab:orange"}
    for i, r in enumerate(rs):
        c = colors.get(r["source"], "k")
        lim = 1.0  # rewards lie in [0, 1]: a difference beyond ±1 is off the scale
        ax.plot([max(r["mean"] - r["ci_holm"], -lim), min(r["mean"] + r["ci_holm"], lim)], [i, i], color=c, lw=0.8, alpha=0.6)
        ax.plot([r["mean"] - r["ci95"], r["mean"] + r["ci95"]], [i, i], color=c, lw=0.4 * fontsize)
        ax.plot(r["mean"], i, "o", color=c if r["p_holm"] < 0.05 else "white", mec=c, ms=0.8 * fontsize)
        if r["kl"] is not None:
            ax.text(1.02, i, f"{r['kl']:.1e}", va="center", fontsize=fontsize, transform=ax.get_yaxis_transform())
    ax.axvline(0, color="0.3", lw=0.8)
    ax.set_yticks(range(len(rs)), [f"{r['source']} · {r['setting']} · {r['contrast']}" for r in rs], fontsize=fontsize)
    ax.tick_params(axis="x", labelsize=fontsize)
    ax.set_ylim(len(rs) - 0.4, -1.4)  # top to bottom, room above the first row for the KL heading
    ax.set_xlim(-1, 1)
    ax.set_xlabel("paired difference in final clean reward (thick: 95%; thin: Holm level over all rows; "
                  "filled: Holm p < 0.05)", fontsize=fontsize)
    ax.text(1.02, -0.9, "KL", fontsize=fontsize, transform=ax.get_yaxis_transform())
    ax.set_title(title, fontsize=1.4 * fontsize)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def _find(rs, source, contrast, setting_prefix=None):
    for r in rs:
        if r["source"] == source and r["contrast"] == contrast and (setting_prefix is None
                                                                    or r["setting"].startswith(setting_prefix)):
            return r
    return None


def status(r, direction: int) -> str:
    """reproduced / contradicted / not resolved, from a row's Holm-adjusted p and its sign; direction +1
    when the article claims a positive difference, −1 a negative one."""
    if r is None:
        return "untested here"
    lo, hi = r["mean"] - r["ci95"], r["mean"] + r["ci95"]
    if r["p_holm"] < 0.05:
        return "**reproduced**" if r["mean"] * direction > 0 else "**contradicted**"
    if lo > 0 or hi < 0:
        return (f"not resolved: the 95% interval excludes 0 ({'same' if r['mean'] * direction > 0 else 'opposite'} "
                f"sign as claimed), Holm's correction over the page does not")
    return "not resolved: the 95% interval contains 0"


def cell(r) -> str:
    if r is None:
        return "–"
    return f"{fmt(r['mean'])} ± {r['ci95']:.3f} (Holm p {p_text(r['p_holm'])}; {r['wins']}/{r['n']} seeds)"


def _short_status(st: str) -> str:
    return st.split(":")[0].split(" (")[0]


REPLICATED = {"02": "02_fp8_arms.json", "11": "11_severity_slope.json"}  # notebooks figures/other_cpu/ may hold


def replicated(source: str) -> bool:
    """Whether figures/other_cpu/ holds notebook `source`'s JSON (rows(OTHER_CPU) otherwise falls back to figures/)."""
    return source in REPLICATED and (OTHER_CPU / REPLICATED[source]).exists()


def replicate_rows() -> list | None:
    """with_tests(rows(OTHER_CPU)) when figures/other_cpu/ holds a notebook's JSON, else None."""
    return with_tests(rows(OTHER_CPU)) if any(map(replicated, REPLICATED)) else None


def both_cpus(st: str, st2: str | None) -> str:
    """One claim's status over two CPU models' runs of the same code and seeds: reproduced only where both
    reproduce it; reproduced on one and not the other is not established."""
    if st2 is None:
        return st
    rep, rep2 = st.startswith("**reproduced"), st2.startswith("**reproduced")
    if rep and rep2:
        return "**reproduced** on both CPU models' runs"
    if rep or rep2:
        return ("not established: reproduced on one CPU model's runs, not on the other's (the same code and seeds; "
                "figures/other_cpu/)")
    return st


def claims(rs: list, other: list | None = None) -> list:
    """Each claim of the article as a dict: claim, where, number (with Holm p and seeds), short (mean ± 95%),
    status (reproduced / contradicted / not resolved / untested here, and why). `other`: the same rows from
    another CPU model's runs (replicate_rows), used for the notebooks figures/other_cpu/ holds."""
    h = _load("02_fp8_arms.json")
    n02 = len(h["parameters"]["seeds"]) if h else 0
    head = f"02 · {h.get('setting', 'FP8 + σ 0.1')}, raw, {n02} seeds" if h else "02"
    g = _load("10_gradient_test.json")
    sl = _load("11_severity_slope.json")
    topk = _load("03_topk_estimator.json")
    out = []

    def add(claim, where, r, direction, note=""):
        r2 = None
        if r is not None and other is not None and replicated(r["source"]):
            r2 = _find(other, r["source"], r["contrast"], r["setting"])
        number = cell(r) + note + ("" if r2 is None else f"; on another CPU model {cell(r2)}")
        out.append(dict(claim=claim, where=where, number=number,
                        status=both_cpus(status(r, direction), None if r2 is None else status(r2, direction)),
                        short="–" if r is None else f"{fmt(r['mean'], d=2)} ± {r['ci95']:.2f} ({r['n']} seeds)"))

    add("A mismatched sampler costs plain training reward (plain < no-mismatch reference)", head,
        _find(rs, "02", "plain − bf16"), -1)
    add("… also under FP8 alone (a real format, no noise)", "06 · fp8, raw, 3 seeds",
        _find(rs, "06", "plain − bf16", "fp8, raw"), -1)
    add("Score centering recovers it (SC > plain)", head, _find(rs, "02", "sc − plain"), +1)
    add("SC matches or beats TIS", head, _find(rs, "02", "sc − tis"), +1,
        "; 'matches' needs an equivalence margin no interval here is narrow enough for")
    add("SC matches or beats MIS", head, _find(rs, "02", "sc − mis"), +1)
    add("SC + IS beats IS (SC+MIS > MIS)", head, _find(rs, "02", "sc_mis − mis"), +1,
        "; where every ratio and ρ are in the band, SC+MIS is MIS exactly (docs/method.md)")
    sl2 = _load(REPLICATED["11"], OTHER_CPU) if replicated("11") else None

    def slope_status(v):
        return ("**reproduced**" if v["p_holm"] < 0.05 and v["slope"] > 0 else
                "**contradicted**" if v["p_holm"] < 0.05 else "not resolved: the interval contains 0"
                if v["slope"] - v["ci95"] < 0 < v["slope"] + v["ci95"] else
                "not resolved: the 95% interval excludes 0, Holm's correction does not")

    if sl:
        for name, v in sl["slopes"].items():
            v2 = sl2["slopes"].get(name) if sl2 else None
            out.append(dict(claim=f"SC's edge grows with the mismatch ({name} against log10 KL)",
                            where=f"11 · severity ladder, {len(sl['parameters']['seeds'])} seeds",
                            number=f"slope {fmt(v['slope'])} ± {v['ci95']:.3f} per tenfold KL (Holm p {p_text(v['p_holm'])} over "
                                   f"the notebook's {len(sl['slopes'])} declared slopes; each seed's own slope "
                                   f"{fmt(v['per_seed_mean'])} ± {v['per_seed_ci95']:.3f})" + (
                                       "" if v2 is None else f"; on another CPU model {fmt(v2['slope'])} ± "
                                       f"{v2['ci95']:.3f} (Holm p {p_text(v2['p_holm'])})"),
                            short=f"slope {fmt(v['slope'], d=2)} ± {v['ci95']:.2f} per tenfold KL",
                            status=both_cpus(slope_status(v), None if v2 is None else slope_status(v2))))
    else:
        out.append(dict(claim="SC's edge grows with the mismatch", where="11 · severity ladder", number="–", short="–",
                        status="untested here: notebook 11 has not run at full size yet (notebooks/pending.yaml)"))
    out.extend(gradient_claims(g))
    for s_ in (1, 8):
        add(f"Centering helps under staleness (SC+TIS > TIS), s = {s_}", f"07 · bf16 sampler, staleness {s_}, 3 seeds",
            _find(rs, "07", "sc_tis − tis", f"staleness s = {s_},"), +1)
    if topk:
        b = topk["settings"]["σ=0.1, T=1"]["by_k"]
        i = b["k"].index(128)
        out.append(dict(claim="A top-k head of k = 128 estimates the drift well",
                        where=f"03 · V = {topk['vocab_size']}, FP8 + σ 0.1, T = 1",
                        number=f"head mass {b['head_mass_mean'][i]:.2f}; relative L1 error of the drift "
                               f"{b['rel_err_l1_mean'][i]:.2f} (without the tail model: {b['naive_rel_err_l1_mean'][i]:.1f}); "
                               f"cosine to the exact update in parameter space {b['cos_sim'][i]:.3f}",
                        short=f"drift error {b['rel_err_l1_mean'][i]:.2f} (without the tail model {b['naive_rel_err_l1_mean'][i]:.1f})",
                        status=f"reproduced at V = {topk['vocab_size']} (k is 6% of the vocabulary here, 0.1% of a "
                               f"150k one: untested at that scale)"))
    return out


def gradient_claims(g) -> list:
    """The gradient-level claims (notebook 10), or one 'untested' line while it has not run."""
    if g is None:
        return [dict(claim="SC's gradient is closer to the on-policy gradient than IS's, more so as the mismatch grows",
                     where="10 · gradient-level test", number="–", short="–",
                     status="untested here: notebook 10 has not run at full size yet (notebooks/pending.yaml)")]
    rows = g["contrasts"]
    out = []
    for c, other in (("C1", "exact token IS"), ("C2", "TIS"), ("C3", "MIS")):
        cells = [r for r in rows if r["label"].endswith(f" · {c}")]
        if not cells:
            continue
        lower = sum(r["holds"] and r["estimate"] < 0 for r in cells)
        higher = sum(r["holds"] and r["estimate"] > 0 for r in cells)
        st = ("**reproduced**" if lower and not higher else "**contradicted**" if higher and not lower else
              "mixed: lower in some cells, higher in others" if lower else "not resolved")
        out.append(dict(claim=f"SC's gradient (k = {g['parameters']['k']}) is closer to the on-policy gradient than {other}'s "
                              f"(MSE per update)",
                        where=f"10 · gradient-level test, {len(g['samplers'])} samplers × 2 policies × 2 advantage modes",
                        number=f"SC's MSE lower in {lower}, higher in {higher} of {len(cells)} cells after Holm over "
                               f"{len(rows)} tests (point estimate lower in {sum(r['estimate'] < 0 for r in cells)}); "
                               f"MSE relative to ‖g*‖², {g['parameters']['replicates']} replicates",
                        short=f"resolved in {lower + higher} of {len(cells)} cells (SC's point estimate lower in "
                              f"{sum(r['estimate'] < 0 for r in cells)})", status=st))
    slopes = [r for r in rows if "S1" in r["label"]]
    if slopes:
        neg = sum(r["holds"] and r["estimate"] < 0 for r in slopes)
        pos = sum(r["holds"] and r["estimate"] > 0 for r in slopes)
        out.append(dict(claim="… and SC's edge over exact IS grows with the mismatch (slope of the MSE gap against log10 KL)",
                        where="10 · gradient-level test",
                        number="; ".join(f"{r['label'].split(' · S1')[0]}: {fmt(r['estimate'], d=4)} ± {r['ci95']:.4f} "
                                         f"(Holm p {r['p_holm']:.2f})" for r in slopes),
                        short=f"resolved in {neg + pos} of {len(slopes)} (policy, mode); point estimates negative in "
                              f"{sum(r['estimate'] < 0 for r in slopes)}",
                        status="**reproduced**" if neg and not pos else "**contradicted**" if pos and not neg else
                               "mixed" if neg else "not resolved"))
    return out


def claims_table(rs: list) -> str:
    lines = ["| the article's claim | tested where | the project's number (paired; final clean reward unless named) | status |",
             "|---|---|---|---|"]
    lines += [f"| {c['claim']} | {c['where']} | {c['number']} | {c['status']} |" for c in claims(rs, replicate_rows())]
    return "\n".join(lines)


def readme_table(rs: list) -> str:
    """The README's short form of the claims table: claim, where, mean ± 95%, status in a word or two."""
    lines = ["| the article's claim | where | paired difference | status |", "|---|---|---|---|"]
    for c in claims(rs, replicate_rows()):
        where = c["where"].split(" · ")[0]
        lines.append(f"| {c['claim']} | {where} | {c['short']} | {_short_status(c['status'])} |")
    return "\n".join(lines)


def ladder_table() -> str:
    sev, mm = _load("04_severity.json"), _load("04_sampler_mismatch.json")
    lines = ["| sampler (torch, emulated numerics) | KL(q‖p) per token (k3 estimate) | mean \\|Δ log p\\| | tokens outside the MIS band [0.5, 5] |",
             "|---|---|---|---|"]
    rows = []
    if sev:
        for name, v in sev["samplers"].items():
            s_ = v["summary"]
            rows.append((s_["kl_k3"], name, s_["abs_dlogp_mean"], s_["token_out_of_band"]))
    if mm:
        for name, v in mm["samplers"].items():
            if "σ" in name:
                b = v["by_temperature"]["1"]
                rows.append((b["kl_k3"], name.replace("torch ", "") + " (the headline's sampler)", b["abs_dlogp_mean"],
                             b["token_out_of_band"]))
    for kl, name, d, oob in sorted(rows):
        bold = "**" if "headline" in name else ""
        lines.append(f"| {bold}{name}{bold} | {kl:.1e} | {d:.3f} | {oob:.2%} |")
    src = f"notebook 04, {sev['parameters']['n_prompts']} prompts, T = 1, measured on {sev['hardware']['cpu']}" if sev else "notebook 04"
    lines.append("")
    lines.append(f"({src}.) The headline's FP8 + 10% weight noise sits above every real format measured here.")
    return "\n".join(lines)


def blocks(rs=None) -> dict:
    """The generated blocks of docs/verdict.md, by name."""
    rs = with_tests(rows()) if rs is None else rs
    return {"claims": claims_table(rs), "ladder": ladder_table(), "forest": forest_table(rs)}


def readme_blocks(rs=None) -> dict:
    """The generated blocks of README.md, by name."""
    rs = with_tests(rows()) if rs is None else rs
    return {"readme": readme_table(rs)}


def write_blocks(path: Path, made: dict, kind: str = "verdict") -> None:
    """Replace each <!-- KIND:NAME --> block of the file at `path` by made[NAME]; SystemExit when one is missing.
    (scripts/results_table.py writes its `results` blocks with it too.)"""
    text_ = path.read_text()
    for name, text in made.items():
        text_, n = re.subn(rf"<!-- {kind}:{name} -->\n(?:.*?\n)?<!-- /{kind}:{name} -->",
                           lambda m: f"<!-- {kind}:{name} -->\n{text}\n<!-- /{kind}:{name} -->", text_, flags=re.S)
        if n != 1:
            raise SystemExit(f"{path.relative_to(REPO)} has no block {kind}:{name}")
    path.write_text(text_)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite docs/verdict.md's blocks and the forest plot")
    args = ap.parse_args(argv)
    rs = with_tests(rows())
    made = blocks(rs)
    if not args.write:
        for name, text in made.items():
            print(f"<!-- verdict:{name} -->\n{text}\n<!-- /verdict:{name} -->\n")
        return
    write_blocks(PAGE, made)
    write_blocks(README, readme_blocks(rs))
    forest_plot(rs, FIG / "verdict_forest.png", fontsize=8.5, width=12)
    (FIG / "verdict_forest.json").write_text(json.dumps(rs, indent=1))
    print(f"wrote {PAGE.relative_to(REPO)} and figures/verdict_forest.{{png,json}} ({len(rs)} rows)")


if __name__ == "__main__":
    main()
