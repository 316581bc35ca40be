"""What the experiments rest on: the paper's advantage recipe, the exact drift/signal measurement,
paired random streams across arms, and the clean evaluation on held-out prompts.

References are independent: advantages and the drift/signal split written out with Python loops in
float64 (pairs enumerated one by one), the clean evaluation against a fresh float32 sampler built by
hand, pairing checked on what two arms actually drew.
"""
import itertools
import math

import numpy as np
import pytest
import torch

import scrl_min
from scrl_min import ScrlError, TorchSampler, Trainer, compute_advantages, drift_and_signal

SMALL = dict(prompts_per_step=2, group_size=3, max_new_tokens=6, k=16, progress=False, eval_prompts=6,
             checkpoint_every=2, lr=0.5, steps=3, eval_every=2)


# ─── the paper's advantage recipe ───────────────────────────────────────────────────────────────
def test_centered_advantages_are_the_papers_recipe():
    r = torch.tensor([0.0, 0.5, 1.0, 0.25, 0.25, 0.25, 1.0, 0.0])
    got = compute_advantages(r, 4, "centered")
    for g in range(2):
        signed = [2 * x - 1 for x in r[4 * g:4 * g + 4].tolist()]  # ±1-style
        mean = sum(signed) / 4
        for i in range(4):
            assert got[4 * g + i].item() == pytest.approx(signed[i] - mean, abs=1e-7)
    assert got[4:8].abs().max() > 0 and torch.allclose(got.view(2, 4).sum(1), torch.zeros(2), atol=1e-6)
    assert not torch.allclose(got, compute_advantages(r, 4, "grpo"))  # no std scaling
    with pytest.raises(ScrlError, match="centered advantages need groups"):
        compute_advantages(r, 3, "centered")


