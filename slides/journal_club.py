# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["slide"]
# # Score Centering under a mismatched sampler
#
# *Marek & Ryabinin, arXiv:2609.20807*, reproduced small: **scrl-min**
#
# RL for LLMs samples with a fast engine (FP8, a quantized KV cache, stale weights) and trains a model that
# computes differently: tokens come from q, the gradient is taken under p.
#
# A 3.7M-parameter policy, trained on 2 CPU cores. Every number is read from `figures/*.json` when the deck is
# built (`make slides`), every status from `figures/verdict.json` (`scripts/verdict.py`'s rule).

# %% tags=["hide"]
# The deck's code: it runs when `make slides` builds the deck, and only its outputs are shown. Slides follow the
# README's reading order: the idea (01, 03, 12), the experiments (04, 10, 02, 13, 11, 06), in production (05).
# Every status, p and interval comes from figures/verdict.json, which `scripts/verdict.py --write` computes under the
# inference rule (docs/verdict.md, "The inference rule"); the deck imports only scrl_min.
import ast
import io
import json
import re
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Image, Markdown, display

REPO = Path.cwd()
FIG = REPO / "figures"
from scrl_min import ARM_COLORS, mean_ci95, p_text

V = json.loads((FIG / "verdict.json").read_text())  # the verdict's rows and claims (scripts/verdict.py --write)
rs = V["rows"]  # every reward contrast under the rule: pooled over CPU models, Holm within its family
slopes = V["slopes"]
cs = V["claims"]
fam02 = [r for r in rs if r["family"] == "02"]

# Figures are drawn here for the projector, not embedded from the notebooks: a figure w × h inches is shown
# w·PX × h·PX pixels on the 1280 × 720 slide, so a label of LABEL_PT points is LABEL_PT · PX / 72 pixels (25 px).
PX = 100
LABEL_PT = 18
plt.rcParams.update({"font.size": LABEL_PT, "axes.titlesize": LABEL_PT + 2, "axes.labelsize": LABEL_PT + 1,
                     "xtick.labelsize": LABEL_PT, "ytick.labelsize": LABEL_PT, "legend.fontsize": LABEL_PT,
                     "lines.linewidth": 3, "lines.markersize": 10, "axes.spines.top": False,
                     "axes.spines.right": False})
# an arm's label on the slides, and its colour: scrl_min.ARM_COLORS, the one palette of the notebooks' figures too
ARM = {arm: (label, ARM_COLORS[arm]) for arm, label in (("bf16", "bf16\n(no mismatch)"), ("plain", "plain"),
                                                         ("tis", "TIS"), ("mis", "MIS"), ("sc", "SC"),
                                                         ("sc_mis", "SC + MIS"))}


def load(name, fig=FIG):
    path = fig / name
    return json.loads(path.read_text()) if path.exists() else None


