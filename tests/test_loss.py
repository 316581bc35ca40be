"""Tests of the loss section of scrl_min/core.py against independent float64 references.

Every property is checked against a brute-force computation over the *full* vocabulary, built here
from explicit distributions: trainer logits θ (float64, requires_grad) → p = softmax(θ / T), a sampler
distribution q = softmax((θ + noise) / T), scores s_v = ∇θ log p_v taken by autograd. Nothing is
compared with scrl_min's own output except where a test is about an invariance of that output
(mask garbage, bf16 vs float32 inputs, removed empty slots).

The exact identities (docs/method.md, "Checks that hold exactly"):
  * on-policy (q = p): the centering gradient is zero;
  * k = V: the top-k gradient is −A [f(r_y) s_y − Σ_v q_v f(r_v) s_v];
  * drift removal: Σ_y q_y ∇L(y) = 0 for constant A, under every weighting;
  * k < V: the top-k gradient is the full-vocabulary one with q̂ = q on H, ρ·p off H;
  * the hand example q_H = [0.5, 0.3], p_H = [0.4, 0.4] → ρ = 1, c = [0.1, −0.1].
The loss computes its coefficients in float32, so comparisons use a relative tolerance (RTOL) on the
natural size of the summed terms (|A| · Σ |coefficients| / T), not on the possibly cancelled result.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import scrl_min
from scrl_min import (ScrlError, compute_advantages, gather_logprobs, importance_weight, reduce_loss,
                      score_centered_pg_loss, tail_alpha)

F64 = torch.float64
WEIGHTINGS = ("none", "is", "tis", "mis", "icepop")
TIS_CAP = 2.0
LO, HI = 0.5, 5.0
RTOL = 1e-5  # float32 coefficients: relative error of a few 1e-7 on the size of the summed terms
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
SLOW_SETTINGS = settings(SETTINGS, max_examples=30)  # tests that loop over V sampled tokens or slots


# ─────────────────────────────────────────────────────────────────────────────────────────────────
# Independent float64 reference
# ─────────────────────────────────────────────────────────────────────────────────────────────────
def f_ref(r: torch.Tensor, weighting: str) -> torch.Tensor:
    """f(r) of docs/method.md's weighting table, float64, written from the table (no clipping)."""
    band = ((r >= LO) & (r <= HI)).to(F64)
    return {"none": torch.ones_like(r), "is": r, "tis": torch.minimum(r, torch.full_like(r, TIS_CAP)),
            "mis": r * band, "icepop": band}[weighting]


@dataclass
class Case:
    theta: torch.Tensor  # (B, T, V) float64 trainer logits
    logq: torch.Tensor  # (B, T, V) float64 sampler log-probs (full vocabulary)
    head: torch.Tensor  # (B, T, k) long: top-k ids of q (shuffled order)
    y: torch.Tensor  # (B, T) long: sampled token
    adv: torch.Tensor  # (B,) or (B, T) float64
    mask: torch.Tensor  # (B, T) bool
    temp: float

    @property
    def V(self):
        return self.theta.shape[-1]

    @property
    def k(self):
        return self.head.shape[-1]

    def logp_full(self, theta=None):
        return torch.log_softmax((self.theta if theta is None else theta) / self.temp, -1)

    def A_bt(self):
        B, T = self.y.shape
        return self.adv[:, None].expand(B, T) if self.adv.dim() == 1 else self.adv


def make_case(seed, B, T, V, k, temp, scale, noise, adv_per_token=False, mask_p=0.8,
              on_policy=False) -> Case:
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(B, T, V, generator=g, dtype=F64) * scale
    s_logits = theta if on_policy else theta + noise * torch.randn(B, T, V, generator=g, dtype=F64)
    logq = torch.log_softmax(s_logits / temp, -1)
    head = torch.topk(logq, k, dim=-1).indices
    perm = torch.argsort(torch.rand(B, T, k, generator=g), dim=-1)  # order must not matter
    head = head.gather(-1, perm)
    y = torch.randint(0, V, (B, T), generator=g)
    adv = torch.randn((B, T) if adv_per_token else (B,), generator=g, dtype=F64) * 2
    mask = torch.rand(B, T, generator=g) < mask_p
    mask[0, 0] = True
    return Case(theta, logq, head, y, adv, mask, temp)


def core_grad(case: Case, weighting: str, centering: bool = True):
    """Gradient w.r.t. θ of Σ_{b,t} loss from score_centered_pg_loss, plus the loss and diag."""
    th = case.theta.clone().requires_grad_(True)
    lp = case.logp_full(th)
    logp = lp.gather(-1, case.y[..., None]).squeeze(-1)
    logp_head = lp.gather(-1, case.head)
    s_logp = case.logq.gather(-1, case.y[..., None]).squeeze(-1)
    s_head = case.logq.gather(-1, case.head)
    loss, diag = score_centered_pg_loss(logp, logp_head, s_logp, s_head, case.adv, case.mask,
                                        weighting=weighting, centering=centering, tis_cap=TIS_CAP,
                                        mis_band=(LO, HI))
    (grad,) = torch.autograd.grad(loss.sum(), th)
    return grad, loss, diag


def head_indicator(case: Case) -> torch.Tensor:
    ind = torch.zeros_like(case.theta, dtype=torch.bool)
    ind.scatter_(-1, case.head, True)
    return ind


def qhat_ref(case: Case):
    """q̂ = q on H, ρ·p off H (float64); ρ = (1 − Σ_H q) / (1 − Σ_H p). Returns (q̂, ρ, tail_q, tail_p)."""
    p = case.logp_full().exp()
    q = case.logq.exp()
    on_h = head_indicator(case)
    tail_q = 1.0 - torch.where(on_h, q, 0.0).sum(-1)
    tail_p = 1.0 - torch.where(on_h, p, 0.0).sum(-1)
    if case.k == case.V:
        return q, torch.ones_like(tail_q), tail_q, tail_p
    rho = tail_q / tail_p
    return torch.where(on_h, q, rho[..., None] * p), rho, tail_q, tail_p


