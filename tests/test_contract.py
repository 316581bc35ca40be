"""The sampler contract against corrupted input from any engine, and exact tails for bf16 trainers.

One test per class of fault that used to get through silently (each built from a small
hand-computed input; each failed on the code before these checks):
  1. a head shorter than asked (an engine capping its log-probs, padding with -inf / -9999, an
     empty top list, one id repeated in every slot);
  2. one id given two different log-probs;
  3. a NaN (or ±inf) sampler log-prob given to the loss directly;
  4. bf16 / float16 trainer log-probs, whose dtype used to set the tail tolerance (8 × bf16 eps =
     0.0625), so ρ = 0 for most tails;
  5. a generated position whose head is entirely empty.
Plus: ρ at its bound is counted in the diagnostics. The float64 reference of test 4 is written from
docs/method.md, independently of scrl_min.
"""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from scrl_min import (Rollout, RolloutError, ScrlError, score_centered_pg_loss, validate_rollout,
                      dense_from_flat)
from vllm_fakes import fake_completion, dense_from_dicts

F64 = torch.float64
lg = math.log


# ─── fake vLLM outputs: the fields the row builders read (as in tests/test_vllm.py) ─────────────
_seq = fake_completion  # one completion as vLLM returns it (tests/vllm_fakes.py)


GOOD = [(3, lg(.5)), (3, lg(.5)), (1, lg(.2)), (4, lg(.1)), (6, lg(.05))]  # y = 3 first, then top-4


def _rollout(head_logp, head_ids, y, y_logp):
    """A one-sequence Rollout (B = 1) from (T, k) head tensors and (T,) sampled ids / log-probs."""
    T = len(y)
    return Rollout(torch.zeros(1, 1, dtype=torch.long), torch.ones(1, 1, dtype=torch.bool),
                   torch.tensor([y]), torch.ones(1, T, dtype=torch.bool), torch.tensor([y_logp]),
                   torch.tensor([head_ids]), torch.tensor([head_logp]))


# ─── 1. a head shorter than asked ───────────────────────────────────────────────────────────────
@pytest.mark.parametrize("row,why", [
    ([(9, lg(.02)), (3, lg(.5)), (1, lg(.2))], "max_logprobs to >= 4"),  # capped at 2 (y outside)
    ([(3, lg(.5)), (3, lg(.5)), (1, lg(.2)), (4, float("-inf")), (6, float("-inf"))], "padded"),
    ([(3, lg(.5)), (3, lg(.5)), (1, lg(.2)), (0, -9999.0), (0, -9999.0)], "padded"),
    ([(3, lg(.5))], "empty top-k list"),
    ([(3, lg(.5)), (3, lg(.5)), (3, lg(.5)), (3, lg(.5)), (3, lg(.5))], "ids repeat"),
])
def test_class1_head_shorter_than_asked(row, why):
    """k = 4 asked; position 1 returns fewer valid distinct ids. Both row builders and
    validate_rollout refuse it, naming the position and the engine's likely fault."""
    y = row[0][0]
    flat, dicts = _seq([3, y], [GOOD, row])
    with pytest.raises(RolloutError, match=f"k=4 head log-probs asked, .* at sequence 0, completion "
                                           f"position 1: .*{why}"):
        dense_from_flat([flat], 1, 3, 4, pad_id=0)
    with pytest.raises(RolloutError, match="k=4 head log-probs asked, .* at sequence 0, completion "
                                           "position 1"):
        dense_from_dicts([dicts], 1, 3, 4, pad_id=0)
    # the full rows still build, and the flat and dict paths still agree
    flat, dicts = _seq([3, 3], [GOOD, GOOD])
    for a, b in zip(dense_from_flat([flat], 1, 3, 4, 0), dense_from_dicts([dicts], 1, 3, 4, 0)):
        assert torch.equal(a, b)
    # a Rollout handed over directly: 2 of the asked 4 valid at position 1
    ninf = float("-inf")
    ro = _rollout([[lg(.5), lg(.2), lg(.1), lg(.05)], [lg(.5), lg(.2), ninf, ninf]],
                  [[3, 1, 4, 6], [3, 1, 0, 0]], [3, 3], [lg(.5), lg(.5)])
    with pytest.raises(RolloutError, match="k=4 asked, 2 valid.*max_logprobs to >= 4.* at sequence 0, "
                                           "completion position 1"):
        validate_rollout(ro, 10)
    validate_rollout(ro, 10, exact_support=True)  # a filtered support may be smaller than k
    ro.head_logp[0, 0] = ro.head_logp[0, 1]
    validate_rollout(ro, 10, exact_support=True)