def show(fig):
    """The figure as a PNG at 2 × PX dots per inch, shown at PX pixels per inch (sharp on a projector)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=2 * PX)
    width = int(round(fig.get_figwidth() * PX))
    plt.close(fig)
    display(Image(data=buf.getvalue(), width=width))


def fmt(x, d=3):
    return f"{x:+.{d}f}"


def find(rows, source, contrast, setting_prefix):
    """The row of `rows` from notebook `source` with this contrast, whose setting begins with `setting_prefix`."""
    return next(r for r in rows if r["source"] == source and r["contrast"] == contrast
                and r["setting"].startswith(setting_prefix))


def pending(what):
    display(Markdown(f"*{what} is not committed yet: its notebook has not run at full size (`notebooks/pending.yaml`).*"))


def pooled(r):
    """How a tested row's numbers were pooled, in the deck's words."""
    return f"pooled over {r['k']} CPU models ({r['n']} seeds)" if r["k"] > 1 else f"{r['n']} seeds, one CPU model"


def plain_status(text):
    return text.replace("**", "")


def claim_table(chosen):
    """The claims `chosen` (the verdict's claims) as a table: the claim in short, its notebook, mean ± 95% (seeds), and
    its status under the rule; notebook 10's gradient claims in one row when they share a status."""
    grad = [c for c in chosen if c["where"].startswith("10")]
    one = len({x["short_status"] for x in grad}) == 1
    lines = ["| the article's claim | nb | mean ± 95% | status |", "|---|---|---|---|"]
    for c in chosen:
        if c in grad[1:] and one:
            continue
        if c["row"] is not None and c["row"].get("family") == "07 P":  # 07's redesign: one row per schedule, both tests
            if c["row"]["kind"] != "greater":
                continue  # its non-inferiority row, folded into its schedule's row
            nonin = next(x for x in chosen if x["row"] is not None and x["row"].get("family") == "07 P"
                         and x["row"]["kind"] == "noninferior" and x["row"]["setting"] == c["row"]["setting"])
            sched = "refreshed every s + 1 steps" if c["row"]["setting"].startswith("refresh") else "a constant lag"
            lines.append(f"| SC + IS vs IS under staleness, {sched} | 07 | {c['short'].replace(' AUC (', '<br>(AUC, ')} "
                         f"| beats IS: {c['short_status']}<br>no worse than IS − 0.05: {nonin['short_status']} |")
            continue
        name, r = c["claim"], c["row"]
        if c in grad:
            name = (f"SC's gradient beats IS, TIS, MIS; its edge grows ({len(grad)} claims)" if one
                    else re.sub(r" \([^)]*\)", "", name))
        elif "against log10 KL" in name:
            name = "SC's edge grows with the mismatch: " + name.split("(")[1].split(" against")[0]
        else:
            name = name.split(" (")[0] + (name.split(")")[1] if name.endswith(tuple("0123456789")) else "")
        if r is None or "k" not in r:
            number = "–" if c in grad and one else c["short"]
        else:
            number = f"{fmt(r['mean'], d=2)} ± {r['ci95']:.2f} ({r['n']} seeds{'' if r['k'] > 1 else ', one CPU'})"
            if "slope" in r["contrast"]:
                number = f"slope {number}"
        number = number.split("; ")[0]  # one number per cell on a slide (the page has the rest)
        if len(number) > 28:  # a narrow column, so the claim's column keeps its width
            number = re.sub(r" (\(|to |SC )", r"<br>\1", number)
        lines.append(f"| {name} | {c['where'][:2]} | {number} | {c['short_status']} |")
    return "\n".join(lines)


# %% [markdown] tags=["slide"]
# ## Signal and drift (notebook 01)
#
# Per generated token, with advantage A and score s = ∇log p(y):
#
# **E_q[A s] = Cov_q(A, s) + E_q[A] · μ,  μ = Σ_v (q_v − p_v) ∇log p_v**
#
# - *Signal*, Cov_q(A, s): what the rewards teach.
# - *Drift*, E_q[A] · μ: zero on-policy (q = p); otherwise a pull toward the sampler, large with raw rewards
#   (A = r ≥ 0), smaller but not zero with group-centred advantages (E_q[A] = 0 per group at the first token only).
# - Plain ignores it; IS, TIS, MIS reweight tokens by p/q; **score centering (SC) subtracts μ from the score**.

# %% [markdown] tags=["slide"]
# ## SC needs only the engine's top-k log-probs (notebook 03)

# %%
t = load("03_topk_estimator.json")
if t:
    b = t["settings"]["σ=0.1, T=1"]["by_k"]
    i = b["k"].index(128)
    ks = [j for j, k in enumerate(b["k"]) if k < t["vocab_size"]]  # at k = V both are exact (error 0)
    fig, ax = plt.subplots(figsize=(11.5, 4.4))
    ax.plot([b["k"][j] for j in ks], [b["rel_err_l1_mean"][j] for j in ks], "o-", color="tab:blue",
            label="with the tail term")
    ax.plot([b["k"][j] for j in ks], [b["naive_rel_err_l1_mean"][j] for j in ks], "s--", color="tab:red",
            label="head only")
    ax.axvline(128, color="0.5", ls=":", lw=2)
    ax.text(128 * 1.1, 0.97, "k = 128", transform=ax.get_xaxis_transform(), va="top")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("k, tokens of the sampler's head")
    ax.set_ylabel("relative L1 error of μ")
    ax.legend(frameon=False)
    fig.tight_layout()
    show(fig)
    display(Markdown(f"At k = 128 (of V = {t['vocab_size']:,}) the head holds {b['head_mass_mean'][i]:.0%} of q; the "
                     f"drift's error is {b['rel_err_l1_mean'][i]:.2f} with the tail term, "
                     f"{b['naive_rel_err_l1_mean'][i]:.1f} without."))
else:
    pending("figures/03_topk_estimator.json")

# %% [markdown] tags=["slide"]
# ## What SC estimates, exactly (notebook 12)
#
# SC's expected update is Cov_q(A, s), the signal under the sampler's distribution, not the on-policy gradient.

# %%
m = load("12_method_note.json")
if m:
    bias = m["relative_bias_per_prefix"]
    prefixes = list(bias)
    shown = [("plain", "plain"), ("sc", "SC"), ("is", "exact token IS")]
    fig, ax = plt.subplots(figsize=(11.5, 3.9))
    x = np.arange(len(prefixes))
    top = max(bias[p]["plain"] for p in prefixes)
    for j, (key, label) in enumerate(shown):
        vals = [bias[p][key] for p in prefixes]
        ax.bar(x + (j - 1) * 0.27, vals, 0.27, color=ARM_COLORS[key], label=label)
        for xi, v in zip(x + (j - 1) * 0.27, vals):
            if v < 0.01 * top:  # a bar too short to see: say so
                ax.text(xi, 0, f"{v:.0f}", ha="center", va="bottom", color=ARM_COLORS[key])
    ax.set_xticks(x, [f"prefix {p}" for p in prefixes])
    ax.set_ylabel("‖E[update] − g*‖ / ‖g*‖")
    ax.set_ylim(0, 1.3 * top)
    ax.legend(frameon=False, ncol=3, loc="upper right")
    fig.tight_layout()
    show(fig)
    sc_b = [bias[p]["sc"] for p in prefixes]
    pl_b = [bias[p]["plain"] for p in prefixes]
    display(Markdown(f"Exact, over the whole vocabulary, at {len(prefixes)} prefixes (FP8 + σ "
                     f"{m['parameters']['exact_noise']:g}): token IS is unbiased; SC misses g* by "
                     f"{min(sc_b):.0%}-{max(sc_b):.0%}, plain by {min(pl_b):.0%}-{max(pl_b):.0%}."))
else:
    pending("figures/12_method_note.json")

# %% [markdown] tags=["slide"]
# ## How big real mismatches are (notebook 04)

# %%
sev, mm = load("04_severity.json"), load("04_sampler_mismatch.json")
if sev:
    bars = [(v["summary"]["kl_k3"], name) for name, v in sev["samplers"].items()
            if name != "bf16" and ("FP8 KV" not in name or name == "bf16 + FP8 KV")]
    head = None
    if mm:
        head = next((v["by_temperature"]["1"]["kl_k3"] for n, v in mm["samplers"].items() if "σ" in n), None)
        if head is not None:
            bars.append((head, "fp8 + σ 0.1: the headline"))
    bars.sort()
    fig, ax = plt.subplots(figsize=(11.5, 5.0))
    ax.barh(range(len(bars)), [k for k, _ in bars],
            color=["tab:red" if "headline" in n else "tab:blue" for _, n in bars])
    ax.set_yticks(range(len(bars)), [n for _, n in bars])
    ax.set_xscale("log")
    ax.set_xlabel("KL(q‖p) per generated token, nats (T = 1)")
    fig.tight_layout()
    show(fig)
    display(Markdown("The headline experiment's sampler (red) sits above every real format measured here."))
else:
    pending("figures/04_severity.json")

# %% [markdown] tags=["slide"]
# ## At the gradient: one update's error (notebook 10)

# %%
g = load("10_gradient_test.json")
if g:
    display(Markdown(claim_table([c for c in cs if c["where"].startswith("10")])))
    display(Markdown("One-sided for SC; the primary alone, the three secondaries Holm among themselves. SC's edge "
                     "over IS is variance, not bias (`docs/verdict.md`)."))
else:
    pending("figures/10_gradient_test.json")

# %% [markdown] tags=["slide"]
# ## The headline run (notebook 02)

# %%
h = load("02_fp8_arms.json")
if h and fam02:
    reps = [load("02_fp8_arms.json", REPO / f) for f in V["replicates"]["02"]]
    arms = list(h["final"])
    fig, ax = plt.subplots(figsize=(11.5, 4.6))
    for x, arm in enumerate(arms):
        seeds = np.mean([d["final"][arm]["final_eval_per_seed"] for d in reps], axis=0)
        mean, half = mean_ci95(seeds)
        label, color = ARM.get(arm, (arm, ARM_COLORS.get(arm, "k")))
        ax.plot(x + np.linspace(-0.18, 0.18, len(seeds)), seeds, "o", color=color, alpha=0.55)
        ax.errorbar(x + 0.3, mean, yerr=half, fmt="s", color="k", capsize=6, lw=3)
    ax.set_xticks(range(len(arms)), [ARM.get(a, (a,))[0] for a in arms])
    ax.set_ylabel("final clean reward")
    ax.set_title(f"each dot a seed, {pooled(fam02[0])}", loc="left")
    fig.tight_layout()
    show(fig)
    p = h["parameters"]
    display(Markdown(f"{h.get('setting', 'FP8 + 10% weight noise')} (KL {h['kl_qp_step0']['plain']:.1e} per token at "
                     f"the start), {p['advantage_mode']} rewards, {p['steps']} steps, lr {p['lr']:g}; black: mean ± 95%. "
                     f"Plain pays for the mismatch (next slide: the five claims)."))
else:
    pending("figures/02_fp8_arms.json")

# %% [markdown] tags=["slide"]
# ## The headline's five claims, under the rule

# %%
if fam02:
    order = ["plain − bf16", "sc − plain", "sc − mis", "sc − tis", "sc_mis − mis"]
    shown02 = sorted(fam02, key=lambda r: order.index(r["contrast"]) if r["contrast"] in order else len(order))
    tests = {"less": "< 0", "greater": "> 0", "noninferior": "> −0.05", "equivalent": "within ±0.05"}
    lines = ["| claim | mean ± 95% | Holm-level interval | Holm p | status |", "|---|---|---|---|---|"]
    for r in shown02:
        lo, hi, a = r["holm_interval"]
        claim = f"{r['contrast']} {tests.get(r['kind'], r['kind'])}".replace(" ", "\u00a0")  # one line
        lines.append(f"| {claim} | {fmt(r['mean'])} ± "
                     f"{r['ci95']:.3f} | [{lo:+.3f}, {hi:+.3f}] | {p_text(r['p_holm'])} | {r['short_status']} |")
    display(Markdown("\n".join(lines)))
    display(Markdown(f"Final clean reward, {pooled(fam02[0])}; Holm within notebook 02's {len(fam02)} "
                     f"pre-registered contrasts. Holm-level interval: the (1 − 2a) t interval at Holm's step level a; "
                     f"its claim-side end clears the threshold exactly when that step rejects."))
else:
    pending("figures/02_fp8_arms.json")

# %% [markdown] tags=["slide"]
# ## The confirmatory run (notebook 13): fresh seeds, pre-registered

# %%
def seeds_done(pre) -> int:
    """Family A's seeds whose every arm has finished its run in results/13_confirmatory (metrics.jsonl complete)."""
    arms = pre["arms"] + [a for a in pre["extra_arms"] if a not in pre["arms"]]
    done = 0
    for seed in range(pre["first_seed"], pre["first_seed"] + pre["n_seeds"]):
        runs = [next((REPO / "results" / "13_confirmatory").glob(f"lr{pre['lr']:g}-{a}-s{seed}-*/metrics.jsonl"), None)
                for a in arms]
        done += all(r is not None and len(r.read_text().splitlines()) == pre["steps"] for r in runs)
    return done


def holm_p_cell(r) -> str:
    """A table's Holm p: the claim's test's, or for a contradicted row the opposite test's, which decided it (opp.)."""
    return f"{p_text(r['p_opposite_holm'])} (opp.)" if r["status"] == "contradicted" else p_text(r["p_holm"])


src = (REPO / "notebooks" / "13_confirmatory.py").read_text()
cell = src.partition('tags=["parameters"]')[2].partition("\n# %%")[0]
pre = {n.targets[0].id: ast.literal_eval(n.value) for n in ast.parse(cell).body
       if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)}