# ─── the measured drift and signal ──────────────────────────────────────────────────────────────
def brute_drift_signal(logq, logp, ids, adv, mask, G):
    """The definitions, one token and one pair at a time, float64."""
    q, p = logq.double().exp(), logp.double().exp()
    B, T, V = q.shape
    drift, tv, kl, hp, hq, n = 0.0, 0.0, 0.0, 0.0, 0.0, 0
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            d = [q[b, t, v].item() - p[b, t, v].item() for v in range(V)]
            drift += abs(adv[b].item()) * math.sqrt(sum(x * x for x in d))
            tv += 0.5 * sum(abs(x) for x in d)
            kl += sum(q[b, t, v].item() * (logq[b, t, v].item() - logp[b, t, v].item()) for v in range(V))
            hp -= sum(x * math.log(x) for x in p[b, t].tolist() if x > 0)
            hq -= sum(x * math.log(x) for x in q[b, t].tolist() if x > 0)
            n += 1
    sig_sq, dr_sq = [], []
    for g in range(B // G):
        rows = range(g * G, (g + 1) * G)
        X = {i: [adv[i].item() * ((v == ids[i, 0].item()) - q[i, 0, v].item()) for v in range(V)] for i in rows}
        Y = {i: [adv[i].item() * (q[i, 0, v].item() - p[i, 0, v].item()) for v in range(V)] for i in rows}
        pairs = [(i, j) for i, j in itertools.permutations(rows, 2)]
        sig_sq.append(sum(sum(a * b for a, b in zip(X[i], X[j])) for i, j in pairs) / len(pairs))
        dr_sq.append(sum(sum(a * b for a, b in zip(Y[i], Y[j])) for i, j in pairs) / len(pairs))
    return dict(drift_norm=drift / n, tv_qp=tv / n, kl_qp=kl / n, entropy_p=hp / n, entropy_q=hq / n,
                drift_first=math.sqrt(max(0.0, sum(dr_sq) / len(dr_sq))),
                signal_first=math.sqrt(max(0.0, sum(sig_sq) / len(sig_sq))))


@pytest.mark.parametrize("mode", ["raw", "grpo"])
def test_drift_and_signal_against_their_definitions(mode):
    g = torch.Generator().manual_seed(11)
    B, T, V, G = 6, 4, 9, 3
    z = torch.randn(B, 1, V, generator=g).expand(B, T, V).clone()
    z[:, 1:] += torch.randn(B, T - 1, V, generator=g)  # the first token's prefix is shared per group
    z[:, 0] = z[::G, 0].repeat_interleave(G, 0)
    logq = torch.log_softmax(z, -1)
    logp = torch.log_softmax(z + 0.3 * torch.randn(B, 1, V, generator=g), -1)  # the trainer differs
    logp[:, 0] = logp[::G, 0].repeat_interleave(G, 0)
    ids = torch.randint(0, V, (B, T), generator=g)
    r = torch.rand(B, generator=g)
    adv = compute_advantages(r, G, mode)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[2, 2:] = False
    got = drift_and_signal(logq, logp, ids, adv, mask, G)
    ref = brute_drift_signal(logq, logp, ids, adv, mask, G)
    for key in ref:
        assert got[key] == pytest.approx(ref[key], rel=1e-5, abs=1e-7), key
    # no mismatch: no drift, whatever the advantages
    zero = drift_and_signal(logq, logq, ids, adv, mask, G)
    assert zero["drift_norm"] == 0 and zero["drift_first"] == 0 and zero["tv_qp"] == 0


# ─── paired arms, clean evaluation ──────────────────────────────────────────────────────────────
def test_a_seed_pairs_every_arm_prompts_sampling_seeds_and_noise(tmp_path):
    """Arms of one seed draw the same prompts at every step, sample with the same seed at every step
    (so two arms whose samplers hold the same weights draw the same tokens) and the same noise."""
    drawn = {}
    for arm in ("plain", "sc", "mis"):
        tr = Trainer(scrl_min.arm_config(arm, out_dir=str(tmp_path / arm), **SMALL))
        prompts, tokens = [], []
        real_generate = tr.sampler.generate

        def spy(prompts_in, *a, **kw):
            ro = real_generate(prompts_in, *a, **kw)
            prompts.append(prompts_in)
            tokens.append(ro.completion_ids.clone())
            return ro

        tr.sampler.generate = spy
        tr.train()
        drawn[arm] = (prompts, tokens, {k: v.clone() for k, v in tr.sampler._noise.items()})
    (p0, t0, n0), (p1, t1, n1), (p2, t2, n2) = drawn.values()
    assert p0 == p1 == p2 and len(p0) == 3
    assert torch.equal(t0[0], t1[0]) and torch.equal(t0[0], t2[0])  # step 0: the same weights everywhere
    assert not torch.equal(t0[2], t1[2]) or not torch.equal(t0[2], t2[2])  # later, the updates differ
    assert all(torch.equal(n0[k], n1[k]) and torch.equal(n0[k], n2[k]) for k in n0)
    other = Trainer(scrl_min.arm_config("plain", out_dir=str(tmp_path / "seed1"), **{**SMALL, "seed": 1}))
    assert other.prompt_ids != Trainer(scrl_min.arm_config("plain", out_dir=str(tmp_path / "x"), **SMALL)).prompt_ids


def test_clean_evaluation_on_held_out_prompts(tmp_path):
    tr = Trainer(scrl_min.arm_config("plain", out_dir=str(tmp_path / "a"), **{**SMALL, "steps": 5}))
    held_out = set(tr.eval_set["prefix"])
    assert len(held_out) == 6 and not held_out & set(tr.dataset["prefix"])  # never trained on
    recs = tr.train()
    # eval after the updates of steps 2 and 4 (eval_every = 2), after the last one, and at the start
    assert [r["step"] for r in recs if "eval_reward" in r] == [1, 3, 4]
    assert "eval_reward_init" in recs[0] and "eval_reward_init" not in recs[1]
    # independent: the final policy as a fresh float32 sampler, the same held-out prompts and seed
    s = TorchSampler(tr.policy.config, precision="fp32", k=1, temperature=tr.cfg.temperature)
    s.push_weights(tr.policy.state_dict())
    g = torch.Generator().manual_seed(scrl_min.EVAL_SEED * 1_000_003 + tr.cfg.seed)
    ro = s.generate(tr.eval_prompt_ids, tr.cfg.max_new_tokens, tr.eos_id, tr.tok.pad_token_id, generator=g)
    texts = tr.tok.batch_decode(ro.completion_ids.masked_fill(~ro.completion_mask, tr.tok.pad_token_id),
                                skip_special_tokens=True)
    ref = sum(scrl_min.distinct_names_reward(t, tr.cfg.names_target) for t in texts) / len(texts)
    assert recs[-1]["eval_reward"] == pytest.approx(ref, abs=1e-6)
    # the starting point is the same in every arm of a seed (same policy, prompts and seed)
    sc = Trainer(scrl_min.arm_config("sc", out_dir=str(tmp_path / "b"), **{**SMALL, "steps": 1})).train()
    assert sc[0]["eval_reward_init"] == recs[0]["eval_reward_init"]
    with pytest.raises(ScrlError, match="eval_every must be >= 0"):
        Trainer(scrl_min.arm_config("sc", out_dir=str(tmp_path / "c"), **{**SMALL, "eval_every": -1}))


def test_constant_reward_leaves_only_the_drift(tmp_path):
    """constant_reward: every completion earns exactly that reward, whatever it is. Raw advantages are then that
    constant (E_q[A] with no signal: plain's update is the drift alone, and it moves the policy); group-centred ones
    are exactly 0, so nothing moves. The clean evaluation keeps the verifier's reward. The field is hashed only away
    from its default (every earlier run keeps its folder)."""
    small = {**SMALL, "steps": 2, "eval_every": 2}
    runs = {}
    for mode, reward in (("raw", 0.15), ("centered", 0.25)):  # 0.25: its group mean is exact in float32
        tr = Trainer(scrl_min.arm_config("plain", out_dir=str(tmp_path / mode), advantage_mode=mode,
                                         constant_reward=reward, **small))
        before = {k: v.clone() for k, v in tr.policy.state_dict().items()}
        recs = tr.train()
        moved = sum(not torch.equal(before[k], v) for k, v in tr.policy.state_dict().items())
        runs[mode] = recs, moved
        assert all(r["reward"] == pytest.approx(reward, abs=1e-7) and r["reward_std"] < 1e-7 for r in recs)
    (raw, raw_moved), (centered, centered_moved) = runs["raw"], runs["centered"]
    assert all(r["adv_mean"] == pytest.approx(0.15, abs=1e-7) and r["drift_norm"] > 0 for r in raw)
    assert raw_moved > 10 and all(r["grad_norm"] > 0 for r in raw)  # pure drift still moves the policy
    assert all(r["adv_mean"] == 0 and r["grad_norm"] == 0 and r["loss"] == 0 for r in centered)
    assert centered_moved == 0
    verifier = Trainer(scrl_min.arm_config("plain", out_dir=str(tmp_path / "verifier"), **small)).train()
    assert verifier[0]["reward"] != pytest.approx(0.15, abs=1e-7) or verifier[0]["reward_std"] > 0
    assert raw[0]["eval_reward_init"] == verifier[0]["eval_reward_init"]  # the clean evaluation: the verifier
    cfg = scrl_min.arm_config("plain")
    assert scrl_min.config_id(cfg) == scrl_min.config_id(scrl_min.arm_config("plain", constant_reward=None))
    assert scrl_min.config_id(cfg) != scrl_min.config_id(scrl_min.arm_config("plain", constant_reward=0.15))
    with pytest.raises(ScrlError, match="constant_reward must be a finite number"):
        scrl_min.arm_config("plain", constant_reward=float("nan"))


def test_config_id_changes_with_the_trainer_version(monkeypatch):
    cfg = scrl_min.arm_config("sc")
    before = scrl_min.config_id(cfg)
    monkeypatch.setattr(scrl_min.driver, "TRAINER_VERSION", scrl_min.driver.TRAINER_VERSION + 1)
    assert scrl_min.config_id(cfg) != before


# ─── statistics over seeds ──────────────────────────────────────────────────────────────────────
def test_t_table_by_integrating_the_t_density():
    """Each T975 entry is where Student's t with df degrees of freedom leaves 2.5% in each tail:
    ∫_{-t}^{t} density = 0.95, the density integrated numerically (independent of any stats library)."""
    for df, t in enumerate(scrl_min.stats.T975, start=1):
        x = torch.linspace(-t, t, 200_001, dtype=torch.float64)
        c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
        dens = c * (1 + x ** 2 / df) ** (-(df + 1) / 2)
        assert torch.trapezoid(dens, x).item() == pytest.approx(0.95, abs=2e-4), df


@pytest.mark.parametrize("n", [32, 36, 200])
def test_mean_ci95_is_a_t_interval_above_the_table(n):
    """Above the table's 31 seeds the half-width is still Student's t (notebook 13 has 36 seeds; the verdict page
    tests its rows with t): the 0.975 quantile found by integrating the t density numerically, not the normal 1.96
    (at 36 seeds the t quantile is 2.03, 3.5% wider)."""
    x = np.random.default_rng(n).normal(size=n)
    m, h = scrl_min.mean_ci95(x)
    df = n - 1
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2)) if df < 150 else \
        math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    q = h / (x.std(ddof=1) / math.sqrt(n))  # the quantile the interval used
    grid = torch.linspace(-q, q, 400_001, dtype=torch.float64)
    mass = torch.trapezoid(c * (1 + grid ** 2 / df) ** (-(df + 1) / 2), grid).item()
    assert m == pytest.approx(x.mean()) and mass == pytest.approx(0.95, abs=1e-6), (n, q)


