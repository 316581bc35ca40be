"""The loss's options against independent float64 computations over the full vocabulary:
sequence-level (GSPO-style) weights, PPO clipping against old trainer log-probs, the exact-support
mode, and the LM-head gather that never materializes the (tokens × vocab) logits.

Every reference below is written from the equations (docs/method.md's weighting table), not from scrl_min's code:
full-vocabulary softmaxes in float64, weights f(r) from their definitions, gradients by autograd."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from scrl_min import (ScrlError, score_centered_pg_loss, RolloutError, Rollout, lm_head_logprobs, reduce_loss,
                      validate_rollout)

WEIGHTINGS = ["none", "is", "tis", "mis", "icepop"]
C, LO, HI = 2.0, 0.5, 5.0
FAST = settings(max_examples=20, deadline=None, derandomize=True)  # the same examples on every run and machine


def f64(r: torch.Tensor, weighting: str) -> torch.Tensor:
    """f(r) of the table, from its definition, float64."""
    band = ((r >= LO) & (r <= HI)).double()
    return {"none": torch.ones_like(r), "is": r, "tis": torch.minimum(r, torch.full_like(r, C)),
            "mis": r * band, "icepop": band}[weighting]


def problem(seed, B, T, V, k, temperature=1.0, mismatch=0.5):
    """Random trainer logits (grad), sampler distribution q over the full vocabulary, sampled ids,
    top-k heads, a mask with at least one token per sequence, advantages of both signs."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64).requires_grad_()
    q_logits = logits.detach() / temperature + mismatch * torch.randn(B, T, V, generator=g,
                                                                      dtype=torch.float64)
    lq = torch.log_softmax(q_logits, -1)
    y = torch.multinomial(lq.exp().view(-1, V), 1, generator=g).view(B, T)
    head = lq.topk(k, -1).indices  # (B, T, k)
    mask = torch.rand(B, T, generator=g) < 0.8
    mask[:, 0] = True
    A = torch.randn(B, generator=g, dtype=torch.float64)
    return logits, lq, y, head, mask, A


def lp_of(logits, temperature):
    return torch.log_softmax(logits / temperature, -1)


def call(logits, lq, y, head, mask, A, temperature=1.0, **kw):
    lp = lp_of(logits, temperature)
    return score_centered_pg_loss(lp.gather(-1, y[..., None])[..., 0], lp.gather(-1, head),
                                  lq.gather(-1, y[..., None])[..., 0], lq.gather(-1, head), A, mask,
                                  tis_cap=C, mis_band=(LO, HI), **kw)


def q_hat(lq, lp, head):
    """q̂: q on the head, ρ p off it (full vocabulary), ρ = (1 − Σ_H q) / (1 − Σ_H p)."""
    q, p = lq.exp(), lp.exp()
    on = torch.zeros_like(q, dtype=torch.bool).scatter(-1, head, True)
    rho = (1 - (q * on).sum(-1, keepdim=True)).clamp(min=0) / (1 - (p * on).sum(-1, keepdim=True))
    return torch.where(on, q, rho * p)


def grad(loss, x):
    return torch.autograd.grad(loss, x)[0]


# ── sequence-level (GSPO-style) weight ─────────────────────────────────────────────────────────────
@FAST
@given(seed=st.integers(0, 10_000), B=st.integers(1, 3), T=st.integers(1, 5), V=st.integers(3, 24),
       kfrac=st.floats(0.1, 1.0), temperature=st.sampled_from([0.7, 1.0, 1.3]),
       weighting=st.sampled_from(WEIGHTINGS), centering=st.booleans())
def test_sequence_level_matches_full_vocabulary(seed, B, T, V, kfrac, temperature, weighting, centering):
    k = max(1, int(kfrac * V))
    logits, lq, y, head, mask, A = problem(seed, B, T, V, k, temperature)
    loss, diag = call(logits, lq, y, head, mask, A, temperature, weighting=weighting,
                      centering=centering, level="sequence")
    # reference: one weight f(s_i) per sequence, s_i = exp(mean_t log(p_y/q_y)) over its tokens,
    # times the whole centered score log p(y_t) − Σ_v q̂_v log p_v
    lp = lp_of(logits, temperature)
    lp_y, lq_y = lp.gather(-1, y[..., None])[..., 0], lq.gather(-1, y[..., None])[..., 0]
    m = mask.double()
    s = ((lp_y.detach() - lq_y) * m).sum(-1).div(m.sum(-1)).exp()  # (B,)
    W = f64(s, weighting)
    score = lp_y - ((q_hat(lq, lp.detach(), head) * lp).sum(-1) if centering else 0)
    ref = -(A * W)[:, None] * score * m
    torch.testing.assert_close(grad(loss.sum(), logits), grad(ref.sum(), logits), atol=2e-5, rtol=2e-4)
    torch.testing.assert_close(diag["weight"][mask], W[:, None].expand_as(mask)[mask].float(),
                               atol=1e-5, rtol=1e-4)


