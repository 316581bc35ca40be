"""The verdict page follows from the committed JSON and its inference rule (docs/verdict.md, "The inference rule"):
the page and the README's verdict blocks regenerate byte for byte; the rows it pools (seeds as units across
replicates, the heterogeneity test, Holm within each family, the seeds that would decide a row, the status) agree
with scipy and Holm by hand (the rule's pieces themselves: tests/test_stats_rule.py); the rows notebooks saved are
read as saved, each claim to its wording; a claim decided in its own family is not demoted by a page-wide one; and
the numbers notebook 02's closing section quotes are the ones scripts/verdict.py computes."""
import copy as copy_module
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import scrl_min  # noqa: E402
import verdict  # noqa: E402
import verdict_page as page  # noqa: E402
from scrl_min.stats import pool_replicates, replicate_heterogeneity  # noqa: E402  (the rule, defined once)

M = verdict.MARGIN
V = json.loads((verdict.FIG / "verdict.json").read_text())  # the verdict's data as committed (test_page_... checks it)


def _with_regime(rows: list) -> dict:
    """The committed verdict data with notebook 16's rows replaced by `rows`."""
    return dict(V, regime=dict(V["regime"], rows=rows))


@pytest.fixture(scope="module")
def made():
    m = verdict.made()
    return m["rows"], m


# ── the page is the JSON under the rule ────────────────────────────────────────────────────────────
def test_page_and_readme_regenerate_byte_for_byte(made, tmp_path):
    """Writing the generated blocks into copies of docs/verdict.md and README.md changes not one byte; the forest
    plot's JSON is the rows themselves, and the deck's (figures/verdict.json) is what verdict.made()["deck"] is now."""
    rs, m = made
    for path, names in ((verdict.PAGE, page.PAGE_BLOCKS), (verdict.README, page.README_BLOCKS)):
        copy = tmp_path / path.name
        shutil.copy(path, copy)
        verdict.write_blocks(copy, {k: m[k] for k in names})
        assert copy.read_bytes() == path.read_bytes(), (
            f"{path.relative_to(REPO)} differs from what scripts/verdict.py makes: run python scripts/verdict.py --write")
    assert (verdict.FIG / "verdict_forest.json").read_text() == json.dumps(rs, indent=1)
    assert (verdict.FIG / "verdict.json").read_text() == json.dumps(m["deck"], indent=1), \
        "figures/verdict.json is stale: run python scripts/verdict.py --write"
    readme = verdict.README.read_text()
    assert "docs/verdict.md" in readme[:3000], "the README's first screen links the verdict"