def ref_grad(case: Case, weighting: str, qhat: torch.Tensor, centering: bool = True):
    """Brute-force full-vocabulary gradient of Σ_{b,t} mask · (−A) [f(r_y) log p_y − Σ_v sg(q̂_v f(p_v/q̂_v)) log p_v]
    w.r.t. θ, by autograd in float64. r_y uses the sampler's true log q_y. Also returns the natural
    size of the summed terms, for the tolerance."""
    th = case.theta.clone().requires_grad_(True)
    lp = case.logp_full(th)
    p = lp.detach().exp()
    logp_y = lp.gather(-1, case.y[..., None]).squeeze(-1)
    r_y = (logp_y.detach() - case.logq.gather(-1, case.y[..., None]).squeeze(-1)).exp()
    w_y = f_ref(r_y, weighting)
    coef = qhat * f_ref(p / qhat, weighting)  # (B, T, V), detached
    inner = w_y * logp_y - ((coef * lp).sum(-1) if centering else 0.0)
    A = case.A_bt()
    L = torch.where(case.mask, -A * inner, torch.zeros_like(inner)).sum()
    (grad,) = torch.autograd.grad(L, th)
    size = (A.abs() * (w_y + coef.sum(-1) + 2 * qhat.sum(-1)) / case.temp).max().item()
    return grad, size


def assert_grad_close(got, want, size, rtol=RTOL, what=""):
    err = (got - want).abs().max().item()
    assert torch.isfinite(got).all(), f"{what}: non-finite gradient"
    assert err <= rtol * max(size, 1e-12), f"{what}: max |Δgrad| = {err:.3e} > {rtol:.0e} × {size:.3e}"


def log_ratio_ok(case: Case, margin=1e-3, max_abs=15.0) -> bool:
    """Keep away from what float32 cannot decide exactly: the MIS/IcePop band edges, and the ±20 log
    ratio clip (a documented deviation, tested separately)."""
    lr = case.logp_full() - case.logq
    if lr.abs().max() > max_abs:
        return False
    for edge in (math.log(LO), math.log(HI)):
        if (lr - edge).abs().min() < margin:
            return False
    return True


def rho_band_ok(rho, tail_q, tail_p) -> bool:
    """1/ρ away from the band edges by more than float32 can blur it (ρ from float32 sums)."""
    slack = 1e-3 + 1e-5 / tail_q.clamp(min=1e-30) + 1e-5 / tail_p.clamp(min=1e-30)
    lr = -torch.log(rho)
    near = ((lr - math.log(LO)).abs() < slack) | ((lr - math.log(HI)).abs() < slack)
    return not bool(near.any())


case_params = dict(
    seed=st.integers(0, 2**31 - 1),
    B=st.integers(1, 3),
    T=st.integers(1, 3),
    V=st.integers(2, 40),
    temp=st.sampled_from([0.5, 0.7, 1.0, 1.3, 2.0]),
    scale=st.floats(0.3, 3.0),
    noise=st.floats(0.05, 1.5),
    adv_per_token=st.booleans(),
)


# ─────────────────────────────────────────────────────────────────────────────────────────────────
# 1. On-policy: the centering gradient is zero
# ─────────────────────────────────────────────────────────────────────────────────────────────────
@SETTINGS
@given(**case_params, kfrac=st.floats(0.0, 1.0))
def test_on_policy_centering_gradient_is_zero(seed, B, T, V, temp, scale, noise, adv_per_token, kfrac):
    k = max(1, min(V, round(kfrac * V)))
    case = make_case(seed, B, T, V, k, temp, scale, noise, adv_per_token, on_policy=True)
    _, _, tail_q, tail_p = qhat_ref(case)
    if k < V:
        assume(float(tail_p.min()) > 1e-4)  # ρ's ε floor inactive
    # plain policy gradient −A s_y, brute force: centering off in the reference
    want, size = ref_grad(case, "none", case.logq.exp(), centering=False)
    for weighting in WEIGHTINGS:  # on-policy r = 1, so every f(r) = 1
        g_on, _, _ = core_grad(case, weighting, centering=True)
        g_off, _, _ = core_grad(case, weighting, centering=False)
        assert_grad_close(g_on, g_off, size, what=f"{weighting}: centering on vs off, on-policy")
        assert_grad_close(g_on, want, size, what=f"{weighting}: on-policy vs −A s_y")


# ─────────────────────────────────────────────────────────────────────────────────────────────────
# 2. k = V: the top-k estimator is the full-vocabulary centering
# ─────────────────────────────────────────────────────────────────────────────────────────────────
@SETTINGS
@given(**case_params)
def test_full_head_equals_full_vocabulary_centering(seed, B, T, V, temp, scale, noise, adv_per_token):
    case = make_case(seed, B, T, V, V, temp, scale, noise, adv_per_token)
    assume(log_ratio_ok(case))
    q = case.logq.exp()
    for weighting in WEIGHTINGS:
        got, loss, _ = core_grad(case, weighting)
        want, size = ref_grad(case, weighting, q)
        assert loss.dtype == torch.float32 and torch.isfinite(loss).all()
        assert_grad_close(got, want, size, what=f"k=V, {weighting}")


# ─────────────────────────────────────────────────────────────────────────────────────────────────
# 3. Drift removal: Σ_y q_y ∇L(y) = 0 for constant A, every weighting, k = V
# ─────────────────────────────────────────────────────────────────────────────────────────────────
@SLOW_SETTINGS
@given(seed=st.integers(0, 2**31 - 1), V=st.integers(2, 40),
       temp=st.sampled_from([0.5, 0.7, 1.0, 1.3, 2.0]), scale=st.floats(0.3, 3.0),
       noise=st.floats(0.05, 1.5), A=st.floats(-3.0, 3.0).filter(lambda a: abs(a) > 1e-3))
def test_drift_removed_under_every_weighting(seed, V, temp, scale, noise, A):
    base = make_case(seed, 1, 1, V, V, temp, scale, noise)
    assume(log_ratio_ok(base))
    # one position per possible sampled token y = t, all with the same θ, q and A
    case = Case(theta=base.theta.expand(1, V, V).clone(), logq=base.logq.expand(1, V, V).clone(),
                head=base.head.expand(1, V, V).clone(), y=torch.arange(V)[None],
                adv=torch.full((1,), A, dtype=F64), mask=torch.ones(1, V, dtype=torch.bool),
                temp=temp)
    q = base.logq.exp()[0, 0]  # (V,)
    r = (base.logp_full() - base.logq).exp()[0, 0]
    for weighting in WEIGHTINGS:
        grads, _, _ = core_grad(case, weighting)  # grads[0, t] = ∇θ L(y = t)
        drift = (q[:, None] * grads[0]).sum(0)
        size = abs(A) * (1.0 + float((q * f_ref(r, weighting)).sum())) * 2 / temp
        assert torch.isfinite(drift).all()
        err = drift.abs().max().item()
        assert err <= RTOL * size, f"{weighting}: drift Σ_y q_y ∇L(y) = {err:.3e} (size {size:.3e})"
        # without centering the drift is there, and equals −A Σ_v q_v f(r_v) s_v; in logit space
        # s_v = (e_v − p) / T, so it is −A (q f − p Σ_v q_v f_v) / T (μ = (q − p) / T for "none")
        g_off, _, _ = core_grad(case, weighting, centering=False)
        drift_off = (q[:, None] * g_off[0]).sum(0)
        p = base.logp_full().exp()[0, 0]
        qf = q * f_ref(r, weighting)
        want_off = -A * (qf - p * qf.sum()) / temp
        assert (drift_off - want_off).abs().max().item() <= RTOL * size, weighting