@FAST
@given(seed=st.integers(0, 10_000), V=st.integers(3, 16), weighting=st.sampled_from(WEIGHTINGS))
def test_sequence_level_drift_removed_for_a_fixed_sequence_weight(seed, V, weighting):
    """With the other tokens of the sequence fixed and k = V, Σ_y q_y w_seq(y) ∇L(y) at a position is
    not zero in general (w_seq depends on y), but with the weight held fixed it is: the centered score
    has zero mean under q. Checked through level='sequence' with a one-token sequence under 'none'."""
    logits, lq, y, head, mask, A = problem(seed, 1, 1, V, V)
    total = torch.zeros_like(logits)
    for v in range(V):
        yv = torch.full_like(y, v)
        loss, _ = call(logits, lq, yv, head, mask, torch.ones(1, dtype=torch.float64),
                       weighting="none", level="sequence")
        total += lq.exp()[0, 0, v] * grad(loss.sum(), logits)
    assert total.abs().max() < 1e-6


# ── PPO clipping against the old trainer log-probs ────────────────────────────────────────────────
@FAST
@given(seed=st.integers(0, 10_000), V=st.integers(3, 20), kfrac=st.floats(0.1, 1.0),
       weighting=st.sampled_from(WEIGHTINGS), level=st.sampled_from(["token", "sequence"]),
       centering=st.booleans())
def test_ppo_with_old_equal_current_is_the_unclipped_loss(seed, V, kfrac, weighting, level, centering):
    k = max(1, int(kfrac * V))
    logits, lq, y, head, mask, A = problem(seed, 2, 4, V, k)
    lp = lp_of(logits, 1.0).detach()
    base, _ = call(logits, lq, y, head, mask, A, weighting=weighting, level=level, centering=centering)
    ppo, d = call(logits, lq, y, head, mask, A, weighting=weighting, level=level, centering=centering,
                  old_logp=lp.gather(-1, y[..., None])[..., 0], old_logp_head=lp.gather(-1, head))
    torch.testing.assert_close(ppo, base)
    torch.testing.assert_close(grad(ppo.sum(), logits), grad(base.sum(), logits))
    assert d["clipped"].sum() == 0 and torch.allclose(d["ppo_ratio"], torch.ones_like(d["ppo_ratio"]))


def old_problem(seed, V, k, step=0.6):
    logits, lq, y, head, mask, A = problem(seed, 3, 5, V, k)
    g = torch.Generator().manual_seed(seed + 1)
    old_logits = logits.detach() + step * torch.randn(logits.shape, generator=g, dtype=torch.float64)
    return logits, old_logits, lq, y, head, mask, A


@FAST
@given(seed=st.integers(0, 10_000), V=st.integers(3, 20), weighting=st.sampled_from(WEIGHTINGS),
       eps=st.sampled_from([(0.2, 0.2), (0.2, 0.28), (0.1, 0.5)]))
def test_ppo_token_level_gradient_is_the_decoupled_ppo_surrogate(seed, V, weighting, eps):
    """Centering off: the gradient equals that of −f(p_old/q) · min(πA, clip(π, 1−ε_lo, 1+ε_hi)A)."""
    logits, old_logits, lq, y, head, mask, A = old_problem(seed, V, min(4, V))
    lp, lp_old = lp_of(logits, 1.0), lp_of(old_logits, 1.0)
    at = lambda x: x.gather(-1, y[..., None])[..., 0]  # noqa: E731
    loss, d = call(logits, lq, y, head, mask, A, weighting=weighting, centering=False, ppo_clip=eps,
                   old_logp=at(lp_old), old_logp_head=lp_old.gather(-1, head))
    pi = (at(lp) - at(lp_old)).exp()
    Ab = A[:, None]
    surrogate = torch.minimum(pi * Ab, pi.clamp(1 - eps[0], 1 + eps[1]) * Ab)
    ref = -(f64((at(lp_old) - at(lq)).exp(), weighting) * surrogate * mask.double())
    torch.testing.assert_close(grad(loss.sum(), logits), grad(ref.sum(), logits), atol=1e-5, rtol=1e-4)