def test_the_page_renders_from_the_committed_json_alone(tmp_path):
    """The results are published as data: every generated block of the page and the README, and every claim of
    figures/verdict.json, renders from that JSON as committed, in a process where the renderer, once imported, may
    open or list no file (an audit hook refuses it) and where the collector was never imported; and a reading
    changed in the data changes the page, so the page's numbers are the JSON's."""
    script = f"""
import json, sys
from pathlib import Path
sys.path[:0] = [{str(REPO)!r}, {str(REPO / "scripts")!r}]
import verdict_page
v = json.loads(Path({str(verdict.FIG / "verdict.json")!r}).read_text())

def refuse(event, args):
    if event in ("open", "os.listdir", "os.scandir", "glob.glob", "shutil.copyfile"):
        raise RuntimeError(f"the renderer touched a file: {{event}} {{args[0]!r}}")

sys.addaudithook(refuse)
out = verdict_page.blocks(v)
assert "verdict" not in sys.modules, "the renderer imported the collector"
sys.stdout.write(json.dumps(out))
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout)
    for path, names in ((verdict.PAGE, page.PAGE_BLOCKS), (verdict.README, page.README_BLOCKS)):
        copy = tmp_path / path.name
        shutil.copy(path, copy)
        verdict.write_blocks(copy, {k: out[k] for k in names})
        assert copy.read_bytes() == path.read_bytes(), f"{path.name} does not render from figures/verdict.json alone"
    assert out["claim_rows"] == V["claims"]
    changed = copy_module.deepcopy(V)
    changed["topk"]["head_mass"] += 0.5
    assert page.blocks(changed)["claims"] != out["claims"]
    with pytest.raises(ValueError, match="margin"):
        page.blocks(dict(V, margin=0.1))


def test_every_generated_table_row_has_its_headers_cells(made):
    """A "|" inside a cell's text splits a Markdown table's row (the C7 status once lost its reading after "SC's"):
    every row of every generated table has as many cells as its header, counting only unescaped pipes."""
    _, m = made
    for name in page.PAGE_BLOCKS + page.README_BLOCKS:
        header = None
        for line in m[name].splitlines():
            if not line.startswith("|"):
                header = None
                continue
            cells = len(re.findall(r"(?<!\\)\|", line))
            header = cells if header is None else header
            assert cells == header, f"a row of the {name} block has {cells - 1} cells, its header {header - 1}: {line[:120]}"


def test_the_rule_is_stated_before_the_claims_and_no_cell_is_a_vote():
    page_text = " ".join(verdict.PAGE.read_text().split())
    rule = page_text.index("## The inference rule")
    assert rule < page_text.index("<!-- verdict:claims -->")
    for term in ("TOST", "non-inferiority at −M", "M = 0.05", "heterogeneity", "sensitivity column", "not decided",
                 "seeds 0-4 were seen before its pre-registration", "## What this does not show"):
        assert term in page_text, term
    for text in (page_text, verdict.README.read_text()):
        assert "point estimate lower in" not in text and "resolved in 0 of" not in text  # no votes over cells
        assert "on both CPU models' runs |" not in text and "reproduced on one CPU model's runs" not in text  # both-must-pass


# ── the rule's pieces against independent computations ─────────────────────────────────────────────
D = np.array([0.12, -0.03, 0.07, 0.21, 0.02, 0.09, -0.05, 0.15])  # a hand-made sample of paired differences


def test_pooling_takes_the_seed_as_the_unit():
    """Two replicates of 6 seeds: the units are the per-seed means, n = 6 (not 12), the t interval has 5 df."""
    a = np.array([0.1, 0.3, -0.2, 0.05, 0.2, 0.0])
    b = np.array([0.2, 0.1, -0.1, 0.15, 0.4, -0.1])
    r = verdict.decide_families([verdict.tested("x", "s", "a − b", [a, b], family="02", kind="greater")])[0]
    assert r["per_seed"] == pytest.approx(list((a + b) / 2)) and r["n"] == 6 and r["k"] == 2
    u = (a + b) / 2
    assert r["ci95"] == pytest.approx(stats.t.ppf(0.975, 5) * u.std(ddof=1) / math.sqrt(6), rel=5e-4)  # t to 3 decimals
    assert r["p"] == pytest.approx(stats.ttest_1samp(u, 0.0, alternative="greater").pvalue, rel=1e-10)
    assert r["replicate_means"][1][0] == pytest.approx(b.mean())
    with pytest.raises(ValueError, match="equal-length"):
        pool_replicates([a, b[:5]])


def test_the_headline_rows_pool_every_cpu_model(made):
    """The committed rows of notebook 02 are the mean, per seed, of the differences in figures/ and in every folder
    of figures/replicates/ that holds notebook 02's JSON; their heterogeneity p is a one-way repeated-measures F test
    over those replicates (for two, the paired t test), computed here with numpy and scipy."""
    rs, _ = made
    dirs = [verdict.FIG] + sorted(d for d in (verdict.FIG / "replicates").iterdir() if (d / "02_fp8_arms.json").exists())
    assert verdict.replicate_dirs("02") == dirs
    if len(dirs) == 1:
        pytest.skip("figures/replicates/ holds no run of notebook 02")
    runs = [json.loads((f / "02_fp8_arms.json").read_text())["final"] for f in dirs]
    for r in (r for r in rs if r["source"] == "02"):
        a, b = r["contrast"].split(" − ")
        per = np.array([np.array(x[a]["final_eval_per_seed"]) - np.array(x[b]["final_eval_per_seed"]) for x in runs])
        assert r["k"] == len(dirs)
        assert r["per_seed"] == pytest.approx(list(per.mean(0)), abs=1e-15)
        k, n = per.shape
        if k == 2:
            assert r["het_p"] == pytest.approx(stats.ttest_rel(per[0], per[1]).pvalue, rel=1e-10)
        # independent route: two least-squares fits, seed blocks alone against seed blocks + replicate effects
        y, seed_x = per.ravel(), np.tile(np.eye(n), (k, 1))
        full_x = np.hstack([seed_x, np.repeat(np.eye(k), n, axis=0)[:, 1:]])
        rss = [float(np.sum((y - x @ np.linalg.lstsq(x, y, rcond=None)[0]) ** 2)) for x in (seed_x, full_x)]
        f_stat = ((rss[0] - rss[1]) / (k - 1)) / (rss[1] / ((k - 1) * (n - 1)))
        assert r["het_p"] == pytest.approx(stats.f.sf(f_stat, k - 1, (k - 1) * (n - 1)), rel=1e-8)


def test_heterogeneity_flags_replicates_that_differ():
    rng = np.random.default_rng(0)
    a = rng.normal(0.1, 0.1, 10)
    b = a + 0.25 + rng.normal(0, 0.03, 10)  # the same seeds, shifted on the other replicate
    c = a + rng.normal(0, 0.03, 10)  # the same seeds, no shift
    assert replicate_heterogeneity([a, b]) == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-10)
    assert replicate_heterogeneity([a, b]) < 0.05 and replicate_heterogeneity([a, c]) > 0.05
    assert replicate_heterogeneity([a]) is None
    # three replicates: the F test of the replicate effect with seeds as blocks, against least squares
    x = np.array([a, b, c])  # (k, n)
    k, n = x.shape
    y = x.ravel()
    seed = np.tile(np.eye(n), (k, 1))
    rep = np.repeat(np.eye(k)[:, 1:], n, axis=0)
    rss = [np.linalg.lstsq(X, y, rcond=None)[1][0] for X in (seed, np.hstack([seed, rep]))]
    f = ((rss[0] - rss[1]) / (k - 1)) / (rss[1] / ((k - 1) * (n - 1)))
    assert replicate_heterogeneity(x) == pytest.approx(stats.f.sf(f, k - 1, (k - 1) * (n - 1)), rel=1e-8)
    # a flag never changes a status: the row says so beside it
    r = verdict.decide_families([verdict.tested("x", "s", "a − b", [a, b], family="02", kind="greater")])[0]
    assert r["status"] == "reproduced" and "replicates differ" in page.status_text(r)


def test_holm_by_hand_and_within_each_family():
    """Holm runs within each row's family, never over the page: four rows in two families, adjusted by hand."""
    rng = np.random.default_rng(3)
    rows = [verdict.tested("02", f"s{i}", "c", [rng.normal(0.05, 0.1, 8)], family=f, kind="greater")
            for i, f in enumerate(["02", "02", "07 P", "07 P"])]
    verdict.decide_families(rows)
    ps = [stats.ttest_1samp(r["per_seed"], 0.0, alternative="greater").pvalue for r in rows]
    assert [r["p_holm"] for r in rows] == pytest.approx(_holm_by_hand(ps[:2]) + _holm_by_hand(ps[2:]), rel=1e-9)
    assert [r["m"] for r in rows] == [2, 2, 2, 2]