# ─── 2. one id, two log-probs ───────────────────────────────────────────────────────────────────
def test_class2_repeated_id_with_two_log_probs():
    """y = 7 is listed first with log .2 and again in the top-k with log .3 (the old builders kept
    one of them silently: log q(y) = log .3, the head entry log .2)."""
    k = 3
    bad = [(7, lg(.2)), (3, lg(.5)), (7, lg(.3)), (1, lg(.1))]
    flat, _ = _seq([7], [bad])
    with pytest.raises(RolloutError, match="id 7 two log-probs, -1.609438 and -1.203973, at sequence 0, "
                                           "completion position 0"):
        dense_from_flat([flat], 1, 2, k, pad_id=0)
    # the same value twice, up to float32 rounding (a float64 value sent over JSON), is one log-prob
    x = lg(.2)
    ok = [(7, x), (3, lg(.5)), (7, float(torch.tensor(x).nextafter(torch.tensor(0.0)))), (1, lg(.1))]
    flat, _ = _seq([7], [ok])
    _, _, logq, hid, hlp = dense_from_flat([flat], 1, 2, k, pad_id=0)
    assert hid[0, 0].tolist() == [3, 7, 1] and logq[0, 0] == hlp[0, 0, 1]
    # in a Rollout: the sampled token's log q and its head entry must be one number
    ro = _rollout([[lg(.5), lg(.2), lg(.1)]], [[3, 7, 1]], [7], [lg(.3)])
    with pytest.raises(RolloutError, match="sampled token's log-prob -1.203973 differs from its head "
                                           "entry's -1.609438 .* at sequence 0, completion position 0"):
        validate_rollout(ro, 10)
    ro.sampler_logp[0, 0] = ro.head_logp[0, 0, 1]
    validate_rollout(ro, 10)


# ─── 3. NaN given to the loss directly ──────────────────────────────────────────────────────────
def _loss_inputs():
    """B = 2, T = 3, k = 2; every position valid (q_H = [.5, .3], p_H = [.4, .4])."""
    logp = torch.full((2, 3), lg(.4), requires_grad=True)
    logp_head = torch.tensor([lg(.4), lg(.4)]).expand(2, 3, 2).clone().requires_grad_(True)
    s_logp = torch.full((2, 3), lg(.5))
    s_head = torch.tensor([lg(.5), lg(.3)]).expand(2, 3, 2).clone()
    return logp, logp_head, s_logp, s_head, torch.tensor([1.0, -1.0]), torch.ones(2, 3, dtype=torch.bool)


@pytest.mark.parametrize("weighting", ["none", "is"])
@pytest.mark.parametrize("where,val,what", [
    ("sampler_logp", float("nan"), "sampler_logp = nan"),
    ("sampler_logp", float("inf"), "sampler_logp = inf"),
    ("sampler_logp", float("-inf"), "sampler_logp = -inf"),
    ("sampler_logp_head", float("nan"), "NaN in sampler_logp_head"),
])
def test_class3_nan_given_to_the_loss_directly(weighting, where, val, what):
    """The old loss turned a NaN log q(y) into a weight (1 under "none", e^-20 ≈ 2e-9 under "is")
    and returned a finite loss; now it names the first loss-carrying position."""
    logp, logp_head, s_logp, s_head, A, mask = _loss_inputs()
    t = dict(sampler_logp=s_logp, sampler_logp_head=s_head)
    idx = (1, 2) if where == "sampler_logp" else (1, 2, 1)
    t[where][idx] = val
    t[where][0, 1] = val  # the same fault at a masked-out position: first in order, but not named
    mask[0, 1] = False
    with pytest.raises(ScrlError, match=f"{what}.* at sequence 1, position 2, a loss-carrying position"):
        score_centered_pg_loss(logp, logp_head, s_logp, s_head, A, mask, weighting=weighting)
    mask[1, 2] = False  # only at masked-out positions: the clean loss, finite
    loss, _ = score_centered_pg_loss(logp, logp_head, s_logp, s_head, A, mask, weighting=weighting)
    assert torch.isfinite(loss).all()
    # an empty slot (−inf, −9999) is legal: it is outside the head
    logp, logp_head, s_logp, s_head, A, mask = _loss_inputs()
    s_head[1, 2, 1] = float("-inf")
    s_head[0, 0, 1] = -9999.0
    loss, _ = score_centered_pg_loss(logp, logp_head, s_logp, s_head, A, mask, weighting=weighting)
    assert torch.isfinite(loss).all()


