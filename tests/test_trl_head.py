"""The trainer's head log-probs inside TRL come from TRL's own log p(y), with no second pass over the vocabulary.

1. `head_logprobs_from_sampled` against the full softmax in float64 (autograd): values and gradients to the hidden
   states, the LM-head weight and bias, and through log p(y), at a temperature, with y inside the head and not.
2. Inside `ScoreCenteringGRPOTrainer`, the loss and its backward with centering on run exactly the matrix products
   over the vocabulary that TRL's loss alone runs (counted per aten op with a vocabulary-sized operand): the
   centering adds none. The earlier `lm_head_logprobs` pass (h @ Wᵀ over all V, forward and backward) fails this.
3. With bf16 autocast (TRL's default mixed precision), the centered gradient equals the one computed with the head
   log-probs from a full log-softmax over the vocabulary (the earlier path), within bf16 round-off, and dropping
   the centering term moves it by far more.
"""
from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

pytest.importorskip("trl")

import scrl_min  # noqa: E402
from scrl_min import centering_term, gather_logprobs  # noqa: E402
from scrl_min.trl import head_logprobs_from_sampled, task_trainer  # noqa: E402

F64 = torch.float64


def _full_softmax_reference(h, W, b, y, ids, T):
    """log softmax((h Wᵀ + b) / T) at y and at ids, over the whole vocabulary: (N,), (N, k)."""
    lsm = torch.log_softmax((h @ W.T + b) / T, dim=-1)  # (N, V)
    return lsm.gather(-1, y[:, None])[:, 0], lsm.gather(-1, ids)


@pytest.mark.parametrize("T, poison, V", [(1.0, False, 50), (0.7, False, 50), (1.0, True, 50), (0.7, True, 6)])
def test_head_logprobs_from_sampled_is_the_full_softmax(T, poison, V, monkeypatch):
    """V = 50: 1.1 pairs per id, ∂h by a CSR product; V = 6: 9 per id, ∂h by a weighted embedding sum."""
    if poison:  # every uninitialised buffer NaN (the forward's scatter target too): an entry left unwritten shows
        new_empty, empty_like = torch.Tensor.new_empty, torch.empty_like
        monkeypatch.setattr(torch.Tensor, "new_empty", lambda t, *a, **kw: new_empty(t, *a, **kw).fill_(float("nan")))
        monkeypatch.setattr(torch, "empty_like", lambda t, *a, **kw: empty_like(t, *a, **kw).fill_(float("nan")))
        assert torch.zeros(1).new_empty(2).isnan().all() and torch.empty_like(torch.zeros(2)).isnan().all()
    g = torch.Generator().manual_seed(0)
    N, H, k = 11, 6, 5
    h = torch.randn(N, H, generator=g, dtype=F64, requires_grad=True)
    W = torch.randn(V, H, generator=g, dtype=F64, requires_grad=True)
    b = torch.randn(V, generator=g, dtype=F64, requires_grad=True)
    y = torch.randint(V, (N,), generator=g)
    ids = torch.stack([torch.randperm(V, generator=g)[:k] for _ in range(N)])  # (N, k) distinct per row
    ids[:4, 2] = y[:4]  # the sampled token inside the head (an id twice in the pattern)
    lp_y, want = _full_softmax_reference(h, W, b, y, ids, T)
    got = head_logprobs_from_sampled(lp_y, h, W, y, ids, T, bias=b)
    assert got.dtype == F64 and torch.allclose(got, want, rtol=0, atol=1e-12)
    c = torch.randn(N, k, generator=g, dtype=F64)  # a linear functional of the head log-probs
    grads = torch.autograd.grad((c * got).sum(), (h, W, b))
    _, want2 = _full_softmax_reference(h, W, b, y, ids, T)
    ref = torch.autograd.grad((c * want2).sum(), (h, W, b))
    for a, r in zip(grads, ref):
        assert torch.allclose(a, r, rtol=0, atol=1e-12)
    # the check can fail: without log p(y)'s gradient (the softmax's), the gradient is off by ∇lse terms
    detached = head_logprobs_from_sampled(lp_y.detach(), h, W, y, ids, T, bias=b)
    wrong, gap_w = torch.autograd.grad((c * detached).sum(), (h, W))
    assert (wrong - ref[0]).abs().max() > 1e-3
    # through the logit gaps alone, ∂W lives on the named rows (the head ids and y): every other row exactly 0
    named = torch.zeros(V, dtype=torch.bool)
    named[ids.reshape(-1)] = named[y] = True
    assert (~named).sum() >= (5 if V == 50 else 0) and (gap_w[~named] == 0).all() and gap_w[named].isfinite().all()