# ─────────────────────────────────────────────────────────────────────────────────────────────────
# 4. k < V: the top-k loss is the full-vocabulary loss with q̂ = q on H, ρ·p off H
# ─────────────────────────────────────────────────────────────────────────────────────────────────
@SETTINGS
@given(**case_params, kfrac=st.floats(0.0, 1.0))
def test_top_k_equals_full_vocabulary_with_tail_model(seed, B, T, V, temp, scale, noise,
                                                      adv_per_token, kfrac):
    k = max(1, min(V - 1, round(kfrac * (V - 1))))
    case = make_case(seed, B, T, V, k, temp, scale, noise, adv_per_token)
    assume(log_ratio_ok(case))
    qhat, rho, tail_q, tail_p = qhat_ref(case)
    assume(float(tail_p.min()) > 1e-4 and float(tail_q.min()) > 1e-6)  # ρ's ε floor inactive
    for weighting in WEIGHTINGS:
        if weighting in ("mis", "icepop") and not rho_band_ok(rho, tail_q, tail_p):
            continue
        got, _, diag = core_grad(case, weighting)
        want, size = ref_grad(case, weighting, qhat)
        assert_grad_close(got, want, size, what=f"k={k}<V={V}, {weighting}")
        # ρ itself, up to float32 rounding of the head sums (≈ k · 6e-8 each) over the tail mass
        rho_err = 2 * k * 6e-8 * (1 + rho) / tail_p
        assert ((diag["rho"].double() - rho).abs() <= rho_err + 1e-6 * rho).all(), (diag["rho"], rho)