def test_a_claim_decided_in_its_family_is_not_demoted_by_a_page_wide_one():
    """Two contrasts in their notebook's family and 60 descriptive rows: the family's Holm decides the claim, the
    page-wide Holm (62 rows) would not, and only appears as the sensitivity column."""
    rng = np.random.default_rng(1)
    cost = [-0.12, -0.05, -0.2, -0.02, -0.15, -0.08, -0.1, 0.03]  # one-sided p about 0.006
    claim = verdict.tested("02", "s", "plain − bf16", [cost], family="02", kind="less")
    other = verdict.tested("02", "s", "sc − mis", [[-0.2, 0.1, -0.3, 0.05, -0.15, 0.0, -0.25, 0.1]], family="02",
                           kind="noninferior")
    noise = [verdict.tested("06", f"c{i}", "sc − plain", [rng.normal(0, 0.1, 3)]) for i in range(60)]
    rows = verdict.page_holm(verdict.decide_families([claim, other] + noise))
    assert claim["p"] * 62 > 0.05 and claim["p_page"] > 0.05  # page-wide it would not hold
    assert claim["p_holm"] < 0.05 and claim["status"] == "reproduced"
    assert all(r["status"] == "" and r["p_holm"] is None for r in rows[2:])  # descriptive rows get no status


def test_every_status_on_the_page_follows_from_its_family(made):
    rs, _ = made
    rs = rs + verdict.slope_rows()
    for r in rs:
        if r["family"] is None:
            assert r["status"] == ""
            continue
        assert r["status"] == _status(r["p_holm"], r["p_opposite_holm"], r["kind"])
        if r["family"] not in ("06 map",):
            fam = [x for x in rs if x["family"] == r["family"]]
            want = verdict.holm([x["p"] for x in fam])[[x is r for x in fam].index(True)]
            assert r["p_holm"] == pytest.approx(want)


def test_undecided_rows_count_units_at_their_stated_effect():
    """Every undecided row on the page counts the units that would decide it at its stated effect (the margin
    beyond the null's edge; notebook 10's predicted gap 2-3 × KL in ‖g*‖² units; notebook 11's observed slope) and
    its Holm step's level, recomputed here: Holm's step by hand, the one-sided count by the exact noncentral t
    (80% power reached at n, not at n − 2), the gradient effect from the notebook's JSON."""
    rs = verdict.tested_rows() + verdict.slope_rows() + verdict.gradient_rows(verdict._load("10_gradient_test.json"))
    undecided = [r for r in rs if r.get("status") == "not decided"]
    assert len(undecided) >= 5
    for r in undecided:
        fam = [x for x in rs if x["family"] == r["family"]]
        if "p_holm_given" in r:
            level = 0.05 / r["m"]
        else:
            order = sorted(range(len(fam)), key=lambda i: fam[i]["p"])
            level = 0.05 / (len(fam) - order.index(next(i for i, x in enumerate(fam) if x is r)))
        assert r["seeds"]["level"] == pytest.approx(level), r["contrast"] if "contrast" in r else r["label"]
        if r["family"].startswith("10"):
            c = verdict._load("10_gradient_test.json")
            effects = [-gap * r["mean"] / r["rel_gap"] for gap in r["predicted"]]  # M̄ = D / rel_gap
        elif r["family"] == "11 slopes":
            effects = [r["mean"]]
        else:
            effects = [M]
        for e, n in zip(effects, r["seeds"]["n"]):
            if r["kind"] == "equivalent" or n is None or n > 5000:
                continue
            power = [stats.nct.sf(stats.t.ppf(1 - level, k - 1), k - 1, e * math.sqrt(k) / r["sd"]) for k in (n - 2, n)]
            assert power[1] >= 0.78 and power[0] < 0.8, (r.get("contrast", r.get("label")), n, power)


# ── notebook 10: its pre-registered primary alone, its three secondaries under Holm, the rest descriptive ──
def _holm_by_hand(p):
    """Holm's step-down adjusted p, written out: sort, multiply by m − k, running maximum, cap at 1."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    out, run = [0.0] * len(p), 0.0
    for k, i in enumerate(order):
        run = max(run, min(1.0, (len(p) - k) * p[i]))
        out[i] = run
    return out


def _status(p_holm, p_opp_holm, kind="less"):
    """The rule's status written out (docs/verdict.md, rule 5); '' for a row no claim reads (two-sided)."""
    if kind == "two-sided":
        return ""
    won = {"equivalent": "equivalent within ±0.05", "noninferior": "non-inferior at −0.05"}.get(kind, "reproduced")
    return won if p_holm < 0.05 else "contradicted" if p_opp_holm is not None and p_opp_holm < 0.05 else "not decided"