def test_logit_gaps_keep_a_bf16_weight_as_given_until_the_backward():
    """A bf16 LM head (a bf16 trainer without autocast): the gaps are computed in float32, but what the backward keeps
    is the weight itself, not a float32 copy of it (at V = 151,936, H = 1,024 that copy is 594 MiB, held through TRL's
    head); the gradients are the float32 computation's, in the inputs' dtypes."""
    from scrl_min.trl import head_logit_gaps

    g = torch.Generator().manual_seed(4)
    N, H, V, k = 7, 8, 40, 5
    h = torch.randn(N, H, generator=g).bfloat16().requires_grad_()
    W = torch.randn(V, H, generator=g).bfloat16().requires_grad_()
    y, ids = torch.randint(V, (N,), generator=g), torch.stack([torch.randperm(V, generator=g)[:k] for _ in range(N)])
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append((t.dtype, tuple(t.shape))) or t, lambda t: t):
        gap = head_logit_gaps(h, W, y, ids)
    assert gap.dtype == torch.float32
    assert (torch.float32, (V, H)) not in saved and (torch.bfloat16, (V, H)) in saved, saved
    c = torch.randn(N, k, generator=g)
    gh, gw = torch.autograd.grad((c * gap).sum(), (h, W))
    hf, Wf = h.detach().float().requires_grad_(), W.detach().float().requires_grad_()
    z = hf @ Wf.T
    ref = torch.autograd.grad((c * (z.gather(1, ids) - z.gather(1, y[:, None]))).sum(), (hf, Wf))
    for got, want in zip((gh, gw), ref):
        assert got.dtype == torch.bfloat16 and torch.allclose(got.float(), want, rtol=1e-2, atol=1e-2)


def test_head_logprobs_from_sampled_with_the_whole_vocabulary_as_head():
    """k = V (score_centering_top_k >= the vocabulary: the head is every id, so y is in it twice with its own pair):
    the values and gradients of the full softmax in float64, a padded row of id 0 included; k > V is refused."""
    g = torch.Generator().manual_seed(2)
    N, H, V = 6, 5, 9
    h = torch.randn(N, H, generator=g, dtype=F64, requires_grad=True)
    W = torch.randn(V, H, generator=g, dtype=F64, requires_grad=True)
    b = torch.randn(V, generator=g, dtype=F64, requires_grad=True)
    ids = torch.stack([torch.randperm(V, generator=g) for _ in range(N)])  # (N, V): every id once per row
    ids[-1] = 0  # an empty row past a sequence's end: the sampler pads with id 0
    y = torch.randint(V, (N,), generator=g)
    lp_y, want = _full_softmax_reference(h, W, b, y, ids, 0.8)
    got = head_logprobs_from_sampled(lp_y, h, W, y, ids, 0.8, bias=b)
    assert torch.allclose(got, want, rtol=0, atol=1e-12)
    assert (got[ids == y[:, None]] == lp_y.detach()[:, None].expand(N, V)[ids == y[:, None]]).all()  # p(y) itself
    c = torch.randn(N, V, generator=g, dtype=F64)
    grads = torch.autograd.grad((c * got).sum(), (h, W, b))
    ref = torch.autograd.grad((c * _full_softmax_reference(h, W, b, y, ids, 0.8)[1]).sum(), (h, W, b))
    for a, r in zip(grads, ref):
        assert torch.allclose(a, r, rtol=0, atol=1e-12)
    with pytest.raises(scrl_min.ScrlError, match=r"k = 10 ids per token for a vocabulary of V = 9"):
        head_logprobs_from_sampled(lp_y, h, W, y, torch.cat([ids, ids[:, :1]], 1), 0.8)