def test_mean_ci95():
    m, h = scrl_min.mean_ci95([0.2, 0.4, 0.3, 0.5, 0.1])
    sd = math.sqrt(sum((v - 0.3) ** 2 for v in [0.2, 0.4, 0.3, 0.5, 0.1]) / 4)
    assert m == pytest.approx(0.3) and h == pytest.approx(2.776 * sd / math.sqrt(5))
    with pytest.raises(ScrlError, match="at least 2 seeds"):
        scrl_min.mean_ci95([0.3])


def test_eval_curve_reads_any_clean_evaluation_metric():
    recs = [dict(step=0, eval_reward_init=0.1, eval_len_init=20.0), dict(step=1),
            dict(step=2, eval_reward=0.3, eval_len=22.0), dict(step=4, eval_reward=0.4, eval_len=23.5)]
    for key, want in (("eval_reward", [0.1, 0.3, 0.4]), ("eval_len", [20.0, 22.0, 23.5])):
        x, y = scrl_min.eval_curve(recs, key)
        assert x.tolist() == [0, 3, 5] and y.tolist() == want
    assert scrl_min.eval_curve(recs)[1].tolist() == [0.1, 0.3, 0.4]  # eval_reward by default
    with pytest.raises(ScrlError, match="no clean evaluation of eval_len"):
        scrl_min.eval_curve([dict(step=0, eval_reward_init=0.1)], "eval_len")