@pytest.fixture(scope="module")
def g10():
    return json.loads((verdict.FIG / "10_gradient_test.json").read_text())


def test_the_gradient_primary_is_the_declared_one_tested_alone(g10):
    """The primary's t interval and two-sided p recomputed with scipy from D, sd_D, the reference's term and n (as
    notebook 10 declared it) equal the JSON's; the rule's one-sided p is the half of it on SC's side, Holm over a
    family of one leaves it, and the status follows at α = 0.05."""
    pr, n = g10["primary"], g10["primary"]["n"]
    se = math.sqrt(pr["sd_D"] ** 2 / n + pr["ref_term_sd"] ** 2)
    assert stats.t.ppf(0.975, n - 1) * se == pytest.approx(pr["D_ci95"], rel=1e-9)
    assert stats.t.ppf(0.975, n - 1) * pr["sd_D"] / math.sqrt(n) == pytest.approx(pr["D_ci95_t_only"], rel=1e-9)
    two = 2 * stats.t.sf(abs(pr["D"]) / se, n - 1)
    assert two == pytest.approx(pr["p"], rel=1e-6, abs=0)
    one = pr["p"] / 2 if pr["D"] < 0 else 1 - pr["p"] / 2
    saved = {r["id"]: r for r in g10["claims"]}  # the rows notebook 10 saved under the rule are these
    assert saved["primary"]["mean"] == pr["D"] and saved["primary"]["family"] == "primary"
    rows = verdict.gradient_rows(g10)
    r = rows[0]
    assert r["key"] == "primary" and r["mean"] == pr["D"] and r["n"] == n and r["ci95"] == pr["D_ci95"]
    assert r["p"] == pytest.approx(one, rel=1e-6, abs=0) and r["m"] == 1
    assert r["p_holm"] == pytest.approx(one, rel=1e-6, abs=0)
    assert [x for x in rows if x["family"] == r["family"]] == [r]  # alone in its family
    assert r["status"] == _status(one, 1 - one)
    if r["status"] == "reproduced":  # the rule's one-sided test and the notebook's two-sided decision agree here
        assert pr["decision"].startswith("decided: SC's MSE is lower") and pr["rel_gap"] + pr["rel_ci95"] < 0


def test_the_gradient_secondaries_are_one_holm_family_of_three(g10):
    """S1-S3, and only they, share a family; their Holm p (by hand, over the one-sided p from the JSON's two-sided
    ones) and statuses are the page's; the notebook's own Holm p is Holm over its two-sided p."""
    sec = g10["secondary"]
    assert sorted(k.split(" · ")[0] for k in sec) == ["S1", "S2", "S3"]
    two = [c["p"] for c in sec.values()]
    assert [c["p_holm"] for c in sec.values()] == pytest.approx(_holm_by_hand(two), rel=1e-9, abs=0)
    one = [p / 2 if c["D"] < 0 else 1 - p / 2 for p, c in zip(two, sec.values())]
    want, opp = _holm_by_hand(one), _holm_by_hand([1 - p for p in one])
    rows = verdict.gradient_rows(g10)[1:]
    assert [r["key"] for r in rows] == ["S1", "S2", "S3"] and len({r["family"] for r in rows}) == 1
    assert rows[0]["family"] != verdict.gradient_rows(g10)[0]["family"] and all(r["m"] == 3 for r in rows)
    for r, c, ph, po in zip(rows, sec.values(), want, opp):
        assert r["mean"] == c["D"] and r["rel_gap"] == c["rel_gap"]
        assert r["p_holm"] == pytest.approx(ph, rel=1e-6, abs=0)
        assert r["status"] == _status(ph, po), r["label"]


def test_the_gradient_claims_on_the_page_follow_the_rows(g10):
    """The page's claims table carries each gradient test's relative gap, Holm p and status; the placebo and the gap
    against KL are descriptive (no status, no row); no claim counts cells."""
    text = verdict.PAGE.read_text()
    block = text[text.index("<!-- verdict:claims -->"):text.index("<!-- /verdict:claims -->")]
    cs = [c for c in page.claims(V) if c["where"].startswith("10")]
    rows = verdict.gradient_rows(g10)
    assert [c["row"] for c in cs[:4]] == rows
    for c, r in zip(cs, rows):
        line = next(x for x in block.splitlines() if x.startswith(f"| {c['claim']} |"))
        assert f"relative gap {r['rel_gap']:+.2%} ± {r['rel_ci95']:.2%}" in line
        assert f"Holm p {scrl_min.p_text(r['p_holm'])} in " in line
        assert line.endswith(f"| {page.status_text(r, 'batches')} |")
        assert ("**reproduced**" in line) == (r["status"] == "reproduced")
    descriptive = cs[4:]
    assert len(descriptive) == 2 and all(c["row"] is None and c["short_status"] == "descriptive" for c in descriptive)
    assert all(c["status"].startswith("descriptive") for c in descriptive)
    for text in (block, verdict.README.read_text()):
        assert "no primary cell" not in text and " cells hold" not in text
    # the placebo's reading: where plain's 95% interval excludes 0, by KL, in the pre-registered cells and (labelled
    # post hoc) the further batches added after the run
    placebo = next(c for c in descriptive if "placebo" in c["claim"])
    for key in ("placebo", "placebo_post_hoc"):
        if key not in g10:
            continue
        cells = sorted(g10[key].items(), key=lambda kv: kv[1]["kl"])
        out = [name for name, P in cells if abs(P["stats"]["plain · A = 1"]["value"]) > P["stats"]["plain · A = 1"]["ci95"]]
        assert f"the 95% interval excludes 0: plain's at {', '.join(out)};" in placebo["number"], key
    assert ("post hoc (not pre-registered)" in placebo["number"]) == ("placebo_post_hoc" in g10)