ran = (FIG / "13_confirmatory.json").exists()
arms13 = ", ".join(pre["arms"])
c13 = V["confirmatory"]
fam13 = [r for r in c13 if r["family"] == "13 A"]
if ran and fam13:  # family A's primary under its pre-registered rule, as the headline table shows notebook 02's
    tests = {"less": "< 0", "greater": "> 0", "noninferior": "> −0.05", "equivalent": "within ±0.05"}
    lines = ["| claim | mean ± 95% | Holm-level interval | Holm p | status |", "|---|---|---|---|---|"]
    for r in fam13:
        lo, hi, a = r["holm_interval"]
        claim = f"{r['contrast']} {tests[r['kind']]}".replace(" ", "\u00a0")
        status = r["short_status"].replace(" at −0.05", "")  # the claim's cell names the test's threshold
        lines.append(f"| {claim} | {fmt(r['mean'])} ± {r['ci95']:.3f} | [{lo:+.3f}, {hi:+.3f}] | {holm_p_cell(r)} | "
                     f"{status} |")
    display(Markdown("\n".join(lines)))
    gentle = [r for r in c13 if r["family"] == "13 B"]
    display(Markdown(
        f"AUC, {fam13[0]['n']} fresh seeds ({pre['first_seed']}-{pre['first_seed'] + fam13[0]['n'] - 1}), Holm over "
        f"family A's {len(fam13)} hypotheses; margin ±{pre['margin']:g}; opp.: the opposite test's Holm p. Family B, "
        f"lr {pre['gentle_lr']:g} ({gentle[0]['n'] if gentle else 0} seeds): "
        + "; ".join(f"{r['contrast']} {tests[r['kind']]}: {plain_status(r['short_status'])}" for r in gentle)
        + "."))
