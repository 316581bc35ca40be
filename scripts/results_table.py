"""docs/results.md's tables, made from the committed JSON in figures/ (nothing typed by hand).

    python scripts/results_table.py           # print the tables
    python scripts/results_table.py --write   # replace the blocks between <!-- results:NAME --> markers in docs/results.md

tests/test_docs.py checks that docs/results.md holds exactly what this prints, so a table cannot drift from
the numbers behind the figures. Each table: mean over paired seeds ± the 95% t half-width, and the
paired difference of each arm to the uncorrected one (per seed, then mean ± 95%).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from scrl_min import mean_ci95, p_text

REPO = Path(__file__).resolve().parent.parent
FIG = REPO / "figures"
PAGE = REPO / "docs" / "results.md"


def pm(mean: float, ci95: float, signed: bool = False, digits: int = 3) -> str:
    """'mean ± half-width' as the tables print it, `digits` decimals; signed for differences."""
    return f"{mean:{'+' if signed else ''}.{digits}f} ± {ci95:.{digits}f}"


def table_02() -> str:
    d = json.loads((FIG / "02_fp8_arms.json").read_text())
    p, final = d["parameters"], d["final"]
    arms, plain, ref = p["arms"], p["arms"][1], p["arms"][0]
    made_by = ("`make reproduce-full`" if len(p["seeds"]) >= 12
               else f"its earlier {len(p['seeds'])}-seed run, made by `make reproduce`")
    lines = [f"Notebook 02 ({made_by}; `figures/02_fp8_arms.json`): {p['advantage_mode']} advantages, FP8 + "
             f"{p['noise_std']:.0%} weight noise (σ = {p['noise_std']}), {p['steps']} steps, {len(p['seeds'])} paired seeds. "
             f"Final clean reward = mean "
             f"of the last {p['final_evals']} clean evaluations (the trainer's own policy, {p['eval_prompts']} "
             f"held-out prompts); training reward = mean over the last 30 steps, from the mismatched sampler.", "",
             f"| arm | final clean reward | − {plain} (paired) | − {ref} (paired) | training reward | per seed (clean) |",
             "|---|---|---|---|---|---|"]
    for arm in arms:
        f = final[arm]
        dp = "—" if arm == plain else pm(f["minus_plain_mean"], f["minus_plain_ci95"], signed=True)
        dr = "—" if arm == ref else pm(f["minus_reference_mean"], f["minus_reference_ci95"], signed=True)
        lines.append(f"| {arm} | {pm(f['final_eval_mean'], f['final_eval_ci95'])} | {dp} | {dr} | "
                     f"{pm(f['train_reward_last30_mean'], f['train_reward_last30_ci95'])} | "
                     + " ".join(f"{v:.2f}" for v in f["final_eval_per_seed"]) + " |")
    return "\n".join(lines)


def table_07() -> str:
    d = json.loads((FIG / "07_staleness.json").read_text())
    if "runs" in d:  # the redesign (lr 0.25, two schedules, pre-registered families)
        return table_07_redesign(d)
    p, final, paired = d["parameters"], d["final"], d["paired"]
    st = p["staleness"]
    lines = [f"Notebook 07 (`make reproduce-full`; `figures/07_staleness.json`): staleness alone ({p['sampler_precision']} "
             f"sampler, no noise), {p['advantage_mode']} advantages, {p['steps']} steps, {len(p['seeds'])} paired seeds; "
             f"final clean reward, mean ± 95%. The s = 0 reference: "
             f"{pm(final['reference_s0']['mean'], final['reference_s0']['ci95'])}.", "",
             "| arm | " + " | ".join(f"s = {s}" for s in st) + " |", "|---" * (len(st) + 1) + "|"]
    for arm in p["arms"]:
        cells = (final[arm][f"s={s}"] for s in st)
        lines.append(f"| {arm} | " + " | ".join(pm(c["mean"], c["ci95"]) for c in cells) + " |")
    for name, row in paired.items():
        cells = (row[f"s={s}"] for s in st)
        lines.append(f"| {name} (paired) | " + " | ".join(pm(c["mean"], c["ci95"], signed=True) for c in cells) + " |")
    return "\n".join(lines)


def table_07_redesign(d: dict) -> str:
    """Notebook 07's redesign: per schedule, lag and arm the AUC (primary) and final clean reward, mean ± 95% over
    seeds, and KL(q‖p) per token (each run's median and mean over its steps, averaged over seeds); then its
    pre-registered families as the notebook tested them (one-sided or non-inferiority p, Holm within the family)."""
    p, runs, ladder = d["parameters"], d["runs"], d["kl_ladder"]
    n = len(p["seeds"])
    ref = runs["reference"]
    lines = [f"Notebook 07 (`make reproduce-full`; `figures/07_staleness.json`): staleness alone ({p['sampler_precision']} "
             f"sampler, no noise), lr {p['lr']:g}, {p['advantage_mode']} advantages, {p['steps']} steps, {n} paired "
             f"seeds ({p['seeds'][0]}-{p['seeds'][-1]}); AUC of the clean-eval curve (primary) and final clean reward "
             f"(mean of the last {p['final_evals']} clean evaluations), mean ± 95% over seeds. The s = 0 reference: "
             f"AUC {pm(*mean_ci95(ref['auc']))}, final {pm(*mean_ci95(ref['final']))}.", "",
             "| schedule | s | arm | AUC | final clean reward | KL(q‖p) per token, median / mean over steps |",
             "|---|---|---|---|---|---|"]
    for sched in p["schedules"]:
        for s in p["staleness"]:
            for arm in p["arms"]:
                r, kl = runs[f"{sched} / s={s} / {arm}"], ladder[f"{sched} / s={s} / {arm}"]
                lines.append(f"| {sched} | {s} | {arm} | {pm(*mean_ci95(r['auc']))} | {pm(*mean_ci95(r['final']))} | "
                             f"{kl['kl_median']:.1e} / {kl['kl_mean']:.1e} |")
    lines += ["", "| family (Holm within it) | contrast | test | mean ± 95% | p | Holm p | seeds in the claim's direction "
              "| status |", "|---|---|---|---|---|---|---|---|"]
    tests = {"greater": "one-sided (> 0)", "less": "one-sided (< 0)", "noninferior": f"non-inferiority at −{p['margin']}"}
    for fam, rows in d["families"].items():
        for r in rows:
            lines.append(f"| {fam} | {r['name']} | {tests[r['test']]} | {pm(r['mean'], r['ci95'], signed=True)} | "
                         f"{p_text(r['p'])} | {p_text(r['p_holm'])} | {r['wins']}/{r['n']} | {r['status']} |")
    return "\n".join(lines)


def table_06() -> str:
    d = json.loads((FIG / "06_regime_map.json").read_text())
    p, maps, measured = d["parameters"], d["maps"], d["measured"]
    ref, pl = maps["minus_reference"], maps[f"minus_{p['arms'][0]}"]
    lines = [f"Notebook 06 (`make reproduce-full`; `figures/06_regime_map.json`): final clean reward minus the bf16 "
             f"reference of the same mode and seed / minus plain, mean ± 95% over {len(p['seeds'])} paired seeds, "
             f"{p['steps']} steps; drift and signal: plain arm, first completion token, mean over steps and seeds.", "",
             "| mode · severity | " + " | ".join(f"{a} − ref" for a in ref["cols"]) + " | "
             + " | ".join(f"{a} − {p['arms'][0]}" for a in pl["cols"]) + " | KL(q‖p) | drift | signal |",
             "|---" * (1 + len(ref["cols"]) + len(pl["cols"]) + 3) + "|"]
    for i, row in enumerate(ref["rows"]):
        cells = [pm(mp["mean"][i][j], mp["ci95"][i][j], signed=True) for mp in (ref, pl) for j in range(len(mp["cols"]))]
        m = measured[row]
        cells += [f"{m['kl_qp']:.4f}", f"{m['drift_first']:.4f}", f"{m['signal_first']:.4f}"]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table_08() -> str:
    d = json.loads((FIG / "08_length_drift.json").read_text())
    p, final = d["parameters"], d["final"]
    ref, plain = p["arms"][0], p["arms"][1]
    lines = [f"Notebook 08, part 1 (`make reproduce-full`; `figures/08_length_drift.json`): {p['advantage_mode']} rewards, "
             f"FP8 + σ = {p['noise_std']}, a {p['max_new_tokens']}-token budget, {p['steps']} steps, "
             f"{len(p['seeds'])} paired seeds; the trainer's own completion length and reward on the held-out prompts, "
             f"mean of the last {p['final_evals']} clean evaluations, mean ± 95%. Names target: distinct names for the "
             f"full reward.", "",
             f"| names target | arm | final length (tokens) | − {ref} | run-mean length | − {ref} | − {plain} | "
             f"clean reward | reward − {plain} |",
             "|---|---|---|---|---|---|---|---|---|"]
    def diff(x: dict, other: str, digits: int) -> str:  # the paired difference to `other`, if there is one
        d = x.get(f"minus_{other}")
        return pm(d["mean"], d["ci95"], signed=True, digits=digits) if d else "—"

    for t in p["names_targets"]:
        for arm in p["arms"]:
            row = final[f"target={t}/{arm}"]
            L, M, R = row["eval_len"], row["eval_len_run_mean"], row["eval_reward"]
            lines.append(f"| {t} | {arm} | {pm(L['mean'], L['ci95'], digits=1)} | {diff(L, ref, 1)} | "
                         f"{pm(M['mean'], M['ci95'], digits=1)} | {diff(M, ref, 1)} | {diff(M, plain, 1)} | "
                         f"{pm(R['mean'], R['ci95'])} | {diff(R, plain, 3)} |")
    return "\n".join(lines)


def table_09() -> str:
    d = json.loads((FIG / "09_signed_mode.json").read_text())
    p, final = d["parameters"], d["final"]
    n = len(p["seeds"])
    lines = [f"Notebook 09 (`make reproduce-full`; `figures/09_signed_mode.json`): {p['advantage_mode']} rewards "
             f"(A = 2r − 1; `ref_raw`: A = r), {p['steps']} steps, {n} paired seeds; final clean reward, mean ± 95%; "
             f"collapsed: final clean reward below {p['collapse_below']}; entropy: the trainer's, nats per token, last 10 "
             f"steps; grad norm: first 10 steps.", "",
             "| arm | lr | final clean reward | − ref (paired) | collapsed | entropy | grad norm |",
             "|---|---|---|---|---|---|---|"]
    for lr in p["lrs"]:
        for arm in p["arms"]:
            f = final[f"{arm}/lr={lr}"]
            dr = pm(f["minus_ref_mean"], f["minus_ref_ci95"], signed=True) if "minus_ref_mean" in f else "—"
            lines.append(f"| {arm} | {lr} | {pm(f['final_eval_mean'], f['final_eval_ci95'])} | {dr} | "
                         f"{len(f['collapsed_seeds'])}/{n} | "
                         f"{pm(f['entropy_last10_mean'], f['entropy_last10_ci95'], digits=2)} | "
                         f"{pm(f['grad_norm_first10_mean'], f['grad_norm_first10_ci95'])} |")
    return "\n".join(lines)


TABLES = {"02": (table_02, "02_fp8_arms.json"), "06": (table_06, "06_regime_map.json"),
          "07": (table_07, "07_staleness.json"), "08": (table_08, "08_length_drift.json"),
          "09": (table_09, "09_signed_mode.json")}


def blocks() -> dict:
    """{name: markdown} for every table whose JSON is committed."""
    return {name: fn() for name, (fn, src) in TABLES.items() if (FIG / src).exists()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="replace the marked blocks in docs/results.md")
    a = ap.parse_args()
    out = blocks()
    if not a.write:
        print("\n\n".join(f"<!-- results:{k} -->\n{v}\n<!-- /results:{k} -->" for k, v in out.items()))
        return
    from verdict import write_blocks  # the same block replacement as the verdict page's

    write_blocks(PAGE, out, kind="results")
    print(f"docs/results.md: wrote {sorted(out)}")


if __name__ == "__main__":
    main()