# ── the statements the page rests on, and the numbers written by hand ──────────────────────────────
def test_the_ladder_reference_is_notebook_02s_bf16_and_11_shares_its_runs():
    """Notebook 11's σ 0.1 rung is notebook 02's seeds 0-4 (so 02's bf16 runs are the ladder's reference), and
    notebook 06's raw FP8 and int4 g128 cells are notebook 11's seeds 0-2, on each CPU model that ran them."""
    for f in verdict.replicate_dirs("11"):
        d11, d02 = (json.loads((f / n).read_text()) for n in ("11_severity_slope.json", "02_fp8_arms.json"))
        seeds = d11["parameters"]["seeds"]
        for arm in d11["parameters"]["arms"]:
            assert d11["per_rung"]["fp8 + σ 0.1"]["final"][arm]["per_seed"] == \
                d02["final"][arm]["final_eval_per_seed"][:len(seeds)]
    d6 = json.loads((verdict.FIG / "06_regime_map.json").read_text())["final_per_run"]
    d11 = json.loads((verdict.FIG / "11_severity_slope.json").read_text())["per_rung"]
    for rung in ("fp8", "int4_g128"):
        for arm in ("plain", "mis", "sc"):
            assert [d6[f"raw / {rung} / {arm} / {s}"] for s in range(3)] == d11[rung]["final"][arm]["per_seed"][:3]


def u(x, d=2):
    """A signed number as the prose writes it (a real minus sign)."""
    return f"{x:+.{d}f}".replace("-", "−")


def test_notebook_02s_closing_quotes_the_verdicts_pooled_rows(made):
    """Notebook 02's closing section quotes its claim rows as the verdict computes them (pooled over the CPU models),
    not its own one-CPU numbers."""
    import nbformat

    sys.path.insert(0, str(REPO / "scripts"))
    import prose_numbers

    rs, _ = made
    text = " ".join(prose_numbers.results_prose(nbformat.read(REPO / "notebooks" / "02_fp8_arms.ipynb", 4))
                    .replace(">", " ").split())
    for contrast, label in (("plain − bf16", "plain − bf16"), ("sc − plain", "SC − plain"), ("sc − mis", "SC − MIS"),
                            ("sc − tis", "SC − TIS"), ("sc_mis − mis", "SC+MIS − MIS")):
        r = page._find(rs, "02", contrast)
        assert f"{label} {u(r['mean'], 3)} ± {r['ci95']:.3f}" in text, (label, r["mean"], r["ci95"])
    assert page._find(rs, "02", "plain − bf16")["status"] == page._find(rs, "02", "sc − plain")["status"] \
        == "reproduced"

def test_what_this_does_not_show_names_the_setting_that_ran():
    """The numbers of the 'What this does not show' section are the committed runs' parameters."""
    page_text = " ".join(verdict.PAGE.read_text().split())
    section = page_text[page_text.index("## What this does not show"):]
    p02 = json.loads((verdict.FIG / "02_fp8_arms.json").read_text())["parameters"]
    g = json.loads((verdict.FIG / "10_gradient_test.json").read_text())
    p14 = json.loads((verdict.FIG / "14_length_drift_runs.json").read_text())["parameters"]
    for s in (f"{g['n_params'] / 1e6:.1f}M-parameter policy", f"{p02['max_new_tokens']}-token completions",
              f"({p14['max_new_tokens']} in notebooks 08 and 14)",
              f"a {g['vocab_size']:,}-token vocabulary", f"{p02['steps']} SGD updates at lr {p02['lr']:g}",
              f"at {p02['max_new_tokens']}-{p14['max_new_tokens']} tokens", f"With V = {g['vocab_size']:,} the top-{g['parameters']['k']} head"):
        assert s in section, s