# ─── 4. bf16 and float16 trainers keep the tail ─────────────────────────────────────────────────
def f_ref(r: float, weighting: str) -> float:
    """f(r) of docs/method.md's table (C = 2, band [0.5, 5])."""
    band = 0.5 <= r <= 5.0
    return {"none": 1.0, "is": r, "tis": min(r, 2.0), "mis": r * band, "icepop": float(band)}[weighting]


def _on_bf16_grid(x: float) -> float:
    return float(torch.tensor(x, dtype=F64).to(torch.bfloat16).double())


def _trainer_head(masses: list, tail: float) -> list:
    """Head log-probs on the bf16 grid (exact in bf16 and in float16 too) for head masses
    (1 − tail) · masses: all but the last rounded, the last chosen among its grid neighbours so that
    1 − Σ_H p is closest to `tail`. The values are the trainer's exactly: no input rounding."""
    lps = [_on_bf16_grid(lg((1 - tail) * m)) for m in masses[:-1]]
    rest = 1 - tail - sum(math.exp(v) for v in lps)
    x = _on_bf16_grid(lg(rest))
    ulp = 2.0 ** (math.floor(math.log2(abs(x))) - 7)
    cands = [x + j * ulp for j in range(-4, 5)]
    assert all(_on_bf16_grid(c) == c for c in cands)
    best = min((c for c in cands if 1 - sum(map(math.exp, lps)) - math.exp(c) > 0),
               key=lambda c: abs(1 - sum(map(math.exp, lps)) - math.exp(c) - tail))
    return lps + [best]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("weighting", ["none", "is", "tis", "mis", "icepop"])