def test_top_k_loss_value_is_head_order_invariant_when_k_lt_v():
    """The head is a set: permuting it leaves loss and θ-gradient unchanged (k < V, tails not tiny)."""
    for seed in range(20):
        case = make_case(seed, 2, 3, 16, 8, 1.0, 1.0, 0.5)
        perm = torch.randperm(8, generator=torch.Generator().manual_seed(seed))
        case2 = Case(case.theta, case.logq, case.head[..., perm], case.y, case.adv, case.mask, case.temp)
        for weighting in WEIGHTINGS:
            g1, l1, _ = core_grad(case, weighting)
            g2, l2, _ = core_grad(case2, weighting)
            torch.testing.assert_close(l2, l1, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(g2, g1, rtol=1e-5, atol=1e-5)


def test_full_head_loss_value_is_head_order_invariant():
    worst = 0.0
    for seed in range(40):
        case = make_case(seed, 1, 2, 40, 40, 1.0, 2.0, 0.5)
        perm = torch.randperm(40, generator=torch.Generator().manual_seed(seed))
        case2 = Case(case.theta, case.logq, case.head[..., perm], case.y, case.adv, case.mask, case.temp)
        g1, l1, _ = core_grad(case, "none")
        g2, l2, _ = core_grad(case2, "none")
        want, size = ref_grad(case, "none", case.logq.exp())
        assert_grad_close(g1, want, size)  # the gradient is right either way
        assert_grad_close(g2, want, size)
        worst = max(worst, float((l1 - l2).detach().abs().max()))
    assert worst < 1e-4, f"loss value changes by {worst:.3g} when the head is permuted (k = V)"


def test_reference_checks_can_fail():
    """The comparisons above reject a wrong loss: no centering, another weighting, or q for q̂."""
    case = make_case(7, 2, 3, 12, 4, 1.0, 2.0, 1.0)
    qhat, _, _, _ = qhat_ref(case)
    for weighting in WEIGHTINGS:
        got, _, _ = core_grad(case, weighting)
        want, size = ref_grad(case, weighting, qhat)
        assert_grad_close(got, want, size, what=weighting)
        if weighting != "is":  # exact IS has no centering term (up to the ±20 log clip)
            off, _, _ = core_grad(case, weighting, centering=False)
            assert (off - want).abs().max() > 100 * RTOL * size, f"{weighting}: centering not seen"
            # using the sampler's raw head without the tail model (q̂ = q, tail ignored) is wrong
            q_head_only = torch.where(head_indicator(case), case.logq.exp(), 1e-300)
            want_bad, _ = ref_grad(case, weighting, q_head_only)
            assert (got - want_bad).abs().max() > 100 * RTOL * size, f"{weighting}: tail not seen"
        for other in WEIGHTINGS:
            if other != weighting:
                want_other, _ = ref_grad(case, other, qhat)
                assert (got - want_other).abs().max() > 100 * RTOL * size, (weighting, other)
    # on the full head, centering matters off-policy
    full = make_case(3, 1, 2, 9, 9, 1.0, 1.0, 1.0)
    got_off, _, _ = core_grad(full, "none", centering=False)
    want, size = ref_grad(full, "none", full.logq.exp())
    assert (got_off - want).abs().max() > 100 * RTOL * size


# ─────────────────────────────────────────────────────────────────────────────────────────────────
# 5. The hand examples (docs/method.md): ∂L/∂ log p(v) = A · c_v for v in H
# ─────────────────────────────────────────────────────────────────────────────────────────────────
# L = −A [w_y log p_y − Σ_H c_v log p_v]  ⇒  ∂L/∂ log p_v = +A c_v,  ∂L/∂ log p_y = −A w_y.
HAND = [
    # q_H, p_H, rho, {weighting: c}
    ([0.5, 0.3], [0.4, 0.4], 1.0,
     {"none": [0.1, -0.1], "is": [0.0, 0.0], "tis": [0.0, 0.0], "mis": [0.0, 0.0],
      "icepop": [0.1, -0.1]}),
    ([0.6, 0.3], [0.36, 0.24], 0.25,  # r = [0.6, 0.8], 1/ρ = 4 in band
     {"none": [0.51, 0.24], "is": [0.0, 0.0], "tis": [0.18, 0.12], "mis": [0.0, 0.0],
      "icepop": [0.51, 0.24]}),
    # r = [0.526.., 7.5], 1/ρ = 20 out of band; TIS: m = [p0, 2 q1] = [0.5, 0.08], α = min(1, 2ρ) = 0.1
    ([0.95, 0.04], [0.5, 0.3], 0.05,
     {"none": [0.925, 0.025], "is": [0.0, 0.0], "tis": [0.45, 0.05],
      "mis": [0.5, 0.0], "icepop": [0.95, 0.0]}),
]


@pytest.mark.parametrize("q_h,p_h,rho,cs", HAND)
@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_hand_examples(q_h, p_h, rho, cs, weighting):
    A = 1.7
    logp_head = torch.tensor([[p_h]], dtype=F64).log().requires_grad_(True)
    logp = torch.tensor([[math.log(0.4)]], dtype=F64, requires_grad=True)
    sampler_logp = torch.tensor([[math.log(0.5)]], dtype=F64)  # r_y = 0.8
    loss, diag = score_centered_pg_loss(logp, logp_head, sampler_logp,
                                        torch.tensor([[q_h]], dtype=F64).log(),
                                        torch.tensor([A]), torch.tensor([[True]]), weighting=weighting,
                                        tis_cap=TIS_CAP, mis_band=(LO, HI))
    g_head, g_y = torch.autograd.grad(loss.sum(), [logp_head, logp])
    torch.testing.assert_close(diag["rho"].double(), torch.tensor([[rho]], dtype=F64), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(g_head[0, 0], A * torch.tensor(cs[weighting], dtype=F64), rtol=1e-5, atol=1e-6)
    w_y = float(f_ref(torch.tensor(0.8, dtype=F64), weighting))
    torch.testing.assert_close(g_y[0, 0], torch.tensor(-A * w_y, dtype=F64), rtol=1e-5, atol=1e-6)


# ─────────────────────────────────────────────────────────────────────────────────────────────────
# 6. Non-finite inputs
# ─────────────────────────────────────────────────────────────────────────────────────────────────
def _leaf_inputs(case: Case):
    lp = case.logp_full()
    logp = lp.gather(-1, case.y[..., None]).squeeze(-1).clone().requires_grad_(True)
    logp_head = lp.gather(-1, case.head).clone().requires_grad_(True)
    s_logp = case.logq.gather(-1, case.y[..., None]).squeeze(-1).clone()
    s_head = case.logq.gather(-1, case.head).clone()
    return logp, logp_head, s_logp, s_head


@SLOW_SETTINGS
@given(seed=st.integers(0, 2**31 - 1), V=st.integers(2, 30), kfrac=st.floats(0, 1),
       empty=st.sampled_from([float("-inf"), -9999.0, -9000.5]),  # NaN is a broken row: it raises
       trainer_val=st.sampled_from([-3.0, -50.0, float("-inf")]), where=st.integers(0, 100))
def test_empty_head_slots_contribute_nothing(seed, V, kfrac, empty, trainer_val, where):
    k = max(1, min(V, round(kfrac * V)))
    case = make_case(seed, 2, 3, V, k, 1.0, 1.5, 0.7)
    assume(log_ratio_ok(case))
    qhat, rho, tail_q, tail_p = qhat_ref(case)
    if k < V:
        assume(float(tail_p.min()) > 1e-4 and float(tail_q.min()) > 1e-6)
    # ρ well conditioned in float32: then loss values and head coefficients can be compared too
    well = k < V and float(tail_p.min()) > 1e-2 and float(tail_q.min()) > 1e-2
    pos = where % (k + 1)
    # the same head with one extra empty slot (sampler value `empty`) inserted at position `pos`
    ins = lambda x, val: torch.cat([x[..., :pos], torch.full_like(x[..., :1], val), x[..., pos:]], -1)
    th = case.theta.clone().requires_grad_(True)
    lp = case.logp_full(th)
    logp = lp.gather(-1, case.y[..., None]).squeeze(-1)
    logp_head = lp.gather(-1, case.head)
    logp_head2 = ins(logp_head, trainer_val)
    s_logp = case.logq.gather(-1, case.y[..., None]).squeeze(-1)
    s_head = case.logq.gather(-1, case.head)
    s_head2 = ins(s_head, empty)
    keep = [i for i in range(k + 1) if i != pos]
    for weighting in WEIGHTINGS:
        if weighting in ("mis", "icepop") and k < V and not rho_band_ok(rho, tail_q, tail_p):
            continue
        loss1, d1 = score_centered_pg_loss(logp, logp_head, s_logp, s_head, case.adv, case.mask,
                                           weighting=weighting)
        loss2, d2 = score_centered_pg_loss(logp, logp_head2, s_logp, s_head2, case.adv, case.mask,
                                           weighting=weighting)
        gt1, gh1 = torch.autograd.grad(loss1.sum(), [th, logp_head], retain_graph=True)
        gt2, gh2 = torch.autograd.grad(loss2.sum(), [th, logp_head2], retain_graph=True)
        assert torch.isfinite(loss2).all() and torch.isfinite(gt2).all() and torch.isfinite(gh2).all()
        assert (gh2[..., pos] == 0).all(), "an empty slot received gradient"
        want, size = ref_grad(case, weighting, qhat)  # the brute-force loss without the slot
        assert_grad_close(gt2, want, size, what=f"{weighting}, empty slot {empty}")
        assert_grad_close(gt2, gt1, size, what=f"{weighting}, with vs without empty slot")
        if well:
            # both runs sum the head in a different order: ρ moves by its float32 conditioning,
            # ≈ (k + 1) · 6e-8 · (1/tail_q + 1/tail_p) relative (worst case), and α = ρ f(1/ρ) by ≤ 2×
            drho = 2 * (k + 1) * 6e-8 * (1 / tail_q + 1 / tail_p) * rho  # (B, T)
            A = case.A_bt().abs()
            p_h = logp_head.detach().exp()
            extra_l = float((A * 2 * drho * (p_h * logp_head.detach().abs()).sum(-1)).max())
            extra_g = float((A * 2 * drho).max())
            scale = float(A.max()) * (1 + float(lp.detach().abs().max()))
            torch.testing.assert_close(loss2, loss1, rtol=1e-5, atol=1e-5 * scale + extra_l)
            torch.testing.assert_close(gh2[..., keep], gh1, rtol=1e-5, atol=1e-5 * scale + extra_g)
            assert ((d2["rho"] - d1["rho"]).abs().double() <= drho + 1e-7).all()
            for key in ("head_mass_q", "head_mass_p", "weight"):
                torch.testing.assert_close(d2[key], d1[key], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("weighting", WEIGHTINGS)
# (a sampled token with log q = −inf is a broken row: the loss refuses it, tests/test_contract.py)
@pytest.mark.parametrize("sampler_y,trainer_y", [(-9999.0, -2.0), (-2.0, -9999.0),
                                                 (-8000.0, -1e-3), (-1e-3, -8000.0)])
def test_huge_log_ratio_is_finite(weighting, sampler_y, trainer_y):
    logp = torch.tensor([[trainer_y, -1.0]], dtype=torch.float32, requires_grad=True)
    sampler_logp = torch.tensor([[sampler_y, -1.0]])
    # head slots with huge ratios in both directions, but above the −9000 empty marker
    logp_head = torch.tensor([[[-2.0, -8500.0, -0.5], [-1.0, -1.5, -8999.0]]], requires_grad=True)
    s_head = torch.tensor([[[-8500.0, -2.0, -0.7], [-8999.0, -0.9, -1.2]]])
    loss, diag = score_centered_pg_loss(logp, logp_head, sampler_logp, s_head, torch.tensor([1.3]),
                                        torch.tensor([[True, True]]), weighting=weighting)
    g = torch.autograd.grad(loss.sum(), [logp, logp_head])
    assert torch.isfinite(loss).all(), loss
    assert all(torch.isfinite(x).all() for x in g), g
    for key, val in diag.items():
        assert torch.isfinite(val).all(), (key, val)
    assert (diag["rho"] >= 0).all()
    # the sampled-token weight is f(r) with |log r| clipped at MAX_LOG_RATIO = 20 (core.py, by design)
    r = math.exp(max(-20.0, min(20.0, trainer_y - sampler_y)))
    want = float(f_ref(torch.tensor(r, dtype=F64), weighting))
    assert float(diag["weight"][0, 0]) == pytest.approx(want, rel=1e-5, abs=1e-12)


@pytest.mark.parametrize("weighting", WEIGHTINGS)
@pytest.mark.parametrize("q_h,p_h", [([0.7, 0.5], [0.2, 0.3]), ([0.5, 0.5], [0.3, 0.2]),
                                     ([0.3, 0.2], [0.6, 0.4]), ([0.3, 0.2], [0.7, 0.9]),
                                     ([0.6, 0.6], [0.6, 0.6]), ([1.0, 0.0], [1.0, 0.0])])
def test_head_mass_at_or_past_one_gives_finite_rho(weighting, q_h, p_h):
    logp_head = torch.tensor([[p_h]], dtype=torch.float32).log().requires_grad_(True)
    s_head = torch.tensor([[q_h]], dtype=torch.float32).log()
    logp = torch.tensor([[-0.5]], requires_grad=True)
    loss, diag = score_centered_pg_loss(logp, logp_head, torch.tensor([[-0.6]]), s_head,
                                        torch.tensor([2.0]), torch.tensor([[True]]), weighting=weighting)
    g = torch.autograd.grad(loss.sum(), [logp, logp_head])
    rho = diag["rho"]
    assert torch.isfinite(rho).all() and (rho >= 0).all(), rho
    if sum(q_h) >= 1.0:
        assert float(rho) == 0.0  # the numerator (1 − Σ_H q)_+ is clamped at 0
    assert torch.isfinite(loss).all() and all(torch.isfinite(x).all() for x in g)


# ─────────────────────────────────────────────────────────────────────────────────────────────────
# 7. Float32 inside with bf16 inputs
# ─────────────────────────────────────────────────────────────────────────────────────────────────
@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), V=st.integers(2, 40), kfrac=st.floats(0, 1),
       weighting=st.sampled_from(WEIGHTINGS), centering=st.booleans())
def test_bf16_inputs_compute_in_float32(seed, V, kfrac, weighting, centering):
    k = max(1, min(V, round(kfrac * V)))
    case = make_case(seed, 2, 4, V, k, 1.0, 1.5, 0.5)
    ins32 = [x.detach().float() for x in _leaf_inputs(case)]
    ins16 = [x.to(torch.bfloat16) for x in ins32]
    up = [x.float() for x in ins16]  # the bf16 values, exactly, in float32
    adv16 = case.adv.to(torch.bfloat16)

    def run(inputs, adv):
        leaves = [inputs[0].clone().requires_grad_(True), inputs[1].clone().requires_grad_(True)]
        # tail_tol pinned: its default depends on the input dtype (bf16 rounding), not the arithmetic
        loss, diag = score_centered_pg_loss(leaves[0], leaves[1], inputs[2], inputs[3], adv, case.mask,
                                            weighting=weighting, centering=centering, tail_tol=1e-5)
        g = torch.autograd.grad(loss.sum(), leaves, allow_unused=True, materialize_grads=True)
        return loss, diag, g

    l16, d16, g16 = run(ins16, adv16)
    lup, dup, gup = run(up, adv16.float())
    l32, _, _ = run(ins32, case.adv.float())
    assert l16.dtype == torch.float32
    assert all(v.dtype == torch.float32 for v in d16.values())
    assert g16[0].dtype == torch.bfloat16 and g16[1].dtype == torch.bfloat16
    # float32 arithmetic inside: bf16 inputs give exactly the float32 result of the same values
    torch.testing.assert_close(l16, lup, rtol=1e-6, atol=1e-6)
    for key in d16:
        torch.testing.assert_close(d16[key], dup[key], rtol=1e-6, atol=1e-6, equal_nan=True)
    for a, b in zip(g16, gup):
        torch.testing.assert_close(a.float(), b.to(torch.bfloat16).float(), rtol=0, atol=0)
    # (no comparison with the *unrounded* float32 inputs here: bf16 rounds log-probs of size 20 by
    # up to 0.04, which moves r = p/q by up to 8%, so only a loose bound would hold; the bit-exact
    # check above is what "float32 inside" means.)
    assert l32.dtype == torch.float32 and torch.isfinite(l32).all()


def test_bf16_inputs_full_head_gradient_close_to_reference():
    worst = 0.0
    for seed in range(10):
        case = make_case(seed, 1, 2, 40, 40, 1.0, 1.5, 0.5)
        th = case.theta.clone().requires_grad_(True)
        lp = case.logp_full(th)
        bf = lambda x: x.to(torch.bfloat16)
        loss, _ = score_centered_pg_loss(
            bf(lp.gather(-1, case.y[..., None]).squeeze(-1)), bf(lp.gather(-1, case.head)),
            bf(case.logq.gather(-1, case.y[..., None]).squeeze(-1)), bf(case.logq.gather(-1, case.head)),
            case.adv, case.mask, weighting="none")
        (g,) = torch.autograd.grad(loss.sum(), th)
        want, size = ref_grad(case, "none", case.logq.exp())
        worst = max(worst, float((g - want).abs().max()) / size)
    assert worst < 0.03, f"bf16 inputs, k = V: gradient off by {worst:.1%} of its scale"


def test_bf16_head_sums_are_not_bf16():
    """128 head slots of mass 1/256 each: Σ_H q = 0.5 exactly in float32; a bf16 running sum stalls."""
    k = 128
    lq = torch.full((1, 1, k), math.log(1 / 256), dtype=torch.bfloat16)
    lp = torch.full((1, 1, k), math.log(1 / 512), dtype=torch.bfloat16, requires_grad=True)
    loss, diag = score_centered_pg_loss(torch.tensor([[-1.0]], dtype=torch.bfloat16), lp,
                                        torch.tensor([[-1.0]], dtype=torch.bfloat16), lq,
                                        torch.tensor([1.0]), torch.tensor([[True]]))
    qv = math.exp(float(torch.tensor(math.log(1 / 256), dtype=torch.bfloat16)))
    pv = math.exp(float(torch.tensor(math.log(1 / 512), dtype=torch.bfloat16)))
    assert float(diag["head_mass_q"]) == pytest.approx(k * qv, rel=1e-5)
    assert float(diag["rho"]) == pytest.approx((1 - k * qv) / (1 - k * pv), rel=1e-5)


# ─────────────────────────────────────────────────────────────────────────────────────────────────
# 8. Mask
# ─────────────────────────────────────────────────────────────────────────────────────────────────
def _garbage_run(case: Case, weighting: str, garbage: dict):
    """Loss and leaf gradients with `garbage` written into masked positions of the named inputs."""
    logp, logp_head, s_logp, s_head = [x.detach().clone() for x in _leaf_inputs(case)]
    adv = case.A_bt().clone()
    tensors = dict(logp=logp, logp_head=logp_head, sampler_logp=s_logp, sampler_logp_head=s_head, adv=adv)
    off = ~case.mask
    for name, val in garbage.items():
        tensors[name][off] = val
    logp.requires_grad_(True)
    logp_head.requires_grad_(True)
    loss, _ = score_centered_pg_loss(logp, logp_head, s_logp, s_head, adv, case.mask, weighting=weighting)
    g = torch.autograd.grad(loss.sum(), [logp, logp_head])
    return loss, g


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), V=st.integers(2, 30), kfrac=st.floats(0, 1),
       big=st.sampled_from([1e4, 3e7, 8999.0, 1e30]), sign=st.sampled_from([1.0, -1.0]))
