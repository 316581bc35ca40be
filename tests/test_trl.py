"""Score centering inside TRL's GRPOTrainer (scrl_min/trl.py), on CPU with the embedded model.

1. Two real `trainer.train()` steps: the centering term is non-zero, parameters move, TRL logs the new metrics.
2. On a fixed batch, for every IS setting the config maps onto a weighting and every supported loss_type, the
   gradient of the TRL path equals that of `score_centered_pg_loss` + the reduction written out here
   (independent of the trainer's own helper). Tolerance: ‖g_trl − g_ref‖ ≤ 1e-5 ‖g_ref‖ (float32:
   `bf16=False`, TRL's default is bf16 autocast; the two
   paths differ only in TRL's fused chunked LM head vs a plain logits forward).
"""
import json
import os
import re

import pytest
import torch

pytest.importorskip("trl")

import scrl_min  # noqa: E402
from scrl_min import gather_logprobs, score_centered_pg_loss  # noqa: E402
from scrl_min.trl import ScoreCenteringGRPOTrainer, distinct_names_reward_func, task_trainer  # noqa: E402

# the trainer of these tests: 8 prompts × groups of 2 per step, 16 tokens, float32 (bf16=False) on CPU
TEST_CONFIG = dict(use_cpu=True, per_device_train_batch_size=8, num_generations=2, max_completion_length=16,
                   learning_rate=1e-2)


def make_trainer(tmp_path, reward=distinct_names_reward_func, **cfg):
    return task_trainer(tmp_path, n_prompts=8, reward_funcs=reward, **{**TEST_CONFIG, **cfg})


def test_trl_trainer_two_steps_on_cpu(tmp_path):
    tr = make_trainer(tmp_path, max_steps=2)
    before = [p.detach().clone() for p in tr.model.parameters()]
    tr.train()
    moved = max((a - p.detach()).abs().max().item() for a, p in zip(before, tr.model.parameters()))
    assert moved > 0
    logs = [h for h in tr.state.log_history if "score_centering/loss" in h]
    assert len(logs) == 2
    for h in logs:
        for key in ("score_centering/head_mass_q", "score_centering/head_mass_p", "score_centering/rho_mean",
                    "score_centering/rho_at_bound", "sampling/mismatch_kl"):
            assert key in h and h[key] == h[key]  # present, not NaN
        assert 0 < h["score_centering/head_mass_q"] <= 1 and h["sampling/mismatch_kl"] > 0  # σ = 0.1 mismatch
        assert 0 <= h["score_centering/rho_at_bound"] <= 1
    assert any(h["score_centering/loss"] != 0 for h in logs)  # the centering term is in the loss
    # TRL's own IS code ran on the TorchSampler's log-probs (default: sequence_mask)
    assert "sampling/importance_sampling_ratio/mean" in logs[0]


def test_trl_trainer_with_the_whole_vocabulary_as_head(tmp_path):
    """score_centering_top_k above V: a warning, k = V, and a step that runs (at 331a802 the loss raised a RuntimeError
    from `sampled_addmm` here: the k + 1 pairs a row outnumbered V) with every head row the whole vocabulary, so
    Σ_H q = 1 and ρ = 0."""
    with pytest.warns(UserWarning, match=r"score_centering_top_k=100000 is above the vocabulary.*k = V = 2048"):
        tr = make_trainer(tmp_path, max_steps=1, score_centering_top_k=100_000, per_device_train_batch_size=4,
                          max_completion_length=4)
    assert tr.k == tr.model.config.vocab_size == 2048
    tr.train()
    logs = [h for h in tr.state.log_history if "score_centering/loss" in h]
    assert len(logs) == 1 and logs[0]["score_centering/loss"] == logs[0]["score_centering/loss"]  # not NaN
    assert logs[0]["score_centering/head_mass_q"] == pytest.approx(1.0, abs=1e-3)
    assert logs[0]["score_centering/rho_mean"] == 0.0