def test_class4_bf16_trainer_keeps_the_tail(dtype, weighting):
    """V = 50, k = 8; three positions whose sampler tails are 0.1 %, 1 % and 10 % (the trainer's
    2.5×: ρ ≈ 0.4, so that the TIS cap also bites: α = min(1, 2ρ) < 1). Sampler log-probs float32 (as an engine returns them), trainer log-probs bf16 or
    float16 leaves. Reference: docs/method.md's equations in float64 on the very values passed in.
    The old default tolerance (8 × eps of the trainer's dtype: 0.0625 bf16, 0.0078 float16) set
    ρ = 0 at the 0.1 % (and, bf16, 1 %) tails, dropping ρ p_v ≈ 0.4 p_v from every c_v."""
    k, V = 8, 50
    w = [0.30, 0.20, 0.15, 0.12, 0.09, 0.07, 0.04, 0.03]  # head shape of q
    tilt = [1.10, 0.90, 1.05, 0.95, 1.10, 0.90, 1.00, 1.08]  # p_v / q_v up to normalization
    wp = [a * b for a, b in zip(w, tilt)]
    wp = [x / sum(wp) for x in wp]
    tails_q = [1e-3, 1e-2, 1e-1]
    head_ids = [[0, 1, 2, 3, 4, 5, 6, 7], [7, 6, 5, 4, 3, 2, 1, 0], [3, 1, 4, 0, 5, 2, 6, 7]]
    ys = [1, 20, 5]  # in the head, in the tail (id 20 ∉ H), in the head
    lq_h = torch.tensor([[lg((1 - tq) * m) for m in w] for tq in tails_q]).float()  # (T, k) float32
    lp_h = torch.tensor([_trainer_head(wp, 2.5 * tq) for tq in tails_q], dtype=F64)  # (T, k) grid
    lq_y, lp_y = [], []
    for t, y in enumerate(ys):
        j = head_ids[t].index(y) if y in head_ids[t] else None
        lq_y.append(float(lq_h[t, j]) if j is not None else lg(tails_q[t] / (V - k)))
        lp_y.append(float(lp_h[t, j]) if j is not None else _on_bf16_grid(lg(2.5 * tails_q[t] / (V - k))))
    sampler_logp = torch.tensor([lq_y]).float()  # (1, T)
    A = -0.7
    # float64 reference from docs/method.md: ρ = (1 − Σ_H q)_+ / max(1 − Σ_H p, ε), α = ρ f(1/ρ),
    # c_v = q_v f(p_v/q_v) − α p_v;  ∂L/∂log p(y) = −A f(r_y),  ∂L/∂log p(v) = A c_v
    q, p = lq_h.double().exp(), lp_h.exp()  # (T, k) the values passed in, exactly
    tq, tp = 1 - q.sum(-1), 1 - p.sum(-1)
    rho = tq.clamp(min=0) / tp.clamp(min=1e-6)
    assert all(0.5 < float(tp[t] / tails_q[t]) / 2.5 < 2 for t in range(3))  # tails as designed
    g_head_ref = torch.zeros(3, k, dtype=F64)
    for t in range(3):
        alpha = float(rho[t]) * f_ref(1 / float(rho[t]), weighting)
        for v in range(k):
            qv, pv = float(q[t, v]), float(p[t, v])
            g_head_ref[t, v] = A * (qv * f_ref(pv / qv, weighting) - alpha * pv)
    g_y_ref = torch.tensor([-A * f_ref(math.exp(lp_y[t] - float(sampler_logp[0, t])), weighting)
                            for t in range(3)], dtype=F64)

    logp = torch.tensor([lp_y], dtype=dtype).requires_grad_(True)
    logp_head = lp_h[None].to(dtype).requires_grad_(True)
    assert torch.equal(logp_head.detach().double(), lp_h[None])  # the grid values are exact in dtype
    loss, diag = score_centered_pg_loss(logp, logp_head, sampler_logp, lq_h[None], torch.tensor([A]),
                                        torch.ones(1, 3, dtype=torch.bool), weighting=weighting)
    g_y, g_head = torch.autograd.grad(loss.sum(), [logp, logp_head])
    assert g_head.dtype == dtype
    # ρ: the float32 sums Σ_H q, Σ_H p carry ≈ k · 6e-8 each, relative to the tails (2 × margin)
    drho = 2 * k * 6e-8 * (1 / tq + 1 / tp) * rho  # (T,)
    assert (diag["rho"][0].double() - rho).abs().le(drho).all(), (diag["rho"], rho)
    # gradient: the reference rounded to the leaf's dtype (≤ half an ulp: u = eps/2 relative), plus
    # float32 arithmetic: ρ's conditioning times p_v (α = ρ f(1/ρ) moves by ≤ 2 × ρ's error)
    u = torch.finfo(dtype).eps / 2
    tol = 2 * u * g_head_ref.abs() + abs(A) * 2 * drho[:, None] * p + 1e-6
    err = (g_head[0].double() - g_head_ref).abs()
    assert (err <= tol).all(), f"{dtype}, {weighting}: worst {float((err / tol).max()):.2f} × tolerance"
    assert ((g_y[0].double() - g_y_ref).abs() <= 2 * u * g_y_ref.abs() + 1e-6).all()
    if weighting == "none":  # what the old ρ = 0 would have given is far outside the tolerance
        dropped = abs(A) * rho[:, None] * p
        assert (dropped > 50 * tol).all()


# ─── 5. a generated position whose head is entirely empty ───────────────────────────────────────
def test_class5_empty_head_at_a_generated_position():
    """The old code gave that token ρ = 1, c = 0 (uncentered) and validate_rollout passed it."""
    ninf = float("-inf")
    ro = _rollout([[lg(.5), lg(.3)], [ninf, ninf]], [[3, 1], [0, 0]], [3, 2], [lg(.5), lg(.1)])
    with pytest.raises(RolloutError, match="empty sampler head .* at sequence 0, completion position 1"):
        validate_rollout(ro, 10)
    with pytest.raises(RolloutError, match="empty sampler head .* at sequence 0, completion position 1"):
        validate_rollout(ro, 10, exact_support=True)  # a filtered support has at least one entry
    logp, logp_head, s_logp, s_head, A, mask = _loss_inputs()
    s_head[1, 0] = -9999.0
    for kw in (dict(), dict(weighting="tis"), dict(level="sequence"), dict(exact_support=True)):
        with pytest.raises(ScrlError, match="empty sampler head .* at sequence 1, position 0"):
            score_centered_pg_loss(logp, logp_head, s_logp, s_head, A, mask, **kw)
    loss, _ = score_centered_pg_loss(logp, logp_head, s_logp, s_head, A, mask, centering=False)
    assert torch.isfinite(loss).all()  # without centering the head is not used
    mask[1, 0] = False
    loss, _ = score_centered_pg_loss(logp, logp_head, s_logp, s_head, A, mask)  # not loss-carrying
    assert torch.isfinite(loss).all()