def test_mask_zero_loss_and_no_dependence_on_masked_values(seed, V, kfrac, big, sign):
    """Large finite garbage at masked positions: anything for the sampled-token log-probs and the
    advantage, any non-positive value for the head log-probs (what a log-prob can be)."""
    k = max(1, min(V, round(kfrac * V)))
    case = make_case(seed, 3, 5, V, k, 1.0, 1.5, 0.7, mask_p=0.6, adv_per_token=True)
    garbage = dict(logp=sign * big, logp_head=-big, sampler_logp=-sign * big,
                   sampler_logp_head=-big / 3, adv=sign * big)
    for weighting in WEIGHTINGS:
        loss_c, g_c = _garbage_run(case, weighting, {})
        loss_g, g_g = _garbage_run(case, weighting, garbage)
        for loss in (loss_c, loss_g):
            assert (loss[~case.mask] == 0).all()
            assert torch.isfinite(loss).all()
        torch.testing.assert_close(loss_g, loss_c, rtol=0, atol=0)
        for a, b in zip(g_g, g_c):
            assert torch.isfinite(a).all()
            torch.testing.assert_close(a, b, rtol=0, atol=0)
            assert (a[~case.mask] == 0).all()


@pytest.mark.parametrize("name,val", [
    ("logp", float("nan")), ("logp", float("-inf")), ("logp", float("inf")),
    ("sampler_logp", float("nan")), ("sampler_logp", float("inf")),
    ("sampler_logp_head", float("nan")), ("sampler_logp_head", float("-inf")),
    ("logp_head", float("-inf")),
    ("logp_head", float("nan")),
    ("logp_head", float("inf")),
    ("logp_head", 100.0),
    ("sampler_logp_head", 100.0),
    ("adv", float("nan")),
    ("adv", float("inf")),
])
@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_mask_nonfinite_masked_inputs_do_not_leak(name, val, weighting):
    """Non-finite (or impossible: log q = 100) values only where mask is False: the loss and the
    gradient must be those of the clean batch. Checked also through one shared parameter, as in a
    real model, where one NaN anywhere in the backward pass spoils every parameter."""
    case = make_case(11, 3, 5, 10, 4, 1.0, 1.5, 0.7, mask_p=0.6, adv_per_token=True)
    assert (~case.mask).any()
    loss_c, g_c = _garbage_run(case, weighting, {})
    loss_n, g_n = _garbage_run(case, weighting, {name: val})
    torch.testing.assert_close(loss_n, loss_c, rtol=0, atol=0)
    for a, b in zip(g_n, g_c):
        assert torch.isfinite(a).all(), f"non-finite gradient from {name}={val} at masked positions"
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    th = torch.zeros((), dtype=F64, requires_grad=True)
    logp, logp_head, s_logp, s_head = [x.detach().clone() for x in _leaf_inputs(case)]
    adv = case.A_bt().clone()
    t = dict(logp=logp, logp_head=logp_head, sampler_logp=s_logp, sampler_logp_head=s_head, adv=adv)
    t[name][~case.mask] = val
    loss, _ = score_centered_pg_loss(logp + th, logp_head + th, s_logp, s_head, adv, case.mask,
                                     weighting=weighting)
    (g,) = torch.autograd.grad(loss.sum(), th)
    assert torch.isfinite(g), f"a shared parameter gets {g} from {name}={val} at masked positions"