@pytest.mark.parametrize("cfg, says", [
    (dict(loss_type="sapo"), "loss_type='sapo'"),
    (dict(num_iterations=2), "num_iterations > 1"),
    (dict(vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_min=0.5), "clip_min=0.5"),
    (dict(repetition_penalty=1.1), "repetition_penalty != 1"),
    (dict(generation_kwargs={"logprobs": 5, "seed": 1}), "generation_kwargs ['logprobs']"),
    # vLLM options: refused before TRL's __init__ builds an engine
    (dict(use_vllm=True, vllm_enable_sleep_mode=True), "vllm_enable_sleep_mode"),
    (dict(use_vllm=True, vllm_mode="server", vllm_engine_kwargs={"enforce_eager": True}),
     "vllm_engine_kwargs without use_vllm=True, vllm_mode='colocate'"),
    (dict(use_vllm=True, vllm_engine_kwargs={"max_logprobs": 20}), "max_logprobs=20 caps the engine below "
                                                                   "score_centering_top_k=128"),
])
def test_trl_trainer_refuses_what_centering_does_not_compose_with(tmp_path, cfg, says):
    with pytest.raises(scrl_min.ScrlError, match=re.escape(says)):
        make_trainer(tmp_path, **cfg)


def char_variety(completions, **kwargs):
    """A reward that varies within every group, so no advantage is zero by accident."""
    return [len(set(c[-1]["content"])) / 20 for c in completions]


# TRL IS option → (config fields, score_centered_pg_loss keywords, TRL's sequence ratio bound or None)
IS_CASES = {
    "no_is": (dict(vllm_importance_sampling_correction=False), dict(weighting="none"), None),
    "token_truncate": (dict(vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_max=1.05),
                       dict(weighting="tis", tis_cap=1.05), None),
    "token_mask": (dict(vllm_importance_sampling_mode="token_mask", vllm_importance_sampling_clip_min=0.9,
                        vllm_importance_sampling_clip_max=1.1), dict(weighting="mis", mis_band=(0.9, 1.1)), None),
    "sequence_truncate": (dict(vllm_importance_sampling_mode="sequence_truncate",
                               vllm_importance_sampling_clip_max=1.2), dict(weighting="none"), "truncate"),
    "sequence_mask": (dict(vllm_importance_sampling_mode="sequence_mask", vllm_importance_sampling_clip_min=0.5,
                           vllm_importance_sampling_clip_max=2.0), dict(weighting="none"), "mask"),
}


def reference_loss(model, inputs, sc_kw, seq, cfg, loss_type, centering=True, head_values=None):
    """score_centered_pg_loss on a plain logits forward, TRL's sequence ratio, and TRL's reduction, written out.

    head_values: (B, T, k) the head log-probs TRL's centering read (`trl_loss_and_head`), or None. Given, the head
    log-probs keep this forward's gradient but take those values (checked within 2e-5 of this forward's: 4× the
    largest gap seen, 5.2e-6 with 2 threads; a bias in TRL's values above that fails here), so that
    the coefficients computed here from them cannot fall on the other side of an MIS band edge than TRL's did
    because of float round-off between two forwards (seen: 3 of 16,384 head entries with 2 threads, gradients
    6.5e-3 apart). The coefficients themselves are still computed here, by `score_centered_pg_loss`."""
    P, T = inputs["prompt_ids"].shape[1], inputs["completion_ids"].shape[1]
    mask = inputs["completion_mask"].bool()
    logits = model(input_ids=torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
                   attention_mask=torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)).logits
    ids = torch.cat([inputs["completion_ids"][..., None], inputs["sampler_head_ids"]], -1)
    lp = gather_logprobs(logits[:, P - 1:P - 1 + T], ids, temperature=1.0)
    q_y, lp_head = inputs["sampling_per_token_logps"], lp[..., 1:]
    if head_values is not None:
        valid = (inputs["sampler_head_logp"] > scrl_min.EMPTY_LOGP) & mask[..., None]
        off = (head_values - lp_head.detach())[valid].abs().max().item()
        assert off <= 2e-5, f"TRL's head log-probs are {off:.3g} from the reference forward's"
        lp_head = head_values + (lp_head - lp_head.detach())  # TRL's values exactly (x − x = 0), this gradient
    per_token, _ = score_centered_pg_loss(lp[..., 0], lp_head, q_y, inputs["sampler_head_logp"],
                                          inputs["advantages"], mask, centering=centering, **sc_kw)
    if seq:  # TRL's sequence ratio: the product of the token ratios, truncated or masked
        R = ((lp[..., 0].detach() - q_y) * mask).sum(-1, keepdim=True).exp()
        lo, hi = cfg.get("vllm_importance_sampling_clip_min") or 0.0, cfg["vllm_importance_sampling_clip_max"]
        per_token = per_token * (R.clamp(max=hi) if seq == "truncate" else R * ((R >= lo) & (R <= hi)))
    B, n = per_token.shape[0], mask.sum()
    return {"grpo": (per_token.sum(-1) / mask.sum(-1).clamp(min=1)).mean(), "bnpo": per_token.sum() / n,
            "dr_grpo": per_token.sum() / (B * 16), "dapo": per_token.sum() / inputs["num_items_in_batch"],
            "luspo": per_token.sum() / B}[loss_type]