@FAST
@given(seed=st.integers(0, 10_000), V=st.integers(3, 20), weighting=st.sampled_from(WEIGHTINGS))
def test_ppo_sequence_level_gradient_is_the_gspo_surrogate(seed, V, weighting):
    """GSPO: π_i = exp(mean_t log(p/p_old)), loss_i = −f(s_i) · min(π_i A, clip(π_i) A), with
    s_i = exp(mean_t log(p_old/q)); scrl_min's per-token loss, sequence-mean reduced, has its gradient."""
    logits, old_logits, lq, y, head, mask, A = old_problem(seed, V, min(4, V), step=0.3)
    lp, lp_old = lp_of(logits, 1.0), lp_of(old_logits, 1.0)
    at = lambda x: x.gather(-1, y[..., None])[..., 0]  # noqa: E731
    loss, _ = call(logits, lq, y, head, mask, A, weighting=weighting, centering=False,
                   level="sequence", old_logp=at(lp_old), old_logp_head=lp_old.gather(-1, head))
    m = mask.double()
    mean_t = lambda x: (x * m).sum(-1) / m.sum(-1)  # noqa: E731
    pi = mean_t(at(lp) - at(lp_old)).exp()
    s = mean_t(at(lp_old).detach() - at(lq)).exp()
    ref = -(f64(s, weighting) * torch.minimum(pi * A, pi.clamp(0.8, 1.2) * A)).sum()
    ours = reduce_loss(loss, mask, "seq_mean") * loss.shape[0]
    torch.testing.assert_close(grad(ours, logits), grad(ref, logits), atol=1e-5, rtol=1e-4)


@FAST
@given(seed=st.integers(0, 10_000), V=st.integers(3, 20), kfrac=st.floats(0.1, 1.0),
       weighting=st.sampled_from(WEIGHTINGS))
def test_ppo_clip_gates_and_scales_the_whole_centered_score(seed, V, kfrac, weighting):
    """Centering on: each token's gradient is sg(gate · π) times its centered score, with every
    coefficient from p_old: f(p_old_y/q_y) ∇log p_y − Σ_H (q_v f(p_old_v/q_v) − α p_old_v) ∇log p_v;
    a clipped token contributes nothing at all (its centering term included)."""
    k = max(1, int(kfrac * V))
    logits, old_logits, lq, y, head, mask, A = old_problem(seed, V, k)
    lp, lp_old = lp_of(logits, 1.0), lp_of(old_logits, 1.0)
    at = lambda x: x.gather(-1, y[..., None])[..., 0]  # noqa: E731
    loss, d = call(logits, lq, y, head, mask, A, weighting=weighting,
                   old_logp=at(lp_old), old_logp_head=lp_old.gather(-1, head))
    # reference from the table, with p := p_old in every coefficient
    q_H, po_H = lq.gather(-1, head).exp(), lp_old.gather(-1, head).exp()
    rho = (1 - q_H.sum(-1)).clamp(min=0) / (1 - po_H.sum(-1)).clamp(min=1e-6)
    rho = torch.where(1 - q_H.sum(-1) <= 1e-5, torch.zeros_like(rho), rho)
    band = ((rho >= 1 / HI) & (rho <= 1 / LO)).double()
    alpha = {"none": rho, "is": torch.ones_like(rho), "tis": (C * rho).clamp(max=1), "mis": band,
             "icepop": rho * band}[weighting]
    c = q_H * f64(po_H / q_H, weighting) - alpha[..., None] * po_H
    pi = (at(lp) - at(lp_old)).exp().detach()
    Ab = A[:, None].expand_as(pi)
    gate = ~(((Ab > 0) & (pi > 1.2)) | ((Ab < 0) & (pi < 0.8)))
    score = f64((at(lp_old) - at(lq)).exp(), weighting) * at(lp) - (c * lp.gather(-1, head)).sum(-1)
    ref = -(Ab * gate * pi * score * mask.double())
    torch.testing.assert_close(grad(loss.sum(), logits), grad(ref.sum(), logits), atol=1e-5, rtol=1e-4)
    assert torch.equal(d["clipped"].bool() & mask, ~gate & mask)


def test_ppo_needs_both_old_tensors():
    logits, lq, y, head, mask, A = problem(0, 2, 3, 8, 4)
    lp = lp_of(logits, 1.0).detach()
    with pytest.raises(ScrlError, match="old_logp and old_logp_head go together"):
        call(logits, lq, y, head, mask, A, old_logp=lp.gather(-1, y[..., None])[..., 0])
    with pytest.raises(ScrlError, match=r"old_logp has shape \(2, 2\), expected \(2, 3\)"):
        call(logits, lq, y, head, mask, A, old_logp=lp[:, :2, 0], old_logp_head=lp.gather(-1, head))
    with pytest.raises(ScrlError, match="unknown level 'seq'"):
        call(logits, lq, y, head, mask, A, level="seq")