# ─────────────────────────────────────────────────────────────────────────────────────────────────
# 9. gather_logprobs
# ─────────────────────────────────────────────────────────────────────────────────────────────────
@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), lead=st.lists(st.integers(1, 4), min_size=1, max_size=3),
       V=st.integers(1, 50), k=st.one_of(st.none(), st.integers(1, 6)),
       temp=st.floats(0.1, 4.0), chunk=st.integers(1, 70),
       dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
       scale=st.floats(0.1, 20.0))
def test_gather_logprobs_matches_float64_log_softmax(seed, lead, V, k, temp, chunk, dtype, scale):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(*lead, V, generator=g, dtype=F64) * scale).to(dtype)
    ids = torch.randint(0, V, (*lead,) if k is None else (*lead, k), generator=g)
    leaf = logits.clone().requires_grad_(True)
    got = gather_logprobs(leaf, ids, temperature=temp, chunk_size=chunk)
    ref_leaf = logits.detach().double().requires_grad_(True)
    full = torch.log_softmax(ref_leaf / temp, -1)
    want = full.gather(-1, ids[..., None]).squeeze(-1) if k is None else full.gather(-1, ids)
    assert got.dtype == torch.float32 and got.shape == want.shape
    torch.testing.assert_close(got.double(), want.detach(), rtol=1e-5, atol=1e-5)
    # gradient w.r.t. the logits, against float64 autograd
    w = torch.randn(want.shape, generator=g, dtype=F64)
    (g_got,) = torch.autograd.grad((got.double() * w).sum(), leaf)
    (g_want,) = torch.autograd.grad((want * w).sum(), ref_leaf)
    assert g_got.dtype == dtype
    # float32 z = logits / T carries an absolute error ≈ 6e-8 |z|, which moves softmax(z) by that
    # relative amount; the gradient (w − softmax(z) Σ w) / T inherits it times |Σ w| / T
    tol = 1e-5 if dtype != torch.bfloat16 else 1e-2
    zmax = float(logits.double().abs().max()) / temp
    wsum = float(w.abs().sum(-1).max()) if k is not None else float(w.abs().max())
    atol = tol * (1 + float(w.abs().max())) + 3e-7 * zmax * wsum / temp
    torch.testing.assert_close(g_got.double(), g_want, rtol=tol, atol=atol)


