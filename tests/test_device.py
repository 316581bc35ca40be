"""Device-correct allocations: the loss, the centering term and the rollout contract compute on their
inputs' device, whatever torch's default device is.

No GPU here, so the test turns the check around: inputs on the CPU, torch's *default* device set to
`meta` (a device without data). A tensor built without `device=` (`torch.zeros(shape)`, `torch.arange(n)`)
then lands on `meta`, and mixing it with the CPU inputs fails, as a CPU allocation mixed with CUDA inputs
fails on a GPU. The results must also equal the ones computed with the default device left alone.
"""
from __future__ import annotations

import pytest
import torch

from scrl_min import Rollout, centering_term, score_centered_pg_loss, validate_rollout


def _batch(seed=0, B=3, T=5, k=4, V=12):
    g = torch.Generator().manual_seed(seed)
    lq = (2 * torch.randn(B, T, V, generator=g)).log_softmax(-1)
    lp = (lq + 0.3 * torch.randn(B, T, V, generator=g)).log_softmax(-1)
    head = lq.topk(k, -1).indices  # (B, T, k)
    y = torch.multinomial(lq.exp().view(-1, V), 1, generator=g).view(B, T)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, -1] = False
    return dict(lp=lp, lq=lq, head=head, y=y, mask=mask, A=torch.randn(B, generator=g), V=V)


def _loss_and_term(b, weighting, **options):
    lp_y = b["lp"].gather(-1, b["y"][..., None])[..., 0].requires_grad_()
    lp_h = b["lp"].gather(-1, b["head"]).requires_grad_()
    lq_y, lq_h = b["lq"].gather(-1, b["y"][..., None])[..., 0], b["lq"].gather(-1, b["head"])
    loss, diag = score_centered_pg_loss(lp_y, lp_h, lq_y, lq_h, b["A"], b["mask"], weighting=weighting,
                                        **options)
    term, _ = centering_term(lp_h, lq_h, b["A"], b["mask"], weighting=weighting)
    loss.sum().backward()
    return [loss, term, lp_y.grad, lp_h.grad, *diag.values()]


@pytest.mark.parametrize("weighting", ["none", "is", "tis", "mis", "icepop"])
@pytest.mark.parametrize("options", [{}, {"level": "sequence"}, {"tail_tol": 1e-3}], ids=["main", "seq", "tol"])
def test_loss_and_centering_term_follow_their_inputs_device(weighting, options):
    b = _batch()
    want = _loss_and_term(b, weighting, **options)
    with torch.device("meta"):
        got = _loss_and_term(b, weighting, **options)
    for w, g in zip(want, got):
        assert g.device.type == "cpu"
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_validate_rollout_follows_its_inputs_device():
    b = _batch()
    B, T = b["y"].shape
    ro = Rollout(torch.zeros(B, 2, dtype=torch.long), torch.ones(B, 2, dtype=torch.bool), b["y"], b["mask"],
                 b["lq"].gather(-1, b["y"][..., None])[..., 0], b["head"], b["lq"].gather(-1, b["head"]))
    validate_rollout(ro, b["V"])  # a good rollout: passes with the default device left alone
    with torch.device("meta"):
        validate_rollout(ro, b["V"])


def test_centering_term_is_the_difference_between_sc_and_the_uncentered_loss():
    """ℓ_SC = ℓ_PG + centering_term: gradients by autograd on both sides, float64 inputs."""
    b = _batch(seed=3)
    b["lp"], b["lq"] = b["lp"].double(), b["lq"].double()
    for weighting in ("none", "tis", "mis"):
        lp_y = b["lp"].gather(-1, b["y"][..., None])[..., 0].requires_grad_()
        lp_h = b["lp"].gather(-1, b["head"]).requires_grad_()
        lq_y, lq_h = b["lq"].gather(-1, b["y"][..., None])[..., 0], b["lq"].gather(-1, b["head"])
        sc, _ = score_centered_pg_loss(lp_y, lp_h, lq_y, lq_h, b["A"], b["mask"], weighting=weighting)
        pg, _ = score_centered_pg_loss(lp_y, lp_h, lq_y, lq_h, b["A"], b["mask"], weighting=weighting,
                                       centering=False)
        term, _ = centering_term(lp_h, lq_h, b["A"], b["mask"], weighting=weighting)
        g_sc = torch.autograd.grad(sc.sum(), [lp_y, lp_h], allow_unused=True)
        g_sum = torch.autograd.grad((pg + term).sum(), [lp_y, lp_h], allow_unused=True)
        for a, c in zip(g_sc, g_sum):
            torch.testing.assert_close(a, c, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(sc, pg + term, rtol=1e-6, atol=1e-6)
        assert (term[~b["mask"]] == 0).all()