# ── exact support: the sampler drew from its head only (top-k filtering) ─────────────────────────
def support_problem(seed, B, T, V, k, temperature=1.0, on_policy=False):
    logits, lq_full, _, head, mask, A = problem(seed, B, T, V, k, temperature)
    if on_policy:  # the sampler's filtered distribution is the trainer's renormalized over the head
        lq_full = lp_of(logits.detach(), temperature)
    lq_H = torch.log_softmax(lq_full.gather(-1, head), -1)  # q filtered to H, sums to 1
    g = torch.Generator().manual_seed(seed + 7)
    j = torch.multinomial(lq_H.exp().view(-1, k), 1, generator=g).view(B, T)
    y = head.gather(-1, j[..., None])[..., 0]
    return logits, lq_H, j, y, head, mask, A


def call_support(logits, lq_H, j, y, head, mask, A, temperature=1.0, **kw):
    lp = lp_of(logits, temperature)
    return score_centered_pg_loss(lp.gather(-1, y[..., None])[..., 0], lp.gather(-1, head),
                                  lq_H.gather(-1, j[..., None])[..., 0], lq_H, A, mask,
                                  tis_cap=C, mis_band=(LO, HI), exact_support=True, **kw)


@FAST
@given(seed=st.integers(0, 10_000), B=st.integers(1, 3), T=st.integers(1, 4), V=st.integers(3, 24),
       kfrac=st.floats(0.1, 0.9), temperature=st.sampled_from([0.7, 1.0]),
       weighting=st.sampled_from(WEIGHTINGS), centering=st.booleans())
def test_exact_support_matches_renormalized_full_computation(seed, B, T, V, kfrac, temperature,
                                                             weighting, centering):
    k = max(1, int(kfrac * V))
    logits, lq_H, j, y, head, mask, A = support_problem(seed, B, T, V, k, temperature)
    loss, d = call_support(logits, lq_H, j, y, head, mask, A, temperature, weighting=weighting,
                           centering=centering)
    # reference: p̃ = softmax over H of the trainer's logits; the loss of the table on H with no tail
    lpt = torch.log_softmax(logits.gather(-1, head) / temperature, -1)  # (B, T, k), log p̃ on H
    lpt_y = lpt.gather(-1, j[..., None])[..., 0]
    q = lq_H.exp()
    w_y = f64((lpt_y.detach() - lq_H.gather(-1, j[..., None])[..., 0]).exp(), weighting)
    c = q * f64((lpt.detach() - lq_H).exp(), weighting)
    score = w_y * lpt_y - ((c * lpt).sum(-1) if centering else 0)
    ref = -(A[:, None] * score * mask.double())
    torch.testing.assert_close(grad(loss.sum(), logits), grad(ref.sum(), logits), atol=1e-5, rtol=1e-4)
    assert (d["rho"] == 0).all()


@FAST
@given(seed=st.integers(0, 10_000), V=st.integers(3, 24), kfrac=st.floats(0.1, 0.9),
       weighting=st.sampled_from(WEIGHTINGS))
def test_exact_support_removes_the_drift_exactly(seed, V, kfrac, weighting):
    """Constant A: Σ_{y∈H} q_y ∇L(y) = 0 at a position, under every weighting."""
    k = max(1, int(kfrac * V))
    logits, lq_H, j, y, head, mask, A = support_problem(seed, 1, 1, V, k)
    total = torch.zeros_like(logits)
    for i in range(k):
        ji = torch.full_like(j, i)
        loss, _ = call_support(logits, lq_H, ji, head.gather(-1, ji[..., None])[..., 0], head, mask,
                               torch.ones(1, dtype=torch.float64), weighting=weighting)
        total += lq_H.exp()[0, 0, i] * grad(loss.sum(), logits)
    assert total.abs().max() < 1e-6


@FAST
@given(seed=st.integers(0, 10_000), V=st.integers(3, 24), kfrac=st.floats(0.1, 0.9))
def test_exact_support_on_policy_centering_gradient_is_zero(seed, V, kfrac):
    k = max(1, int(kfrac * V))
    logits, lq_H, j, y, head, mask, A = support_problem(seed, 2, 3, V, k, on_policy=True)
    on, _ = call_support(logits, lq_H, j, y, head, mask, A)
    off, _ = call_support(logits, lq_H, j, y, head, mask, A, centering=False)
    assert grad((on - off).sum(), logits).abs().max() < 1e-6