@pytest.mark.parametrize("bad", [-1, 7, 100])
@pytest.mark.parametrize("with_k", [True, False])
def test_gather_logprobs_bad_id_raises_naming_index(bad, with_k):
    V = 7
    logits = torch.randn(2, 3, V)
    ids = torch.randint(0, V, (2, 3, 4) if with_k else (2, 3))
    index = (1, 2, 3) if with_k else (1, 2)
    ids[index] = bad
    with pytest.raises(ScrlError) as ei:
        gather_logprobs(logits, ids)
    msg = str(ei.value)
    assert str(list(index)) in msg, msg


def test_gather_logprobs_bad_temperature_raises():
    for t in (0.0, -1.0):
        with pytest.raises(ScrlError):
            gather_logprobs(torch.randn(2, 5), torch.tensor([0, 1]), temperature=t)


# ─────────────────────────────────────────────────────────────────────────────────────────────────
# 10. reduce_loss: micro-batches with the whole batch's denominator
# ─────────────────────────────────────────────────────────────────────────────────────────────────
@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), B=st.integers(2, 6), T=st.integers(1, 5), V=st.integers(2, 20),
       weighting=st.sampled_from(WEIGHTINGS), data=st.data())
def test_reduce_loss_micro_batches_sum_to_one_batch(seed, B, T, V, weighting, data):
    k = data.draw(st.integers(1, V))
    case = make_case(seed, B, T, V, k, 1.0, 1.5, 0.7, mask_p=0.6)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, B - 1), max_size=B - 1))))
    bounds = [0, *cuts, B]
    total_tokens = int(case.mask.sum())

    def loss_rows(th, rows):
        lp = torch.log_softmax(th[rows] / case.temp, -1)
        y, head = case.y[rows], case.head[rows]
        per_token, _ = score_centered_pg_loss(
            lp.gather(-1, y[..., None]).squeeze(-1), lp.gather(-1, head),
            case.logq[rows].gather(-1, y[..., None]).squeeze(-1), case.logq[rows].gather(-1, head),
            case.adv[rows], case.mask[rows], weighting=weighting)
        return per_token

    th = case.theta.clone().requires_grad_(True)
    per_token = loss_rows(th, slice(0, B))
    big = reduce_loss(per_token, case.mask)
    # independent value: Σ loss / Σ mask
    # (float32 sums of mixed-sign terms: tolerance on the size of the terms, not of the sum)
    tol = 1e-6 * float(per_token.detach().abs().sum()) / total_tokens + 1e-12
    assert float(big.detach()) == pytest.approx(float(per_token.detach().double().sum()) / total_tokens,
                                                rel=0, abs=tol)
    (g_big,) = torch.autograd.grad(big, th)
    th2 = case.theta.clone().requires_grad_(True)
    acc = sum(reduce_loss(loss_rows(th2, slice(a, b)), case.mask[a:b], denominator=total_tokens)
              for a, b in zip(bounds[:-1], bounds[1:]))
    (g_acc,) = torch.autograd.grad(acc, th2)
    torch.testing.assert_close(g_acc, g_big, rtol=1e-6, atol=1e-7 * (1 + float(g_big.abs().max())))
    assert float(acc.detach()) == pytest.approx(float(big.detach()), rel=0, abs=tol)


def test_reduce_loss_per_micro_batch_mean_differs():
    """Sanity: dividing each micro-batch by its own token count is not the one-batch gradient."""
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    own = reduce_loss(per_token[:1], mask[:1]) + reduce_loss(per_token[1:], mask[1:])
    shared = (reduce_loss(per_token[:1], mask[:1], denominator=4)
              + reduce_loss(per_token[1:], mask[1:], denominator=4))
    assert float(shared) == pytest.approx(10 / 4)
    assert float(own) != pytest.approx(float(shared))


def test_reduce_loss_other_reductions():
    per_token = torch.tensor([[1.0, 2.0, 0.0], [4.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False], [False, False, False]])
    assert float(reduce_loss(per_token, mask, "seq_mean")) == pytest.approx((3 / 2 + 4 / 1 + 0) / 3)
    assert float(reduce_loss(per_token, mask, "constant", denominator=9)) == pytest.approx(7 / 9)
    assert float(reduce_loss(per_token, mask)) == pytest.approx(7 / 3)
    assert float(reduce_loss(torch.zeros(2, 2), torch.zeros(2, 2, dtype=torch.bool))) == 0.0
    with pytest.raises(ScrlError):
        reduce_loss(per_token, mask, "constant")
    with pytest.raises(ScrlError, match="bogus"):
        reduce_loss(per_token, mask, "bogus")


# ─────────────────────────────────────────────────────────────────────────────────────────────────
# importance_weight, tail_alpha, compute_advantages against the table
# ─────────────────────────────────────────────────────────────────────────────────────────────────
@SETTINGS
@given(vals=st.lists(st.floats(-19.0, 19.0), min_size=1, max_size=20),
       weighting=st.sampled_from(WEIGHTINGS))
def test_importance_weight_and_tail_alpha_match_table(vals, weighting):
    lr = torch.tensor(vals, dtype=F64)
    edges = torch.tensor([math.log(LO), math.log(HI)], dtype=F64)
    assume(bool(((lr[:, None] - edges).abs() > 1e-5).all()))
    got = importance_weight(lr.float(), weighting, TIS_CAP, (LO, HI))
    want = f_ref(lr.exp(), weighting)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=0)
    # α = ρ f(1/ρ), with ρ = e^{−lr}
    rho = (-lr).exp()
    got_a = tail_alpha(rho.float(), weighting, TIS_CAP, (LO, HI))
    torch.testing.assert_close(got_a.double(), rho * f_ref(1 / rho, weighting), rtol=1e-5, atol=1e-12)


