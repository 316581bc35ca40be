"""The centering hook for TRL's experimental AsyncGRPOTrainer (scrl_min/trl.py: pack_sampler_heads,
async_grpo_centering_term), on a synthetic batch in the trainer's own layout.

The batch goes through TRL's real packer (`TreeRow`: samples of a group share their prompt in a prefix trie) and
collator (`DataCollatorForRollout`), and TRL's real `AsyncGRPOTrainer.compute_loss` runs on it, bound to a stub that
holds only the attributes it reads (the trainer itself cannot be built on CPU: docs/trl.md, "What TRL allows on a
CPU"). The
policy is a bigram table, logits = E[previous token] + P[position], so a packed position gives exactly the logits it
has in each unpacked sample (no attention needed). Tolerance ‖g − g_ref‖ ≤ 1e-5 ‖g_ref‖ (float32).
"""
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("trl")

from trl.experimental.async_grpo.async_grpo_trainer import AsyncGRPOTrainer, DataCollatorForRollout  # noqa: E402
from trl.experimental.async_grpo.packing import TreeRow  # noqa: E402

from scrl_min import score_centered_pg_loss  # noqa: E402
from scrl_min.trl import async_grpo_centering_term, pack_sampler_heads  # noqa: E402

V, PROMPT, COMPLETION, GROUPS, G = 16, 3, 6, 2, 3
EPS_LOW, EPS_HIGH = 0.2, 0.28


def make_batch(k: int, seed: int = 0):
    """Policy tables (E, P) with grad, the sampler's tables (policy + noise), and GROUPS × G samples drawn from the
    sampler, each with TRL's sample keys plus the sampler's top-k head aligned with input_ids."""
    g = torch.Generator().manual_seed(seed)
    E = (torch.randn(V, V, generator=g) * 1.5).requires_grad_()
    P = (torch.randn(PROMPT + COMPLETION, V, generator=g) * 0.5).requires_grad_()
    Eq, Pq = E.detach() + 0.4 * torch.randn(V, V, generator=g), P.detach() + 0.4 * torch.randn(P.shape, generator=g)
    samples = []
    for group in range(GROUPS):
        prompt = torch.randint(V, (PROMPT,), generator=g).tolist()
        for _ in range(G):
            ids, old, full = list(prompt), [0.0] * PROMPT, [[0.0] * V] * PROMPT
            head_ids, head_lq = [[0] * k] * PROMPT, [[-torch.inf] * k] * PROMPT
            for pos in range(PROMPT - 1, PROMPT + COMPLETION - 1):  # the token at pos + 1 is drawn from q(· | pos)
                lq = torch.log_softmax(Eq[ids[-1]] + Pq[pos], -1)
                y = torch.multinomial(lq.exp(), 1, generator=g).item()
                top = lq.topk(k)
                ids.append(y), old.append(lq[y].item()), full.append(lq.tolist())
                head_ids.append(top.indices.tolist()), head_lq.append(top.values.tolist())
            mask = [0] * PROMPT + [1] * COMPLETION
            if len(samples) == 1:
                mask[PROMPT + 2] = 0  # a context token inside a completion (a tool result, say): no loss there
            samples.append(dict(input_ids=torch.tensor(ids), completion_mask=torch.tensor(mask),
                                old_log_probs=torch.tensor(old), advantage=float(torch.randn(1, generator=g)),
                                group_id=group, metrics={}, sampler_head_ids=torch.tensor(head_ids),
                                sampler_head_logp=torch.tensor(head_lq), sampler_full_logp=torch.tensor(full)))
    return E, P, samples


def pack(samples):
    row = TreeRow()
    for s in samples:
        row.add(s)
    batch = DataCollatorForRollout(pad_token_id=0, num_processes=1).torch_call([[row]])
    assert batch["input_ids"].shape[1] < sum(len(s["input_ids"]) for s in samples)  # the trie shares the prompts
    return row, batch


def trl_loss(E, P, batch):
    """TRL's AsyncGRPOTrainer.compute_loss, unmodified, with the bigram policy as the model."""
    def model(input_ids, position_ids, shift_labels, fused_lm_head, **tree):
        lsm = torch.log_softmax(E[input_ids] + P[position_ids], -1)  # (1, N, V)
        lp = lsm.gather(-1, shift_labels.clamp(min=0)[..., None])[..., 0]
        return SimpleNamespace(log_probs=lp, entropy=-(lsm.exp() * lsm).sum(-1))

    acc = SimpleNamespace(num_processes=1, reduce=lambda x, reduction: x, gather=lambda x: x)
    stub = SimpleNamespace(aux_loss_enabled=False, epsilon_low=EPS_LOW, epsilon_high=EPS_HIGH, accelerator=acc,
                           current_gradient_accumulation_steps=1, _metrics={"train": defaultdict(list)},
                           _step_forward_tokens=0.0, _step_trained_tokens=0.0, _step_seq_len_weighted=0.0,
                           _step_samples=0.0, _step_forward_s=0.0)
    return AsyncGRPOTrainer.compute_loss(stub, model, batch)