def test_the_length_drift_claim_reads_notebook_14s_saved_row():
    """C7's row is notebook 14's saved claim row from its second design (the drift iterated, `test_differences`),
    written as every claim row is (its test, p, the seeds that would decide it at the predicted effect, where its
    estimate lies), with the first design's status noted; where plain's push took both signs over the seeds, the
    status adds that and SC's share of plain's push (exploratory)."""
    base = dict(primary=dict(mean=0.3, ci95=2.9, n=3, status="not decided: x", paired_runs_run=False, seeds_needed=979))
    reading = dict(plain_range=[0.2, 0.4], plain_takes_both_signs=False, sc_share=0.1, sc_smaller=8)
    d = [0.14, 0.16, 0.15, 0.13, 0.17, 0.15, 0.14, 0.16]
    row = dict(scrl_min.test_differences([("plain − sc", d, "greater")], stated_effect=0.124)[0], id="C7",
               reading=reading)
    it = dict(parameters=dict(sampler_format="fp8", sampler_noise=0.1, lr=0.5, mean_advantage=0.15, steps=60),
              prediction=dict(delta=0.124, no_drift_half_band=0.062), claims=[row])
    done = page.length_drift_claim(verdict.length_drift_data(it, base))
    assert done["status"] == done["short_status"] == "**reproduced**" and "(8 seeds; 8/8 above 0)" in done["number"]
    assert "iterated" in done["where"] and "not decided: x" in done["number"] and "one-sided (> 0) p" in done["number"]
    # undecided, on the wrong side of 0: the rule's count at the predicted effect, the side named
    wrong = scrl_min.test_differences([("plain − sc", [0.4, -0.5, -0.6, -0.1], "greater")], stated_effect=0.124)[0]
    one_sign = page.length_drift_claim(verdict.length_drift_data({**it, "claims": [dict(wrong, reading=reading)]}, None))
    n = scrl_min.seeds_to_decide(wrong["sd"], 0.124, 0.05)
    assert one_sign["status"].startswith(f"not decided: its estimate lies on the wrong side of 0; {n:,} seeds would "
                                         f"decide it at the predicted +0.124 nats (80% power at its Holm level 0.05")
    assert one_sign["short_status"] == "not decided (estimate on the wrong side of 0)"
    # plain's push of either sign across seeds: the same status, then that reading and SC's share (exploratory)
    both = dict(reading, plain_range=[-1.2, 0.8], plain_takes_both_signs=True, sc_share=1 / 6, sc_smaller=3)
    text = page.length_drift_claim(verdict.length_drift_data({**it, "claims": [dict(wrong, reading=both)]}, None))
    assert text["status"].startswith(one_sign["status"] + " · plain's push took both signs over the seeds (-1.20 to +0.80")
    assert text["status"].endswith("the size of SC's change in log p(EOS) is 16.7% of plain's, smaller at 3 of 4 seeds")
    assert text["short_status"] == (one_sign["short_status"] + "; plain's push took both signs; SC's change is 16.7% "
                                    "of plain's in size (exploratory)")
    assert "drifts the completion length" in page.claims_table(page.claims(V))


# ── notebook 13, the confirmatory run: its own families decide the headline claims ─────────────────────
def _saved(values, hypotheses, ids=None):
    """Claim rows as a notebook saves them (scrl_min.test_family, with ids), per family key."""
    rows = scrl_min.test_family(values, hypotheses)
    return rows if ids is None else [dict(r, id=i) for r, i in zip(rows, ids)]


A13 = [("plain", "bf16", "less"), ("sc", "plain", "greater"), ("sc", "mis", "equivalent"), ("sc", "tis", "equivalent"),
       ("sc", "mis", "noninferior"), ("sc", "tis", "noninferior"), ("sc", "baseline", "greater")]
B13 = [("plain", "bf16", "less"), ("sc", "plain", "greater"), ("sc", "mis", "equivalent"), ("sc", "mis", "noninferior")]


def test_notebook_13s_saved_rows_decide_the_headline_claims(tmp_path):
    """The page reads notebook 13's claim rows as it saved them (their p, Holm p and status; test_stats_rule
    recomputes the committed ones from the per-seed values), each claim id to its wording: made-up JSONs in notebook
    13's layout, a cost of 0.15 over 36 seeds."""
    rng = np.random.default_rng(13)
    for name, hyps, n, lr_key, letter in (("13_confirmatory.json", A13, 36, "lr", "A"),
                                          ("13_gentle_optimizer.json", B13, 16, "gentle_lr", "B")):
        arms = sorted({a for h in hyps for a in h[:2]})
        claims = []
        for metric, key in (("auc", "primary (AUC)"), ("final", "secondary (final clean reward)")):
            v = {a: 0.3 - 0.15 * (a == "plain") + 0.05 * rng.standard_normal(n) for a in arms}
            claims += [dict(r, family=key) for r in _saved(v, hyps, [f"{letter}{i + 1}" for i in range(len(hyps))])]
        (tmp_path / name).write_text(json.dumps(dict(parameters={"noise_std": 0.1, lr_key: 0.5}, claims=claims)))
    rows = verdict.confirmatory_rows(tmp_path)
    assert [(r["family"], r["contrast"], r["kind"]) for r in rows] == (
        [("13 A", f"{a} − {b}", k) for a, b, k in A13] + [("13 A final", f"{a} − {b}", k) for a, b, k in A13]
        + [("13 B", f"{a} − {b}", k) for a, b, k in B13] + [("13 B final", f"{a} − {b}", k) for a, b, k in B13])
    saved = json.loads((tmp_path / "13_confirmatory.json").read_text())["claims"]
    assert [(r["p_holm"], r["status"]) for r in rows[:14]] == [(r["p_holm"], r["status"]) for r in saved]
    assert all(r["m"] == 7 and r["k"] == 1 for r in rows[:14])
    a1 = rows[0]
    assert a1["status"] == "reproduced" and a1["mean"] < -0.1
    cs = page.claims(dict(V, confirmatory=rows))
    first = cs[0]
    assert first["row"] is a1 and first["where"].startswith("13 · ") and "36 fresh seeds" in first["where"]
    assert first["claim"].startswith("A mismatched sampler costs plain training reward")
    assert "its secondary family" in first["number"] and "notebook 02's earlier run" in first["number"]
    assert next(c for c in cs if c["claim"].startswith("With a gentler optimizer"))["row"]["family"] == "13 B"
    assert next(c for c in cs if c["claim"].startswith("SC matches TIS"))["row"]["contrast"] == "sc − tis"