else:
    display(Markdown(
        f"- **Fresh seeds** {pre['first_seed']}-{pre['first_seed'] + pre['n_seeds'] - 1} ({pre['n_seeds']}, from a "
        f"power computation), none used before; primary metric: area under the clean-eval curve; margin "
        f"±{pre['margin']:g}.\n"
        f"- **Family A**, the headline sampler, arms {arms13}: does a mismatch cost plain; does SC recover it; does "
        f"SC match (±{pre['margin']:g}) or beat TIS and MIS; is SC more than a group baseline?\n"
        f"- **Family B**, lr {pre['gentle_lr']:g} instead of {pre['lr']:g} ({pre['gentle_n_seeds']} seeds; "
        f"{', '.join(pre['gentle_arms'])}): do the cost and SC's recovery survive a gentler optimizer?\n"
        f"- **No results yet**: the pre-registration was committed before any run; {seeds_done(pre)} of family A's "
        f"{pre['n_seeds']} seeds have finished (`results/13_confirmatory/`), and none has been analysed."))

# %% [markdown] tags=["slide"]
# ## GRPO's own regime: group-centred advantages (notebook 16)

# %%
reg = V["regime"]
if reg:  # notebook 16's pre-registered family on the AUC, Holm within its six hypotheses, as the notebook saved it
    p16 = reg["parameters"]
    lines = ["| claim | mean ± 95% | Holm-level interval | Holm p | status |", "|---|---|---|---|---|"]
    for r in reg["rows"]:
        name = r["wording"].split(" (")[0].replace("… or costs it nothing worth a correction", "… or nothing (±0.05)")
        lines.append(f"| {name} | {fmt(r['mean'])} ± {r['ci95']:.3f} | [{r['mean'] - r['ci_holm']:+.3f}, "
                     f"{r['mean'] + r['ci_holm']:+.3f}] | {holm_p_cell(r)} | {r['status']} |")
    display(Markdown("\n".join(lines)))
    display(Markdown(f"A = 2(r − mean_G r) in every arm; {p16['sampler_precision'].upper()} + {p16['noise_std']:.0%} "
                     f"weight noise, {len(p16['seeds'])} fresh seeds, lr {p16['lr']:g}; AUC. opp.: the opposite "
                     f"test's Holm p."))