# ─── ρ at its bound is counted ──────────────────────────────────────────────────────────────────
def test_rho_at_its_bound_is_counted():
    """Position 0: tails 0.2 and 0.2 (ρ = 1). Position 1: the trainer's head holds all the mass
    (Σ_H p = 1, its tail floored at RHO_EPS) while the sampler's tail is 0.2: ρ = 0.2 / 1e-6, a
    bound. Position 2: both tails zero (ρ = 0, not a bound)."""
    logp = torch.tensor([[lg(.4), lg(.5), lg(.5)]], requires_grad=True)
    logp_head = torch.tensor([[[lg(.4), lg(.4)], [lg(.5), lg(.5)], [lg(.5), lg(.5)]]], requires_grad=True)
    s_head = torch.tensor([[[lg(.5), lg(.3)], [lg(.5), lg(.3)], [lg(.5), lg(.5)]]])
    loss, diag = score_centered_pg_loss(logp, logp_head, s_head[..., 0], s_head, torch.tensor([1.0]),
                                        torch.ones(1, 3, dtype=torch.bool))
    assert diag["rho_at_bound"].tolist() == [[0.0, 1.0, 0.0]]
    assert diag["rho"][0, 1] == pytest.approx(0.2 / 1e-6, rel=1e-4)


def test_repeated_head_ids_found_as_a_loop_finds_them():
    """`validate_rollout`'s repeated-id check (one flat sort over every row) against a loop over rows with a set: random
    small heads (k = 1-6) with repeats, empty slots (whose ids, garbage or repeated, never count) and ids outside
    [0, V) in any slot (never counted as repeats: the range check names those at generated positions); the first
    repeated row is the one named; an empty head (k = 0) is refused as empty, not by an IndexError."""
    from scrl_min.core import _repeated_ids

    g = torch.Generator().manual_seed(3)
    for trial in range(200):
        B, T, k, V = 1 + trial % 3, 1 + trial % 5, 1 + trial % 6, 2 + trial % 9
        ids = torch.randint(-2, V + 2, (B, T, k), generator=g)
        valid = torch.rand(B, T, k, generator=g) < 0.7
        want = torch.tensor([len(row_ids) != len(set(row_ids)) for row_ids in
                             ([int(i) for i, ok in zip(r, v) if ok and 0 <= i < V]
                              for r, v in zip(ids.reshape(-1, k), valid.reshape(-1, k)))]).view(B, T)
        assert torch.equal(_repeated_ids(ids, valid, V), want), trial
    # through validate_rollout: an id repeated in row (0, 1), masked rows full of repeats before it ignored
    head_ids = torch.tensor([[[0, 0, 0], [2, 1, 2]]])
    ro = Rollout(torch.zeros(1, 1, dtype=torch.long), torch.ones(1, 1, dtype=torch.bool), torch.tensor([[0, 1]]),
                 torch.tensor([[False, True]]), torch.tensor([[lg(.5), lg(.3)]]), head_ids,
                 torch.tensor([[[lg(.5), lg(.2), lg(.1)], [lg(.4), lg(.3), lg(.2)]]]))
    with pytest.raises(RolloutError, match="duplicated id in the sampler's head at sequence 0, completion position 1"):
        validate_rollout(ro, 3)
    empty = dataclasses.replace(ro, head_ids=head_ids[..., :0], head_logp=ro.head_logp[..., :0])  # k = 0: no top-k
    with pytest.raises(RolloutError, match="empty sampler head .* at sequence 0, completion position 1"):
        validate_rollout(empty, 3)