def test_notebook_07s_saved_families_give_the_staleness_claims(tmp_path):
    """P1-P4 as notebook 07 saved them (per schedule, one-sided then non-inferior), read into the claims table's four
    staleness rows with the secondary family beside them; the first design's JSON (no per-cell runs) gives none."""
    rng = np.random.default_rng(7)
    fams = {key: [dict(r, name=f"{sched}: SC + IS − IS") for sched in ("refresh", "constant") for r in
                  scrl_min.test_differences([("x", rng.normal(0, 0.03, 10), t) for t in ("greater", "noninferior")])]
            for key in ("primary (auc)", "secondary: final reward")}
    par = dict(arms=["tis", "sc_tis"], staleness=[1, 4], schedules=["refresh", "constant"], sampler_precision="bf16",
               lr=0.25)
    (tmp_path / "07_staleness.json").write_text(json.dumps(dict(parameters=par, runs={}, families=fams)))
    rows = verdict.staleness_rows(tmp_path)
    assert [(r["family"], r["kind"]) for r in rows] == [("07 P", "greater"), ("07 P", "noninferior")] * 2 + [
        ("07 P final", "greater"), ("07 P final", "noninferior")] * 2
    assert [r["p_holm"] for r in rows[:4]] == [r["p_holm"] for r in fams["primary (auc)"]]
    assert rows[0]["setting"].startswith("refresh schedule") and rows[2]["setting"].startswith("constant schedule")
    cs = [c for c in page.claims(dict(V, staleness=rows)) if c["where"].startswith("07")]
    assert len(cs) == 4 and cs[0]["row"] is rows[0] and "article's schedule" in cs[0]["claim"]
    assert "its secondary family" in cs[0]["number"]
    (tmp_path / "07_staleness.json").write_text(json.dumps(dict(parameters=par, final={})))
    assert verdict.staleness_rows(tmp_path) == []


def test_every_replicate_is_the_same_design_with_its_provenance():
    """Each JSON under figures/replicates/<cpu>/ is a replicate of the committed notebook's run (figures/): it names
    its CPU, commit, date and why it is kept, and every parameter it records equals the committed run's (a
    parameter added to the notebook later is absent from an older JSON, never different)."""
    files = sorted((verdict.FIG / "replicates").glob("*/*.json"))
    assert files, "figures/replicates/ holds no replicate"
    for f in files:
        rep, main = json.loads(f.read_text()), json.loads((verdict.FIG / f.name).read_text())
        assert set(rep["provenance"]) >= {"commit", "cpu", "date", "note"}, f
        assert f.name[:2] in verdict.REPLICATED, f"{f}: the verdict pools no replicate of this notebook"
        differ = {k: (v, main["parameters"].get(k)) for k, v in rep["parameters"].items() if main["parameters"].get(k) != v}
        assert not differ, f"{f}: parameters differ from figures/{f.name}: {differ}"


def test_the_regime_section_collects_notebook_16s_claim_rows(tmp_path, monkeypatch):
    """The page's regime section and the README's findings read notebook 16's claim rows as scrl_min.test_family
    wrote them (ids G1-G4), not a recomputation; a status with no README sentence stops the findings: a made-up
    JSON with plain equivalent to bf16."""
    rng = np.random.default_rng(16)
    base = 0.45 + 0.1 * rng.standard_normal(40)
    values = {"bf16": base, "plain": base + 0.01 * rng.standard_normal(40),
              "sc": base + 0.005 + 0.01 * rng.standard_normal(40), "mis": base + 0.01 * rng.standard_normal(40)}
    hyps = [("plain", "bf16", "less"), ("plain", "bf16", "equivalent"), ("sc", "plain", "greater"),
            ("sc", "mis", "equivalent"), ("sc", "mis", "noninferior"), ("mis", "plain", "less")]
    ids = ["G1", "G1'", "G2", "G3", "G3'", "G4"]
    rows = _saved(values, hyps, ids)
    real = json.loads((verdict.FIG / "16_grpo_regime.json").read_text())
    path = tmp_path / "16_grpo_regime.json"

    def write(rows):
        path.write_text(json.dumps(dict(real, claims=[dict(r, family="primary (AUC)") for r in rows])))

    write(rows)
    load = verdict._load
    monkeypatch.setattr(verdict, "_load", lambda name, fig=verdict.FIG:
                        json.loads(path.read_text()) if name == "16_grpo_regime.json" else load(name, fig))
    regime = verdict.regime_rows()
    assert [(r["id"], r["p_holm"], r["status"]) for r in regime] == [(r["id"], r["p_holm"], r["status"]) for r in rows]
    text = page.regime_text(_with_regime(regime))
    for r in regime:
        line = next(x for x in text.splitlines() if f"| {page.REGIME_WORDING[r['id']]} |" in x)
        assert line.startswith(f"| {r['id'].replace(page.PRIME, '′')} |")
        assert line.endswith(f"{r['mean']:+.3f} ± {r['ci95']:.3f} (40 seeds) | {page.KINDS[r['test']]} | "
                             f"{scrl_min.p_text(r['p_holm'])} ({scrl_min.p_text(r['p_opposite_holm'])}) | "
                             f"{page.short_status(r)} |")
    by = {r["id"]: r for r in rows}
    assert by["G1'"]["status"] == "equivalent within ±0.05" and by["G1"]["status"] == "not decided"
    with pytest.raises(ValueError, match="G1 is now 'not decided'.*REGIME_SENTENCES"):
        page.findings(_with_regime(regime))
    # the statuses the committed run has: each question gets its sentence, with the row's own numbers
    for i, st in (("G1", "contradicted"), ("G2", "contradicted"), ("G3", "equivalent within ±0.05"), ("G4", "not decided")):
        by[i]["status"] = st
    write(rows)
    findings = page.findings(_with_regime(verdict.regime_rows()))
    assert "notebook 16, 40 fresh seeds" in findings and "SC and MIS are equivalent within ±0.05" in findings
    assert f"(plain − bf16 {by['G1']['mean']:+.3f} ± {by['G1']['ci95']:.3f})" in findings