else:
    pending("figures/16_grpo_regime.json")

# %% [markdown] tags=["slide"]
# ## Does SC's edge grow with the mismatch? (notebook 11)

# %%
d11 = load("11_severity_slope.json")
if d11 and slopes:
    fig, ax = plt.subplots(figsize=(11.5, 3.9))
    for k, (name, color) in enumerate((("sc − plain", ARM_COLORS["sc"]), ("sc − mis", ARM_COLORS["mis"]))):
        rows11 = [find(rs, "11", name, f"{rung}, ") for rung in d11["rungs"]]
        kl = np.array([r["kl"] for r in rows11]) * (1.06 if k else 1 / 1.06)
        ax.errorbar(kl, [r["mean"] for r in rows11], yerr=[r["ci95"] for r in rows11], fmt="o", color=color,
                    capsize=6, label=name)
    ax.axhline(0, color="0.4", lw=1.5)
    ax.set_xscale("log")
    ax.set_xlabel("run-mean KL(q‖p) per token (five samplers)")
    ax.set_ylabel("paired difference")
    ax.set_title(f"final clean reward, {pooled(slopes[0])}: mean ± 95%", loc="left")
    ax.legend(frameon=False, loc="upper left")
    fig.tight_layout()
    show(fig)
    display(Markdown("\n".join(
        f"- {r['contrast']}: {fmt(r['mean'], d=2)} ± {r['ci95']:.2f} per tenfold KL; Holm p "
        f"{p_text(r['p_holm'])} ({r['m']} declared slopes): **{plain_status(r['short_status'])}**"
        for r in sorted(slopes, key=lambda r: r["contrast"] != "sc − plain slope"))))