def test_encode_prompt_uses_the_chat_template_and_falls_back_to_the_text():
    _, tok = scrl_min.load_policy(str(scrl_min.DEFAULT_MODEL_PATH))
    msg = scrl_min.task_user_message("def f(x):\n    ")
    with_template = scrl_min.encode_prompt(tok, msg)
    assert with_template == tok.apply_chat_template([{"role": "user", "content": msg}], add_generation_prompt=True,
                                                    tokenize=True, return_dict=False)
    assert len(with_template) > len(tok(msg)["input_ids"])  # the template adds the role markers
    template, tok.chat_template = tok.chat_template, None
    try:
        assert scrl_min.encode_prompt(tok, msg) == tok(msg)["input_ids"]
    finally:
        tok.chat_template = template


# ─── the experiments' scaffold: outcomes per run, paired contrasts, Holm, McNemar ─────────────────
def _holm_reject_by_steps(p, alpha):
    """Holm's procedure as written in the paper: test the sorted p-values against α/m, α/(m−1), ...
    and stop at the first that is not below its level. Returns the rejected set (indices)."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    rejected = set()
    for rank, i in enumerate(order):
        if p[i] > alpha / (len(p) - rank):
            break
        rejected.add(i)
    return rejected


def test_holm_adjusted_p_values_reject_what_the_step_down_procedure_rejects():
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = rng.uniform(0, 0.2, size=rng.integers(1, 8)) ** 2
        adj = scrl_min.holm(p)
        assert (adj >= p - 1e-15).all() and (adj <= 1).all()
        for alpha in (0.01, 0.05, 0.1):
            assert {i for i, a in enumerate(adj) if a <= alpha} == _holm_reject_by_steps(p, alpha)


def test_paired_contrasts_against_scipy_and_the_interval_test_duality():
    from scipy import stats

    rng = np.random.default_rng(1)
    values = {arm: rng.normal(mu, 0.2, size=12) for arm, mu in (("a", 0.5), ("b", 0.3), ("c", 0.45), ("d", 0.1))}
    contrasts = [("a", "b"), ("a", "c"), ("c", "b"), ("b", "d")]
    rows = scrl_min.paired_contrasts(values, contrasts)
    for (a, b), r in zip(contrasts, rows):
        d = values[a] - values[b]
        assert r["name"] == f"{a} − {b}" and r["n"] == 12 and r["wins"] == int((d > 0).sum())
        assert r["mean"] == pytest.approx(d.mean())
        assert r["p"] == pytest.approx(stats.ttest_rel(values[a], values[b]).pvalue, rel=1e-9)
        lo, hi = stats.t.interval(0.95, 11, loc=d.mean(), scale=stats.sem(d))
        assert r["ci95"] == pytest.approx((hi - lo) / 2, rel=1e-3)  # the T975 table has 4 digits
        # the Holm interval is the t interval at the level Holm tests this contrast at: it excludes 0
        # exactly when p is below that level
        assert (abs(r["mean"]) > r["ci_holm"]) == (r["p"] < r["holm_level"])
        assert r["ci_holm"] >= r["ci95"] * (1 - 1e-4)  # equal at level α (T975 has 4 digits)
    assert [r["p_holm"] for r in rows] == pytest.approx(list(scrl_min.holm([r["p"] for r in rows])))
    assert sorted(r["holm_level"] for r in rows) == pytest.approx([0.05 / 4, 0.05 / 3, 0.05 / 2, 0.05])


def test_mcnemar_exact_is_the_binomial_tail_of_the_discordant_seeds():
    a = [1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 1, 1]
    b = [0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0]
    r = scrl_min.mcnemar_exact(a, b)
    assert (r["a_only"], r["b_only"]) == (6, 1)
    n = 7  # two-sided: both tails as extreme as 6 of 7
    tail = sum(math.comb(n, j) for j in (0, 1, 6, 7)) / 2 ** n
    assert r["p"] == pytest.approx(tail)
    assert scrl_min.mcnemar_exact([0, 1], [0, 1])["p"] == 1.0


def test_final_reward_auc_and_collapse_from_a_hand_made_run():
    recs = [dict(step=0, eval_reward_init=0.1, eval_reward_std_init=0.05),
            dict(step=1, eval_reward=0.3, eval_reward_std=0.06), dict(step=2),
            dict(step=3, eval_reward=0.5, eval_reward_std=0.01)]
    # updates 0, 2, 4: trapezoids (0.1 + 0.3) / 2 · 2 + (0.3 + 0.5) / 2 · 2 = 1.2, over 4 updates
    assert scrl_min.curve_auc(recs) == pytest.approx(0.3)
    assert scrl_min.final_reward(recs, last=2) == pytest.approx(0.4)
    assert scrl_min.collapsed(recs) and not scrl_min.collapsed(recs[:2])


def test_check_layout_catches_a_legend_over_bars_and_a_table_under_a_caption():
    """The checks behind notebook 04's figure fix: a legend drawn over a bar and a table whose top
    row runs into its caption both fail, with the elements named; the fixed layouts pass."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar([0, 1, 2], [1.0, 0.9, 0.95], label="a long legend label that spans the bars")
    ax.set_title("bars")
    ax.legend(loc="upper left")
    with pytest.raises(ValueError, match="legend of 'bars' covers a bar"):
        scrl_min.check_layout(fig)
    ax.set_ylim(0, 2.2)  # headroom above the tallest bar
    scrl_min.check_layout(fig)
    plt.close(fig)

    fig, tab = plt.subplots(figsize=(6, 2))
    tab.axis("off")
    rows = [[str(i), f"{i / 7:.3f}"] for i in range(6)]
    tab.table(cellText=rows, colLabels=["row", "value"], loc="center").scale(1, 1.6)
    tab.set_title("caption of the table")
    with pytest.raises(ValueError, match="title of 'caption of the table' overlaps the table"):
        scrl_min.check_layout(fig)
    plt.close(fig)
    fig, tab = plt.subplots(figsize=(6, 2))
    tab.axis("off")
    tab.table(cellText=rows, colLabels=["row", "value"], bbox=[0, 0, 1, 0.9])
    tab.set_title("caption of the table")
    scrl_min.check_layout(fig)
    plt.close(fig)
    # a title wider than its figure: savefig would cut it (notebook 14's figure once lost its last words)
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3))
    b.set_title("a title on the right-hand axes that runs on well past the right edge of this figure, cut off")
    fig.tight_layout()
    with pytest.raises(ValueError, match="title of 'a title on the right-hand.*runs past the figure's edge"):
        scrl_min.check_layout(fig)
    b.set_title("a title on the right-hand axes\nthat now fits in two lines")
    fig.tight_layout()
    scrl_min.check_layout(fig)
    plt.close(fig)