def hook_term(E, P, row, batch):
    """The centering term as a subclass would add it: log-probs at the packed positions, heads from the samples."""
    sel = batch["token_index"] >= 0
    pos = batch["token_index"][sel]  # (M,) packed position whose prediction is each trained token
    lsm = torch.log_softmax(E[batch["input_ids"][0, pos]] + P[batch["position_ids"][0, pos]], -1)  # (M, V)
    head_ids, head_lq = pack_sampler_heads(row)
    term, diag = async_grpo_centering_term(lsm.gather(-1, head_ids), head_lq, batch["advantages"][sel],
                                           epsilon_low=EPS_LOW, epsilon_high=EPS_HIGH)
    return term.sum() / batch["global_n_tokens"][0], diag  # TRL's normalization: tokens per process, one process


def unpacked(E, P, samples):
    """(B, T) tensors of the same samples, unpacked: trainer log-probs over the vocabulary at each scored position."""
    T = PROMPT + COMPLETION - 1
    ids = torch.stack([s["input_ids"] for s in samples])  # (B, T + 1)
    lsm = torch.log_softmax(E[ids[:, :-1]] + P[torch.arange(T)], -1)  # (B, T, V): row t scores token t + 1
    take = lambda key: torch.stack([s[key][1:] for s in samples])
    A = torch.tensor([s["advantage"] for s in samples])[:, None].expand(-1, T)
    return lsm, ids[:, 1:], take("completion_mask").bool(), take("old_log_probs"), take("sampler_head_ids"), \
        take("sampler_head_logp"), take("sampler_full_logp"), A


def grad(loss, E, P):
    E.grad = P.grad = None
    loss.backward()
    return torch.cat([E.grad.flatten(), P.grad.flatten()])


def test_pack_sampler_heads_lists_entries_like_trls_packer():
    _, _, samples = make_batch(k=4)
    row, batch = pack(samples)
    (old,) = pack_sampler_heads(row, keys=("old_log_probs",))
    assert torch.equal(old, batch["old_log_probs"][0][batch["token_index"][0] >= 0])
    ids, lq = pack_sampler_heads(row)
    assert ids.shape == lq.shape == (len(old), 4)
    samples[0]["sampler_head_ids"] = samples[0]["sampler_head_ids"][:-1]
    with pytest.raises(Exception, match="sample 0: sampler_head_ids has 8 entries"):
        pack_sampler_heads(row)


def test_async_hook_full_vocabulary_equals_centering_written_out():
    """k = V: TRL's loss + the hook has the gradient of −A·[f(r_y) log p(y) − Σ_v sg(p_v 1[r_v ∈ band(A)]) log p(v)]
    summed over trained tokens / their count, f(r) = r·1[r ∈ band(A)], band [0, 1+ε_hi] (A > 0), [1−ε_lo, ∞) (A < 0),
    written out here without scrl_min (at k = V the tail is empty and α's term has zero gradient: Σ_v p_v ∇log p_v = 0)."""
    E, P, samples = make_batch(k=V)
    row, batch = pack(samples)
    term, _ = hook_term(E, P, row, batch)
    g = grad(trl_loss(E, P, batch) + term, E, P)
    lsm, y, mask, lq_y, _, _, lq, A = unpacked(E, P, samples)
    r = (lsm.detach() - lq).exp()  # r_v = p_v / q_v, (B, T, V)
    band = torch.where(A[..., None] > 0, r <= 1 + EPS_HIGH, r >= 1 - EPS_LOW)  # (B, T, V)
    lp_y = lsm.gather(-1, y[..., None])[..., 0]
    r_y, in_band_y = r.gather(-1, y[..., None])[..., 0], band.gather(-1, y[..., None])[..., 0]
    per_token = -A * ((r_y * in_band_y) * lp_y - (lsm.detach().exp() * band * lsm).sum(-1))
    g_ref = grad(torch.where(mask, per_token, 0.0).sum() / mask.sum(), E, P)
    assert (g - g_ref).norm() <= 1e-5 * g_ref.norm()
    # the check can fail: TRL's loss alone differs (the drift is there)
    assert (grad(trl_loss(E, P, batch), E, P) - g_ref).norm() > 1e-3 * g_ref.norm()


def test_async_hook_topk_equals_score_centered_loss_unpacked():
    """k < V (the tail modeled by ρ): TRL's loss + the hook on the packed row has the gradient of
    score_centered_pg_loss on the unpacked (B, T) batch, weighting "mis" with the band of each token's sign of A."""
    E, P, samples = make_batch(k=5, seed=1)
    row, batch = pack(samples)
    term, diag = hook_term(E, P, row, batch)
    assert 0 < diag["head_mass_q"].min() and diag["head_mass_q"].max() < 1  # a real tail
    g = grad(trl_loss(E, P, batch) + term, E, P)
    lsm, y, mask, lq_y, head_ids, head_lq, _, A = unpacked(E, P, samples)
    loss = 0
    for where, band in ((A > 0, (1e-30, 1 + EPS_HIGH)), (A < 0, (1 - EPS_LOW, float("inf")))):
        per_token, _ = score_centered_pg_loss(lsm.gather(-1, y[..., None])[..., 0], lsm.gather(-1, head_ids), lq_y,
                                              head_lq, A, mask & where, weighting="mis", mis_band=band)
        loss = loss + per_token.sum()
    g_ref = grad(loss / mask.sum(), E, P)
    assert (g - g_ref).norm() <= 1e-5 * g_ref.norm()
    assert (grad(trl_loss(E, P, batch), E, P) - g_ref).norm() > 1e-3 * g_ref.norm()