@pytest.mark.parametrize("V", [30, 2])
def test_scatter_rows_is_the_dense_product(V):
    """∂W = Dᵀ h, D (N × V) with the pairs' values (ids repeated within and across tokens), against a dense float64
    product built by a loop: V = 30 (about one pair per id, most rows named by none), V = 2 (every pair on id 0, row
    1 named by none: its row must be exactly 0)."""
    from scrl_min.trl import _scatter_rows

    g = torch.Generator().manual_seed(1)
    N, m, H = 5, 4, 3
    flat = torch.randint(V, (N * m,), generator=g)
    flat[:3] = 0  # one id three times, twice within token 0
    if V == 2:
        flat[:] = 0  # row 1 named by no pair
    d, h = torch.randn(N * m, generator=g, dtype=F64), torch.randn(N, H, generator=g, dtype=F64)
    D = torch.zeros(N, V, dtype=F64)
    for i in range(N * m):
        D[i // m, flat[i]] += d[i]
    got = _scatter_rows((V, H), flat, d, h, m)
    assert got.dtype == F64 and got.shape == (V, H) and torch.allclose(got, D.T @ h, rtol=0, atol=1e-12)
    assert (got[D.abs().sum(0) == 0] == 0).all() and (D.abs().sum(0) == 0).any()


def test_head_logprobs_from_sampled_refuses_bad_input():
    h, W = torch.zeros(2, 3, 4), torch.zeros(10, 4)
    y, ids = torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, 5, dtype=torch.long)
    with pytest.raises(scrl_min.ScrlError, match="shapes do not match"):
        head_logprobs_from_sampled(torch.zeros(2, 4), h, W, y, ids)
    bad = ids.clone()
    bad[1, 2, 3] = 10
    with pytest.raises(scrl_min.ScrlError, match=r"outside the vocabulary \[0, 10\) at index \[1, 2, 3\]"):
        head_logprobs_from_sampled(torch.zeros(2, 3), h, W, y, bad)
    with pytest.raises(scrl_min.ScrlError, match="temperature"):
        head_logprobs_from_sampled(torch.zeros(2, 3), h, W, y, ids, 0.0)
    with pytest.raises(scrl_min.ScrlError, match="temperature"):
        head_logprobs_from_sampled(torch.zeros(2, 3), h, W, y, ids, float("nan"))
    with pytest.raises(scrl_min.ScrlError, match=r"k = 0 ids per token for a vocabulary of V = 10"):
        head_logprobs_from_sampled(torch.zeros(2, 3), h, W, y, ids[..., :0])
    with pytest.raises(scrl_min.ScrlError, match=r"gap \(2, 3, 4\)"):  # precomputed gaps of the wrong k
        head_logprobs_from_sampled(torch.zeros(2, 3), h, W, y, ids, gap=torch.zeros(2, 3, 4))


TEST_CONFIG = dict(use_cpu=True, per_device_train_batch_size=8, num_generations=2, max_completion_length=16,
                   learning_rate=1e-2, loss_type="dapo")


def _char_variety(completions, **kw):
    return [float(len(set(c[0]["content"] if isinstance(c, list) else c))) / 10 for c in completions]


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """A trainer (k = 128, float32) and one batch of 4 prompts × a group of 2."""
    tr = task_trainer(tmp_path_factory.mktemp("head"), n_prompts=8, reward_funcs=_char_variety, **TEST_CONFIG)
    tr.model.train()
    tr.current_gradient_accumulation_steps = 1
    return tr, tr._generate_and_score_completions([tr.train_dataset[i] for i in range(4) for _ in range(2)])


class _VocabProducts(TorchDispatchMode):
    """Records the shapes of dense matrix products (mm, addmm, bmm, baddbmm, linear, matmul) with an operand or
    result one of whose dimensions is the vocabulary size V."""
    PRODUCTS = ("mm", "addmm", "bmm", "baddbmm", "linear", "matmul", "_addmm_activation")

    def __init__(self, V):
        super().__init__()
        self.V, self.shapes = V, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [t for t in (*args, out) if isinstance(t, torch.Tensor)]
        # a sparse operand (the head's pairs) makes it (non-zeros × H) work, not a pass over the vocabulary
        if func.overloadpacket.__name__ in self.PRODUCTS and all(t.layout == torch.strided for t in tensors):
            shapes = [tuple(t.shape) for t in tensors]
            if any(self.V in s for s in shapes):
                self.shapes.append(shapes)
        return out


def _vocab_products(tr, inputs, centering: bool):
    """(shapes of the vocabulary-sized products of one loss + backward, the number of rows the trainer scored by a
    full softmax)."""
    tr.args.score_centering, own, full = centering, tr._centering, []

    def spy(*a):
        out = own(*a)
        full.append(int(out[1]["full_softmax_rows"].sum()))
        return out
    tr._centering = spy
    try:
        with _VocabProducts(tr.model.config.vocab_size) as mode:
            tr.compute_loss(tr.model, inputs).backward()
    finally:
        tr.args.score_centering, tr._centering = True, own
        tr.model.zero_grad(set_to_none=True)
    return mode.shapes, sum(full)


def test_centering_adds_no_pass_over_the_vocabulary(batch):
    """Centering adds vocabulary-sized products only for the few rows `_centering` scores by a full softmax (|Σ c| >
    CONDITIONING_LIMIT), each product naming that row count; every other row costs k + 1 logits."""
    tr, inputs = batch
    V, rows = tr.model.config.vocab_size, int(inputs["completion_mask"].sum())
    assert V not in (tr.model.config.hidden_size, 128, rows)  # V identifies the head
    plain, _ = _vocab_products(tr, inputs, False)
    centered, n_full = _vocab_products(tr, inputs, True)
    assert len(plain) > 0  # TRL's own head: its forward and backward products over the vocabulary are seen
    assert n_full <= 0.1 * rows, f"{n_full} of {rows} rows scored over the whole vocabulary"
    as_counts = lambda shapes: Counter(tuple(s) for s in shapes)  # noqa: E731
    assert not as_counts(plain) - as_counts(centered)  # TRL's own products all still run
    extra = list((as_counts(centered) - as_counts(plain)).elements())
    assert all(any(n_full in s for s in shapes) for shapes in extra), \
        f"centering ran vocabulary-sized products over more than its {n_full} full-softmax rows: {extra[:3]}"