else:
    pending("figures/11_severity_slope.json")

# %% [markdown] tags=["slide"]
# ## Where plain can pay for the mismatch at all (notebook 06)

# %%
d06 = load("06_regime_map.json")
if d06:
    cells = list(d06["measured"])
    ratio = [d06["measured"][c]["ratio"] for c in cells]
    fig, ax = plt.subplots(figsize=(11.5, 3.9))
    ax.barh(range(len(cells)), ratio, color=["tab:red" if c.startswith("raw") else "tab:blue" for c in cells])
    ax.set_yticks(range(len(cells)), [c.replace(" · ", " rewards · ") for c in cells])
    ax.invert_yaxis()
    ax.set_xlabel("drift / signal at the first step")
    fig.tight_layout()
    show(fig)
    map06 = [r for r in rs if r["family"] == "06 map"]
    decided = sum(r["p_holm"] < V["alpha"] for r in map06)
    m06 = d06["measured"]
    fewer = {c.split(" · ")[1]: m06[c]["drift_norm"] / m06[c.replace("raw", "centered")]["drift_norm"]
             for c in cells if c.startswith("raw") and c.replace("raw", "centered") in m06}  # raw / centred, per token
    display(Markdown(f"Group-centred advantages (E[A] = 0 per group) remove the drift at the first token only: "
                     f"per token over a completion, raw ÷ centred drift is "
                     + ", ".join(f"{v:.1f}× under {k}" for k, v in fewer.items())
                     + f". In training reward, {decided} of notebook 06's {map06[0]['m'] if map06 else 0} map cells "
                     f"differ after its Holm correction ({len(d06['parameters']['seeds'])} seeds each)."))
else:
    pending("figures/06_regime_map.json")

# %% [markdown] tags=["slide"]
# ## In production: the same loss in TRL (notebook 05)