def test_exact_support_rejects_a_head_without_all_the_mass():
    logits, lq_H, j, y, head, mask, A = support_problem(0, 2, 3, 10, 4)
    lq_H = lq_H.clone()
    lq_H[1, 2] -= 0.5  # sequence 1, position 2: Σ_H q = e^-0.5
    mask[1, 2] = True
    with pytest.raises(ScrlError, match=r"Σ_H q = 0\.6065 at sequence 1, position 2"):
        call_support(logits, lq_H, j, y, head, mask, A)


def test_validate_rollout_exact_support_needs_the_sampled_token_in_the_head():
    k, V = 3, 10
    head_ids = torch.arange(k).expand(2, 4, k).clone()
    ro = Rollout(prompt_ids=torch.zeros(2, 1, dtype=torch.long), prompt_mask=torch.ones(2, 1, dtype=torch.bool),
                 completion_ids=torch.ones(2, 4, dtype=torch.long), completion_mask=torch.ones(2, 4, dtype=torch.bool),
                 sampler_logp=torch.full((2, 4), -math.log(k)), head_ids=head_ids,
                 head_logp=torch.full((2, 4, k), -math.log(k)))
    validate_rollout(ro, V, exact_support=True)
    ro.completion_ids[1, 3] = 7
    validate_rollout(ro, V)  # fine without exact support: the token may be in the tail
    with pytest.raises(RolloutError, match="outside the sampler's head .* at sequence 1, completion position 3"):
        validate_rollout(ro, V, exact_support=True)


# ── the LM-head gather that never builds the (tokens × vocab) logits ─────────────────────────────
@FAST
@given(seed=st.integers(0, 10_000), N=st.integers(1, 40), H=st.integers(1, 12), V=st.integers(2, 60),
       m=st.integers(1, 6), chunk=st.integers(1, 16), temperature=st.sampled_from([0.5, 1.0, 2.0]))
def test_lm_head_logprobs_matches_full_logits(seed, N, H, V, m, chunk, temperature):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, H, generator=g, dtype=torch.float64).requires_grad_()
    W = torch.randn(V, H, generator=g, dtype=torch.float64).requires_grad_()
    ids = torch.randint(0, V, (N, m), generator=g)
    out = lm_head_logprobs(h, W, ids, temperature, chunk_size=chunk)
    ref = torch.log_softmax(h @ W.T / temperature, -1).gather(-1, ids)
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=1e-5)
    probe = torch.randn(N, m, generator=g, dtype=torch.float64)
    for a, b in zip(torch.autograd.grad((out * probe).sum(), (h, W)),
                    torch.autograd.grad((ref * probe).sum(), (h, W))):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_lm_head_logprobs_keeps_no_full_logits_for_the_backward():
    """Autograd saves only the chunk inputs: no tensor as large as (tokens × vocab) is kept alive."""
    N, H, V, chunk = 256, 8, 4096, 32
    h = torch.randn(N, H, requires_grad=True)
    W = torch.randn(V, H, requires_grad=True)
    ids = torch.randint(0, V, (N, 5))

    def saved_sizes(fn):
        sizes = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: sizes.append(t.numel()) or t, lambda t: t):
            out = fn()
        return out, sizes

    ref, full = saved_sizes(lambda: torch.log_softmax(h @ W.T, -1).gather(-1, ids))
    out, chunked = saved_sizes(lambda: lm_head_logprobs(h, W, ids, chunk_size=chunk))
    assert max(full) >= N * V  # the plain computation keeps (N × V) floats for its backward ...
    assert chunked and max(chunked) <= V * H  # ... the chunked one keeps its inputs only
    torch.testing.assert_close(torch.autograd.grad(out.sum(), h)[0], torch.autograd.grad(ref.sum(), h)[0],
                               atol=1e-4, rtol=1e-4)


def test_lm_head_logprobs_errors():
    with pytest.raises(ScrlError, match=r"does not match LM head weight \(5, 3\)"):
        lm_head_logprobs(torch.zeros(2, 4), torch.zeros(5, 3), torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(ScrlError, match=r"id outside the vocabulary \[0, 5\)"):
        lm_head_logprobs(torch.zeros(2, 3), torch.zeros(5, 3), torch.full((2, 1), 5))
    with pytest.raises(ScrlError, match="temperature must be > 0"):
        lm_head_logprobs(torch.zeros(2, 3), torch.zeros(5, 3), torch.zeros(2, 1, dtype=torch.long), 0.0)