def trl_loss_and_head(tr, inputs, monkeypatch):
    """TRL's loss on the batch (`compute_loss`, with grad) and, detached, the (B, T, k) head log-probs its centering
    term read: for `reference_loss`'s head_values."""
    seen, real = [], scrl_min.trl.centering_term

    def spy(logp_head, *args, **kwargs):
        seen.append(logp_head.detach().clone())
        return real(logp_head, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(scrl_min.trl, "centering_term", spy)
        loss = tr.compute_loss(tr.model, inputs)
    assert len(seen) == 1
    return loss, seen[0]


def grad_of(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("case, loss_type", [(c, lt) for c in IS_CASES for lt in ("grpo", "bnpo", "dr_grpo", "dapo")]
                         + [("no_is", "luspo"), ("token_mask", "luspo")])
def test_trl_gradient_equals_score_centered_loss(tmp_path, monkeypatch, case, loss_type):
    cfg, sc_kw, seq = IS_CASES[case]
    tr = make_trainer(tmp_path, reward=char_variety, loss_type=loss_type, **cfg)
    tr.model.train()
    tr.current_gradient_accumulation_steps = 1  # set by HF's training loop per accumulation window
    rows = [tr.train_dataset[i] for i in range(4) for _ in range(2)]  # 4 prompts × a group of 2
    inputs = tr._generate_and_score_completions(rows)
    assert inputs["advantages"].abs().sum() > 0
    loss, head = trl_loss_and_head(tr, inputs, monkeypatch)
    g_trl = grad_of(tr.model, loss)
    g_ref = grad_of(tr.model, reference_loss(tr.model, inputs, sc_kw, seq, cfg, loss_type, head_values=head))
    scale = g_ref.norm()
    assert scale > 0
    assert (g_trl - g_ref).norm() <= 1e-5 * scale
    # the check can fail: dropping the centering term, or (token-level IS) leaving its coefficients unweighted
    # (c_v = q_v − ρ p_v next to a weighted policy term) moves the gradient by far more than the tolerance
    ref = lambda kw, s, centering=True: reference_loss(tr.model, inputs, kw, s, cfg, loss_type, centering, head)
    wrong = [ref(sc_kw, seq, centering=False)]
    if sc_kw["weighting"] != "none":
        none = dict(weighting="none")
        wrong.append(ref(sc_kw, seq, False) + ref(none, None) - ref(none, None, False))
    for loss in wrong:
        assert (g_ref - grad_of(tr.model, loss)).norm() > 1e-3 * scale


def test_score_centering_off_is_trls_plain_loss(tmp_path):
    """score_centering=False: the gradient is that of the uncentered loss, and no centering metric is logged."""
    cfg, sc_kw, seq = IS_CASES["token_truncate"]
    tr = make_trainer(tmp_path, reward=char_variety, loss_type="dapo", score_centering=False, **cfg)
    tr.model.train()
    tr.current_gradient_accumulation_steps = 1
    inputs = tr._generate_and_score_completions([tr.train_dataset[i] for i in range(4) for _ in range(2)])
    g_trl = grad_of(tr.model, tr.compute_loss(tr.model, inputs))
    g_ref = grad_of(tr.model, reference_loss(tr.model, inputs, sc_kw, seq, cfg, "dapo", centering=False))
    assert (g_trl - g_ref).norm() <= 1e-5 * g_ref.norm()
    assert not any(k.startswith("score_centering/") for k in tr._metrics["train"])


def test_every_use_vllm_branch_of_trl_is_accounted_for():
    """The trainer sets `use_vllm = True` so that TRL's importance-sampling code runs (scrl_min/trl.py docstring).
    That is sound only for the branches reviewed there: a TRL version that reads `self.use_vllm` anywhere else
    (a new branch, or a changed condition) fails here and needs a new review."""
    import inspect

    from trl import GRPOTrainer
    reviewed = {
        "self.use_vllm = args.use_vllm",
        'if self.loss_type == "vespo" and self.use_vllm and self.vllm_importance_sampling_correction:',
        "if self.use_vllm:",  # __init__ (engine built) and _generate_single_turn (overridden): twice
        'if self.use_vllm and self.vllm_mode == "colocate":',  # tool loop: refused
        "if self.use_vllm and self.state.global_step != self._last_loaded_step:",  # rollout_func: refused
        "self.use_vllm and self.vllm_importance_sampling_correction",  # recompute old log-probs
        "if self.use_vllm and self.vllm_importance_sampling_correction:",  # ratio, metrics, batch key: 3 times
        'if self.use_vllm and self.vllm_importance_sampling_correction and self.loss_type != "vespo":',
    }
    lines = [ln.strip() for ln in inspect.getsource(GRPOTrainer).splitlines() if "self.use_vllm" in ln]
    assert set(lines) == reviewed, f"unreviewed: {set(lines) - reviewed}; gone: {reviewed - set(lines)}"
    assert len(lines) == 11
    assert "def _generate_single_turn" in inspect.getsource(ScoreCenteringGRPOTrainer)


# --- scale-out: `accelerate launch --num_processes 2` on CPU (gloo), scripts/trl_ddp.py --------------------------
# What TRL 1.16 normalizes by (grpo_trainer.py, _compute_loss), and so what DDP's gradient average gives:
#   grpo     mean over the process's sequences of their token means → average over processes = mean over all
#            sequences of the global batch (equal per-process batch sizes): global
#   dr_grpo  Σ / (B_local · max_completion_length) → Σ_global / (B_global · L): global
#   luspo    Σ / B_local → Σ_global / B_global: global
#   dapo     Σ / (num_items_in_batch / num_processes), num_items_in_batch the global token count → Σ / N_global: global
#   bnpo     Σ / N_local, the process's own token count → ½ (Σ_0 / N_0 + Σ_1 / N_1) ≠ Σ / N_global when N_0 ≠ N_1:
#            local (TRL's choice, kept: the centering term is reduced exactly like TRL's policy term)
DDP_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")


@pytest.mark.slow
def test_two_process_gradient_equals_single_process_gradient(tmp_path):
    """Two DDP processes (accelerate launch, gloo) each take half of a fixed global batch; the all-reduced gradient
    equals, for every loss_type, the gradient of score_centered_pg_loss on the whole batch in one process (written
    out in `reference_loss`, normalized over the global batch), and for bnpo the average of the two halves'
    gradients, each normalized by its own token count, which is what TRL does. Tolerance ‖Δg‖ ≤ 1e-5 ‖g‖. The same
    launch trains 2 steps: both processes end with identical parameters, TRL logs the centering metrics."""
    import subprocess
    import sys

    sys.path.insert(0, str(scrl_min.REPO_ROOT / "scripts"))
    from trl_ddp import DDP_CONFIG, shard

    cfg, sc_kw, seq = IS_CASES["token_mask"]
    one = {k: v for k, v in DDP_CONFIG.items() if k != "ddp_backend"}  # one process: no process group to set up
    tr = make_trainer(tmp_path, reward=char_variety, **{**one, "per_device_train_batch_size": 8}, **cfg)
    tr.model.train()
    rows = [tr.train_dataset[i] for i in range(4) for _ in range(2)]  # the global batch: 4 prompts × groups of 2
    batch = tr._generate_and_score_completions(rows)
    halves = [shard(batch, r, 2) for r in range(2)]
    n0, n1 = (int(h["completion_mask"].sum()) for h in halves)
    assert n0 != n1, "equal token counts per process would hide bnpo's local normalization"
    torch.save(batch, tmp_path / "batch.pt")
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
           str(scrl_min.REPO_ROOT / "scripts" / "trl_ddp.py"), "--out", str(tmp_path / "ddp"),
           "--batch", str(tmp_path / "batch.pt"), "--loss_types", ",".join(DDP_LOSS_TYPES), "--steps", "2",
           "--config", json.dumps(cfg)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(scrl_min.REPO_ROOT)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ddp = torch.load(tmp_path / "ddp" / "ddp_grads.pt")
    gaps = {}
    for loss_type in DDP_LOSS_TYPES:
        d = ddp[loss_type]
        assert d["local_tokens"] == [n0, n1] and d["rank_gap"] == 0.0  # both processes hold the same gradient
        ref = lambda b: grad_of(tr.model, reference_loss(tr.model, b, sc_kw, seq, cfg, loss_type))
        g_global = ref(batch)
        g_local = (ref(halves[0]) + ref(halves[1])) / 2  # each half normalized on its own, then DDP's average
        expected = g_local if loss_type == "bnpo" else g_global
        gaps[loss_type] = ((d["grad"] - expected).norm() / expected.norm()).item()
        assert gaps[loss_type] <= 1e-5, (loss_type, gaps)
        if loss_type == "bnpo":  # the check can fail: global and local token means differ here
            gaps["bnpo, local vs global token mean"] = ((g_global - g_local).norm() / g_global.norm()).item()
            assert gaps["bnpo, local vs global token mean"] > 1e-3
    print("relative gradient gaps:", {k: f"{v:.1e}" for k, v in gaps.items()}, "tokens per process:", (n0, n1))
    run = json.loads((tmp_path / "ddp" / "ddp_train.json").read_text())
    assert run["num_processes"] == 2 and run["backend"] == "gloo"
    assert run["param_gap_between_processes"] == 0.0 and run["param_change_max"] > 0
    steps = [h for h in run["log_history"] if "score_centering/loss" in h]
    assert len(steps) == 2 and all(0 < h["score_centering/head_mass_q"] <= 1 for h in steps)


def trl_shaped_rows(B=3, T=4, V=50, k=5, seed=0):
    """Rows shaped like TRL's vLLM output (top-k + the sampled token when outside it, sorted by log-prob,
    distinct ids), from known distributions q; and the expected dense tensors, built independently."""
    g = torch.Generator().manual_seed(seed)
    comp, lps, ids, want_q, want_heads = [], [], [], [], []
    for b in range(B):
        Tb = T - b % 2  # ragged lengths
        lq = torch.log_softmax(torch.randn(Tb, V, generator=g) * 2, -1)
        y = [torch.multinomial(lq[t].exp(), 1, generator=g).item() if t % 2 else int(lq[t].argmin())
             for t in range(Tb)]  # odd positions: a draw; even: the least likely token, surely outside the top-k
        rows = [{int(v): lq[t, v].item() for v in lq[t].topk(k).indices} | {y[t]: lq[t, y[t]].item()}
                for t in range(Tb)]
        rows = [sorted(r.items(), key=lambda e: -e[1]) for r in rows]
        comp.append(y)
        lps.append([[lp for _, lp in r] for r in rows])
        ids.append([[i for i, _ in r] for r in rows])
        want_q.append([lq[t, y[t]].item() for t in range(Tb)])
        want_heads.append([sorted(int(v) for v in lq[t].topk(k).indices) for t in range(Tb)])
    return comp, lps, ids, want_q, want_heads


def test_trl_vllm_head_looks_the_sampled_token_up_by_id():
    from scrl_min.trl import trl_vllm_head

    comp, lps, ids, want_q, want_heads = trl_shaped_rows()
    assert {len(r) for rows in ids for r in rows} == {5, 6}  # both row kinds occur
    q_y, head_ids, head_lq = trl_vllm_head(comp, lps, ids, k=5)
    assert q_y.shape == (3, 4) and head_ids.shape == head_lq.shape == (3, 4, 5)
    for b, y in enumerate(comp):
        for t in range(len(y)):
            assert q_y[b, t].item() == pytest.approx(want_q[b][t], abs=1e-6)
            assert sorted(head_ids[b, t].tolist()) == want_heads[b][t]
            assert q_y[b, t] != lps[b][t][0] or y[t] == ids[b][t][0]  # TRL's row[0] is not the sampled token
        assert torch.isinf(head_lq[b, len(y):]).all()  # padding past the sequence's end
    mask = torch.tensor([[t < len(y) for t in range(4)] for y in comp])
    scrl_min.validate_rollout(scrl_min.Rollout(
        torch.zeros(3, 1, dtype=torch.long), torch.ones(3, 1, dtype=torch.bool),
        torch.tensor([y + [0] * (4 - len(y)) for y in comp]), mask, q_y, head_ids, head_lq), vocab_size=50)


@pytest.mark.parametrize("spoil, says", [
    (lambda lps, ids: (ids[0][1].pop(), lps[0][1].pop()), "expected k = 5 or k + 1 (raise vLLM's max_logprobs"),
    (lambda lps, ids: lps[1][2].__setitem__(0, None), "position 2: a None (NaN) log-prob"),
    (lambda lps, ids: ids[2][0].__setitem__(-1, 10_000), "sequence 2, position 0: the sampled id"),  # y_0 is last
])
def test_trl_vllm_head_refuses_broken_rows(spoil, says):
    from scrl_min.trl import trl_vllm_head

    comp, lps, ids, *_ = trl_shaped_rows()
    assert ids[2][0][-1] == comp[2][0]  # position 0 samples the least likely token: the row's extra, last entry
    spoil(lps, ids)
    with pytest.raises(scrl_min.RolloutError, match=re.escape(says)):
        trl_vllm_head(comp, lps, ids, k=5)


# --- the rollout contract on every batch that reaches the loss ----------------------------------------------------
@pytest.fixture(scope="module")
def sc_batch(tmp_path_factory):
    """One TorchSampler trainer and one batch of 4 prompts × a group of 2, k = 128 (faults are applied to copies)."""
    tr = make_trainer(tmp_path_factory.mktemp("contract"), reward=char_variety)
    tr.model.train()
    tr.current_gradient_accumulation_steps = 1
    return tr, tr._generate_and_score_completions([tr.train_dataset[i] for i in range(4) for _ in range(2)])


def _spoil(inputs, fault):
    """A copy of the batch with one fault at a generated position; returns (batch, texts the error must contain)."""
    x = {k: v.clone() if torch.is_tensor(v) else v for k, v in inputs.items()}
    b, t = x["completion_mask"].bool().nonzero()[5].tolist()  # a loss-carrying position
    if fault == "repeated_id":
        x["sampler_head_ids"][b, t, 7] = x["sampler_head_ids"][b, t, 2]
        says = "duplicated id in the sampler's head"
    elif fault == "short_head":  # one slot empty: 127 valid entries where 128 were asked
        x["sampler_head_logp"][b, t, -1] = -torch.inf
        says = "short sampler head: k=128 asked, 127 valid, the rest empty"
    elif fault == "narrow_head":  # the whole head one column short of k: named at its first generated position
        x["sampler_head_ids"] = x["sampler_head_ids"][..., :-1]
        x["sampler_head_logp"] = x["sampler_head_logp"][..., :-1]
        b, t = x["completion_mask"].bool().nonzero()[0].tolist()
        says = "short sampler head: k=128 asked, 127 valid, the rest empty (the engine capped or padded"
    elif fault == "sampled_logp_off_head":  # log q(y_t) disagrees with the head's entry for the same id
        b, t = ((x["sampler_head_ids"] == x["completion_ids"][..., None]).any(-1)
                & x["completion_mask"].bool()).nonzero()[0].tolist()
        x["sampling_per_token_logps"][b, t] -= 0.05
        says = "differs from its head entry's"
    elif fault == "nan_head":
        x["sampler_head_logp"][b, t, 3] = torch.nan
        says = "NaN in the sampler's top-k log-probs"
    elif fault == "no_head":
        del x["sampler_head_ids"], x["sampler_head_logp"]
        return x, ["batch without ['sampler_head_ids', 'sampler_head_logp']"]
    return x, [says, f"at sequence {b}, completion position {t}"]


@pytest.mark.parametrize("fault", ["repeated_id", "short_head", "narrow_head", "sampled_logp_off_head", "nan_head",
                                   "no_head"])
def test_every_batch_reaching_the_loss_passes_the_rollout_contract(sc_batch, fault):
    """The trainer checks the batch itself (check_batch), whatever produced it: a broken batch handed to compute_loss
    (a custom backend, a collator, a bug) is refused naming the sequence and position, not trained on."""
    tr, inputs = sc_batch
    assert torch.isfinite(tr.compute_loss(tr.model, inputs))  # the sampler's own batch passes
    bad, says = _spoil(inputs, fault)
    with pytest.raises(scrl_min.RolloutError) as e:
        tr.compute_loss(tr.model, bad)
    assert all(s in str(e.value) for s in says), (says, str(e.value))


def test_centering_follows_its_inputs_device(sc_batch):
    """Inputs on the CPU while the default device is `meta`: an allocation that does not follow its inputs
    (torch.zeros(...) without device=) lands on meta and meets a CPU tensor, an error (as a CPU allocation would on a
    GPU). The trainer's whole loss (the contract check, TRL's forward, the LM head at the head ids, the centering term,
    TRL's reduction) and the async hook must give the numbers they give with the CPU as the default device."""
    from scrl_min.trl import async_grpo_centering_term

    tr, inputs = sc_batch
    g = torch.Generator().manual_seed(0)
    lsm = torch.log_softmax(torch.randn(12, 40, generator=g), -1)  # (M, V)
    top = torch.log_softmax(lsm + 0.3 * torch.randn(12, 40, generator=g), -1).topk(6)  # the sampler's head
    hook_args = (lsm.gather(-1, top.indices), top.values, torch.randn(12, generator=g))
    want = tr.compute_loss(tr.model, inputs), async_grpo_centering_term(*hook_args)
    with torch.device("meta"):
        got = tr.compute_loss(tr.model, inputs), async_grpo_centering_term(*hook_args)
    assert got[0].device.type == "cpu" and torch.equal(got[0], want[0])
    (term, diag), (term0, diag0) = got[1], want[1]
    assert term.device.type == "cpu" and torch.equal(term, term0) and term0.abs().sum() > 0
    assert all(torch.equal(diag[k], diag0[k]) for k in diag0)