def test_tail_alpha_at_zero_rho():
    rho = torch.zeros(1)
    want = {"none": 0.0, "is": 1.0, "tis": 0.0, "mis": 0.0, "icepop": 0.0}  # limits of ρ f(1/ρ)
    for w in WEIGHTINGS:
        assert float(tail_alpha(rho, w)) == want[w]


def test_importance_weight_nan_and_clip():
    lr = torch.tensor([float("nan"), 1e6, -1e6])
    for w in WEIGHTINGS:
        assert torch.isfinite(importance_weight(lr, w)).all()
    assert float(importance_weight(torch.tensor([50.0]), "is")) == pytest.approx(math.exp(20.0), rel=1e-5)


@SETTINGS
@given(rewards=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=24), G=st.integers(2, 6))
@example(rewards=[0.975, 0.975, 0.975], G=3)  # equal rewards: float32 rounding amplified by GRPO (found in CI-like run)
def test_compute_advantages_match_reference(rewards, G):
    n = len(rewards) - len(rewards) % G
    assume(n >= G)
    r = torch.tensor(rewards[:n], dtype=torch.float32)
    assert torch.equal(compute_advantages(r, G, "raw"), r)
    torch.testing.assert_close(compute_advantages(r, G, "signed"), 2 * r - 1)
    got = compute_advantages(r, G, "grpo")
    centred = compute_advantages(r, G, "centered")
    want, want_centred, tol = [], [], []
    for i in range(0, n, G):
        grp = [float(x) for x in r[i:i + G]]
        mean = sum(grp) / G
        std = math.sqrt(sum((x - mean) ** 2 for x in grp) / (G - 1))  # torch.std: unbiased
        want += [(x - mean) / (std + 1e-4) for x in grp]
        want_centred += [2 * (x - mean) for x in grp]
        # float32's mean is off by a few ulps of the rewards (|r| <= 1), and GRPO divides by std + 1e-4: a group of
        # (nearly) equal rewards amplifies that rounding up to 1e4 times (rewards [0.975] * 3 give 6e-4, not 0)
        tol += [1e-4 + 8 * torch.finfo(torch.float32).eps / (std + 1e-4)] * G
    assert ((got.double() - torch.tensor(want, dtype=F64)).abs() <= torch.tensor(tol, dtype=F64)).all()
    torch.testing.assert_close(centred.double(), torch.tensor(want_centred, dtype=F64), rtol=0, atol=1e-6)
    assert torch.isfinite(got).all()


def test_compute_advantages_raw_is_a_copy():
    r = torch.tensor([0.1, 0.2])
    a = compute_advantages(r, 2, "raw")
    a += 1
    assert float(r[0]) == pytest.approx(0.1)


@pytest.mark.filterwarnings("ignore:std\\(\\):UserWarning")
def test_compute_advantages_grpo_group_of_one_is_not_nan():
    """A group of one has no relative signal: zero advantage (or a clear ScrlError), never NaN."""
    try:
        a = compute_advantages(torch.tensor([0.3, 0.7]), 1, "grpo")
    except ScrlError:
        return
    assert torch.isfinite(a).all(), f"group_size=1 gives {a}"


# ─────────────────────────────────────────────────────────────────────────────────────────────────
# 11. Errors
# ─────────────────────────────────────────────────────────────────────────────────────────────────
def _ok_inputs(B=2, T=3, k=4):
    return dict(logp=torch.zeros(B, T), logp_head=torch.zeros(B, T, k), sampler_logp=torch.zeros(B, T),
                sampler_logp_head=torch.zeros(B, T, k), advantages=torch.zeros(B),
                mask=torch.ones(B, T, dtype=torch.bool))


def _call(**kw):
    names = ("logp", "logp_head", "sampler_logp", "sampler_logp_head", "advantages", "mask")
    args = [kw.pop(n) for n in names]
    return score_centered_pg_loss(*args, **kw)


def test_unknown_weighting_names_it():
    for fn in (lambda: _call(**_ok_inputs(), weighting="bogus_w"),
               lambda: importance_weight(torch.zeros(2), "bogus_w"),
               lambda: tail_alpha(torch.ones(2), "bogus_w")):
        with pytest.raises(ScrlError, match="bogus_w"):
            fn()
    with pytest.raises(ScrlError, match="bogus_mode"):
        compute_advantages(torch.zeros(4), 2, "bogus_mode")
    with pytest.raises(ScrlError):
        compute_advantages(torch.zeros(5), 2, "grpo")


@pytest.mark.parametrize("name,shape", [
    ("logp_head", (2, 3)), ("logp_head", (2, 4, 4)), ("logp_head", (3, 3, 4)),
    ("sampler_logp", (2, 4)), ("sampler_logp", (2,)), ("sampler_logp_head", (2, 3, 5)),
    ("sampler_logp_head", (2, 3)), ("mask", (2, 4)), ("mask", (3, 3)),
])
def test_shape_mismatch_raises(name, shape):
    kw = _ok_inputs()
    kw[name] = torch.zeros(shape, dtype=kw[name].dtype)
    with pytest.raises(ScrlError, match=name):
        _call(**kw)



@pytest.mark.parametrize("name,shape", [("logp", (6,)), ("logp", (2, 3, 1)), ("advantages", (3,)),
                                        ("advantages", (2, 4)), ("advantages", (3, 3))])
def test_shape_mismatch_of_logp_and_advantages_raises(name, shape):
    kw = _ok_inputs()
    kw[name] = torch.zeros(shape)
    with pytest.raises(ScrlError):
        _call(**kw)


def test_single_advantage_for_a_batch_is_rejected():
    kw = _ok_inputs(B=3)
    kw["advantages"] = torch.ones(1)
    with pytest.raises(ScrlError):
        _call(**kw)


def test_advantages_per_sequence_or_per_token_are_accepted():
    for adv in (torch.ones(2), torch.ones(2, 3), torch.ones(2, 1)):
        kw = _ok_inputs()
        kw["advantages"] = adv
        loss, _ = _call(**kw)
        assert loss.shape == (2, 3)


def test_public_exports():
    for n in ("gather_logprobs", "importance_weight", "tail_alpha", "score_centered_pg_loss",
              "reduce_loss", "compute_advantages", "ScrlError"):
        assert hasattr(scrl_min, n)