def test_logit_gaps_backward_runs_after_trls_head(batch, monkeypatch):
    """The trainer computes the logit gaps before TRL's fused head runs, so autograd runs their backward (and
    allocates its (V, H) ∂W) after the head's backward over the vocabulary, not before it and held through it."""
    from trl.kernels import ChunkedLogProbFunction

    from scrl_min.trl import _HeadLogitGap

    tr, inputs = batch
    order = []
    for cls, name in ((ChunkedLogProbFunction, "trl_head"), (_HeadLogitGap, "logit_gaps")):
        own = cls.backward
        monkeypatch.setattr(cls, "backward", staticmethod(
            lambda ctx, *g, _own=own, _name=name: order.append(_name) or _own(ctx, *g)))
    try:
        tr.compute_loss(tr.model, inputs).backward()
    finally:
        tr.model.zero_grad(set_to_none=True)
    assert order == ["trl_head", "logit_gaps"], order


def _full_pass_centering(tr, fp32: bool):
    """The trainer's `_centering` with the head log-probs from a log-softmax over the whole vocabulary (the path
    before `head_logprobs_from_sampled`): in float32 logits (fp32=True, the reference) or in the same bf16 autocast as
    TRL's forward (the earlier path, whose distance to the reference is bf16's own round-off)."""
    def centering(hidden, logp_y, inputs, gap=None, rounded=None):  # the trainer's logit gaps: unused here
        P, T = inputs["prompt_ids"].shape[1], inputs["completion_ids"].shape[1]
        mask = inputs["completion_mask"].bool()
        h, W = hidden[:, P - 1:P - 1 + T], tr.model.get_output_embeddings().weight
        with torch.autocast("cpu", enabled=False) if fp32 else tr.accelerator.autocast():
            logits = h.float() @ W.float().T if fp32 else h @ W.T  # (B, T, V)
        lp_head = gather_logprobs(logits, inputs["sampler_head_ids"], tr.temperature)
        kw, sequence_level = tr._is_setting()  # TRL's default IS: sequence_mask
        term, diag = centering_term(lp_head, inputs["sampler_head_logp"], inputs["advantages"], mask, **kw)
        if sequence_level:
            term = term * inputs["importance_sampling_ratio"]
        return tr._reduce_like_trl(term, mask, inputs), {**diag, "full_softmax_rows": torch.ones_like(diag["rho"])}
    return centering


def test_bf16_autocast_gradient_is_within_bf16_round_off(tmp_path):
    """TRL's default mixed precision (bf16 autocast): the centered gradient's distance to a float32-logits reference
    is at most twice that of the earlier full-softmax path in the same bf16 (its own round-off). Rows with
    |Σ c| > 1 need the full-softmax fallback for this: without it (CONDITIONING_LIMIT = inf) the distance is
    hundreds of times the centering's effect on this batch."""
    tr = task_trainer(tmp_path, n_prompts=8, reward_funcs=_char_variety, **{**TEST_CONFIG, "bf16": True})
    tr.model.train()
    tr.current_gradient_accumulation_steps = 1
    inputs = tr._generate_and_score_completions([tr.train_dataset[i] for i in range(4) for _ in range(2)])
    assert inputs["advantages"].abs().sum() > 0

    def grad(centering=None, on=True):
        own = tr._centering
        tr.args.score_centering, tr._centering = on, centering or own
        try:
            tr.model.zero_grad(set_to_none=True)
            tr.compute_loss(tr.model, inputs).backward()
        finally:
            tr._centering, tr.args.score_centering = own, True
        return torch.cat([p.grad.flatten().float() for p in tr.model.parameters() if p.grad is not None])

    g_new, g_plain = grad(), grad(on=False)
    g_ref, g_bf16 = grad(_full_pass_centering(tr, fp32=True)), grad(_full_pass_centering(tr, fp32=False))
    effect = (g_ref - g_plain).norm()
    assert effect > 1e-2 * g_ref.norm()  # the centering term moves the gradient
    round_off = (g_bf16 - g_ref).norm()
    assert 0 < round_off < 0.5 * effect
    assert (g_new - g_ref).norm() <= 2 * round_off, ((g_new - g_ref).norm() / round_off).item()