def test_the_recovery_table_is_notebook_13s_per_seed_values():
    """The page's recovery table: SC's share of the cost, (SC − plain) / (bf16 − plain) over the mean per-seed
    differences, and x − bf16 means, recomputed here from 13's JSON with numpy alone."""
    c = json.loads((REPO / "figures" / "13_confirmatory.json").read_text())["per_arm"]
    text = page.recovery_text(V)
    for metric, label in (("auc", "AUC (primary)"), ("final", "final clean reward (secondary)")):
        v = {a: np.asarray(x[f"{metric}_per_seed"]) for a, x in c.items()}
        row = next(l for l in text.splitlines() if l.startswith(f"| {label} |"))
        share = (v["sc"] - v["plain"]).mean() / (v["bf16"] - v["plain"]).mean()
        assert row.rstrip(" |").endswith("]") and f"| {share:.0%} [" in row
        for a in ("sc", "tis", "mis"):
            assert f"{(v[a] - v['bf16']).mean():+.3f} ± " in row


def test_an_undecided_row_says_where_it_lies_or_that_it_was_powered():
    """Three undecided rows of one made-up family: one on the wrong side of 0, one powered for the stated effect
    (60 seeds where about 8 would do), one short of seeds; each says so, and the count is scrl_min's at its Holm
    level."""
    rng = np.random.default_rng(7)
    base = rng.normal(0, 0.05, 60)
    zero = base - base.mean()  # mean exactly 0: never decided, on no side
    rows = [verdict.tested("02", "s", "wrong", [zero - 0.01], family="02", kind="greater"),
            verdict.tested("02", "s", "powered", [zero + 1e-4], family="02", kind="greater"),
            verdict.tested("02", "s", "short", [rng.normal(0.01, 0.3, 5)], family="02", kind="greater")]
    verdict.decide_families(rows)
    texts = {r["contrast"]: page.status_text(r) for r in rows}
    assert all(r["status"] == "not decided" for r in rows), [r["status"] for r in rows]
    assert "wrong side of 0" in texts["wrong"]
    assert "its 60 seeds had 80% power at a 0.05 effect" in texts["powered"] and "would decide it" not in texts["powered"]
    assert "seeds would decide it at a 0.05 effect beyond 0" in texts["short"]
    n = rows[2]["seeds"]["n"][0]
    assert n == scrl_min.seeds_to_decide(rows[2]["sd"], 0.05, rows[2]["seeds"]["level"]) and n > 5


def test_the_placebo_row_names_each_sampler_and_its_batches(made):
    """The placebo row lists every sampler of notebook 10's placebo, the on-policy one with its own batch count, and
    quotes the largest-KL sampler with its batches and each estimator whose interval excludes 0 (recomputed here)."""
    _, m = made
    g = json.loads((verdict.FIG / "10_gradient_test.json").read_text())
    row = next(c for c in m["deck"]["claims"] if c["claim"].startswith("Plain's update carries a drift"))
    by_kl = sorted(g["placebo"].items(), key=lambda kv: kv[1]["kl"])
    listed = ", ".join(f"{n} ({p['n']} batches)" if n == "on-policy" else n for n, p in by_kl)
    assert f"samplers: {listed}; " in row["number"]
    name, top = by_kl[-1]
    assert f"at {name} (KL {top['kl']:.1e}, {top['n']} batches): " in row["number"]
    plain = top["stats"]["plain · A = 1"]
    excludes = abs(plain["value"]) > plain["ci95"]
    assert (f"plain's at {name}" in row["number"]) == excludes


def test_a_row_without_a_status_has_no_short_status(made):
    """Described rows (notebook 06's map cells, rows no claim reads) carry an empty status and an empty short
    status in figures/verdict.json, and no empty bold marker reaches the page, the README or the deck's JSON."""
    _, m = made
    for r in m["deck"]["rows"]:
        assert bool(r["status"]) == bool(r["short_status"]), (r["source"], r["setting"], r["contrast"])
    for text in (verdict.PAGE.read_text(), verdict.README.read_text(), json.dumps(m["deck"], ensure_ascii=False)):
        assert "****" not in text