# %%
t5 = load("05_score_centering_in_trl.json")
if t5:  # the point is the gradient check; the curves are one seed's, and say so in their title
    gc, p5 = t5["gradient_check"], t5["parameters"]
    display(Markdown(f"**The point: the same gradient.** TRL's `GRPOTrainer` with the SC loss matches the "
                     f"reference gradient to {gc['trl_vs_reference_rel']:.0e} (relative, one batch of {gc['tokens']} tokens); "
                     f"the centering term moves that gradient by {gc['centering_term_rel']:.0%} of its norm."))
    fig, ax = plt.subplots(figsize=(11.5, 3.3))
    for arm, (label, color) in (("plain", ARM["plain"]), ("sc", ARM["sc"])):
        ax.plot(range(1, len(t5["curves"][arm]["reward"]) + 1), t5["curves"][arm]["reward"], color=color, label=label)
    ax.set_title("one seed per arm: which ends higher is this seed's noise", loc="left")
    ax.set_xlabel("GRPOTrainer step")
    ax.set_ylabel("training reward")
    ax.legend(frameon=False, loc="upper left")
    fig.tight_layout()
    show(fig)
    display(Markdown(f"FP8 + σ {p5['noise_std']:g} sampler, seed {p5['seed']}: an earlier run of this seed, on another "
                     f"CPU, ended the other way round (notebook 05). Paired seeds: notebooks 02, 06, 11. With vLLM: "
                     f"`docs/trl.md`."))
else:
    pending("figures/05_score_centering_in_trl.json")

# %% [markdown] tags=["slide"]
# ## The verdict: the mismatch's cost, and what recovers it

# %%
# notebook 13's family B (the gentler lr) is on the confirmatory slide, with family A's table; the reward claims
# are two slides (one message each): the cost and its recovery here, SC against importance sampling next
reward = [c for c in cs if c["where"][:2] in ("02", "11", "13") and not (c["row"] or {}).get("family", "").startswith("13 B")]
against_is = [c for c in reward if re.search(r"TIS|MIS|SC \+ IS", c["claim"]) and "grows" not in c["claim"]]
cost = [c for c in reward if c not in against_is]
display(Markdown(claim_table(cost)))
display(Markdown(("Notebook 13's rows: fresh seeds, the area under the clean-eval curve (its primary); the others "
                  "pooled" if any(c["where"].startswith("13") for c in cost) else "Pooled")
                 + f" over {len(V['replicates']['02'])} CPU models (the seeds shown); every interval and p: "
                   "`docs/verdict.md`."))

# %% [markdown] tags=["slide"]
# ## The verdict: SC against importance sampling

# %%
display(Markdown(claim_table(against_is)))
display(Markdown("\"Matches\": both one-sided tests clear ±0.05 (equivalence); \"matches or beats\": non-inferior at "
                 "−0.05; \"beats\": one-sided against 0. Every interval and p: `docs/verdict.md`."))

# %% [markdown] tags=["slide"]
# ## The verdict under staleness, for length, for the estimator

# %%
display(Markdown(claim_table([c for c in cs if c not in reward and c["where"][:2] not in ("10", "13")])))
st07 = V["staleness"]
if st07:  # the redesign: SC + IS − IS per seed, the mean over lags and IS kinds, Holm within its four hypotheses
    prim = [r for r in st07 if r["family"] == "07 P"]
    stale_text = (f"Staleness (07, pre-registered): lr {load('07_staleness.json')['parameters']['lr']:g}, Holm "
                  f"within its {len(prim)} hypotheses.")
else:
    stale_text = ("Staleness (notebook 07): its first design's 3 seeds on one CPU model (its pre-registered redesign "
                  "has not finished), exploratory.")
display(Markdown(stale_text + " Length (14): the drift alone; plain's push took both signs, SC leaves "
                 "about a seventh of it (exploratory). Every interval and p: `docs/verdict.md`."))

# %% [markdown] tags=["slide"]
# ## What this does not show
#
# - **Scale**: k = 128 is 6% of this vocabulary, 0.1% of a 150k one; real FP8 weights, long sequences and the
#   article's recipe need a GPU and a real model.
# - **Realistic advantages, one setting**: notebook 16 tests group-centred advantages at one sampler (FP8 + 20%
#   weight noise), 24-token completions, one model size and one lr, where the mismatch helped plain and SC trained
#   below it; longer completions, where public measurements find a larger mismatch, are untested.
# - **Against a baseline**: notebook 13's group baseline, no correction, beats SC by far; SC's edge is over
#   REINFORCE without one.
#
# `make reproduce-full` reruns the experiments (about 5 h on 2 cores from a clone, which holds notebooks 13's and 07's
# run records; about 12-13 h training those again; resumable); `make slides` builds this deck.
