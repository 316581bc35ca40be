"""FP8 numerics, the torch sampler's rollout contract, the trainer loop, resume and bad input.

Checks compare against independent computations: float64 dequantized matmuls, a teacher-forced
full-vocabulary forward of the same weights, a second uninterrupted run.
"""
import dataclasses
import json

import pytest
import torch

import scrl_min
from scrl_min import (QuantLinear, RolloutError, ScrlError, TorchSampler, TrainConfig, Trainer,
                      distinct_names_reward, load_policy, quantize, trainer_logprobs,
                      validate_rollout)
from scrl_min import DEFAULT_MODEL_PATH


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    model, tok = load_policy(str(DEFAULT_MODEL_PATH))
    return model, tok


def prompts_of(tok, n):
    ds = scrl_min.make_task_dataset(n, seed=3)
    return [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                    tokenize=True, return_dict=False) for p in ds["prompt"]]


# ─── FP8 ────────────────────────────────────────────────────────────────────────────────────────
def test_quantize_e4m3_rowwise_error_bound():
    x = torch.randn(17, 64, dtype=torch.float64) * torch.logspace(-3, 3, 17, dtype=torch.float64)[:, None]
    x8, scale = quantize(x, "e4m3")
    assert x8.dtype == torch.float8_e4m3fn and scale.shape == (17, 1)
    deq = x8.double() * scale.double()
    # e4m3 keeps 3 mantissa bits: relative error <= 2^-4 for normal values; row max maps onto 448
    rel = ((deq - x).abs() / x.abs().amax(1, keepdim=True)).max()
    assert rel < 2 ** -4
    assert torch.allclose(deq.abs().amax(1), x.abs().amax(1), rtol=2 ** -4)


def test_fp8_linear_matches_float64_dequantized_matmul():
    torch.manual_seed(1)
    w, x = torch.randn(48, 32), torch.randn(5, 7, 32)
    lin = QuantLinear(32, 48, bias=False, fmt="fp8", backend="scaled_mm")
    lin.set_weight(w)
    y = lin(x.bfloat16())
    assert y.shape == (5, 7, 48)
    x8, xs = quantize(x.bfloat16().reshape(-1, 32), "e4m3")
    ref = (x8.double() * xs.double()) @ (lin.weight8.double() * lin.weight_scale.double()).t()
    assert torch.allclose(y.double().reshape(-1, 48), ref, rtol=1e-2, atol=1e-2)
    # and it is a real approximation of the float matmul (not, say, zero)
    exact = x.reshape(-1, 32).double() @ w.double().t()
    assert ((y.double().reshape(-1, 48) - exact).norm() / exact.norm()) < 0.1


def test_fp8_backends_agree():
    """torch._scaled_mm and the float32 emulation multiply the same e4m3 operands."""
    torch.manual_seed(2)
    w, x = torch.randn(64, 96), torch.randn(40, 96) * 3
    a, b = (QuantLinear(96, 64, False, fmt="fp8", backend=be) for be in ("scaled_mm", "emulated"))
    a.set_weight(w)
    b.set_weight(w)
    ya, yb = a(x), b(x)
    # both round the output to bf16: they may differ by one bf16 ulp (2^-8 relative) from summation order
    assert ((ya - yb).abs() <= 2 ** -7 * yb.abs() + 1e-6).all()
    with pytest.raises(ScrlError, match="unknown FP8 backend"):
        QuantLinear(4, 4, False, fmt="fp8", backend="fp4")


# ─── the sampler contract ───────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize("precision,kv_cache", [("fp32", "auto"), ("bf16", "auto"), ("fp8", "auto"),
                                               ("fp8_e5m2", "auto"), ("int8_w8a8", "auto"),
                                               ("int4_g32", "auto"), ("bf16", "fp8_e4m3"),
                                               ("int4_g128", "fp8_e4m3")])
def test_rollout_contract_against_teacher_forced_forward(policy, precision, kv_cache):
    model, tok = policy
    T, k, temp = 8, 16, 0.7
    s = TorchSampler(model.config, precision=precision, k=k, temperature=temp, seed=0, kv_cache=kv_cache)
    s.push_weights(model.state_dict())
    prompts = prompts_of(tok, 3)
    ro = s.generate(prompts, T, tok.eos_token_id, tok.pad_token_id, torch.Generator().manual_seed(0))
    B = len(prompts)
    assert ro.completion_ids.shape == (B, T) and ro.completion_ids.dtype == torch.long
    assert ro.sampler_logp.shape == (B, T) and ro.sampler_logp.dtype == torch.float32
    assert ro.head_ids.shape == (B, T, k) and ro.head_logp.shape == (B, T, k)
    assert ro.head_logp.dtype == torch.float32 and ro.completion_mask.dtype == torch.bool
    # independent: one teacher-forced forward of the sampler's own model over prompt + completion
    # (through a fresh FP8 KV cache when the sampler has one: it rounds every key and value)
    ids = torch.cat([ro.prompt_ids, ro.completion_ids], 1)
    attn = torch.cat([ro.prompt_mask, ro.completion_mask], 1).long()
    cache = None if kv_cache == "auto" else scrl_min.fp8_kv_cache(model.config.num_hidden_layers)
    with torch.no_grad():
        logits = s.model(input_ids=ids, attention_mask=attn, position_ids=(attn.cumsum(-1) - 1).clamp(min=0),
                         past_key_values=cache, use_cache=cache is not None).logits.double()
    P = ro.prompt_ids.shape[1]
    full = torch.log_softmax(logits[:, P - 1:P - 1 + T] / temp, -1)  # (B, T, V)
    m = ro.completion_mask
    ref_y = full.gather(-1, ro.completion_ids[..., None]).squeeze(-1)
    # cached decoding vs one full forward: exact in fp32; with rounded operands, float32 summation
    # order can flip an e4m3/bf16 rounding, so check the mean tightly and the worst case loosely
    # (e5m2 has half e4m3's mantissa: one flipped activation rounding moved a log-prob by 0.33 here)
    tol_max, tol_mean = {"fp32": (1e-4, 1e-5), "bf16": (0.08, 0.005),
                         "fp8_e5m2": (0.6, 0.02)}.get(precision, (0.3, 0.02))
    ref_head = full.gather(-1, ro.head_ids)
    for ref, got in [(ref_y, ro.sampler_logp), (ref_head, ro.head_logp)]:
        err = (ref - got.double())[m].abs()
        assert err.max() < tol_max and err.mean() < tol_mean, (err.max(), err.mean())
    # heads are the top-k, sorted, full-vocabulary normalized (mass <= 1), distinct ids
    assert (ro.head_logp[m][:, :-1] >= ro.head_logp[m][:, 1:]).all()
    assert (ro.head_logp[m].exp().sum(-1) <= 1 + 1e-4).all()
    assert all(len(set(row.tolist())) == k for row in ro.head_ids[m])
    if precision == "fp32":
        top = full.topk(k, -1).values
        assert (top - ro.head_logp.double())[m].abs().max() < 1e-4


def test_fp32_sampler_matches_trainer_at_aligned_positions(policy):
    """Trainer row (P − 1 + t) scores completion token t; shifting by one position must not match."""
    model, tok = policy
    s = TorchSampler(model.config, precision="fp32", k=8, temperature=0.7)
    s.push_weights(model.state_dict())
    ro = s.generate(prompts_of(tok, 4), 10, tok.eos_token_id, tok.pad_token_id,
                    torch.Generator().manual_seed(1))
    with torch.no_grad():
        logp, logp_head = trainer_logprobs(model, ro, 0.7)
    m = ro.completion_mask
    assert (logp - ro.sampler_logp)[m].abs().max() < 1e-4
    assert (logp_head - ro.head_logp)[m].abs().max() < 1e-4
    shifted = (logp[:, 1:] - ro.sampler_logp[:, :-1])[m[:, 1:] & m[:, :-1]].abs().max()
    assert shifted > 0.1


def test_left_padding_does_not_change_logprobs(policy):
    model, tok = policy
    s = TorchSampler(model.config, precision="fp32", k=4, temperature=1.0)
    s.push_weights(model.state_dict())
    prompts = prompts_of(tok, 6)
    assert len({len(p) for p in prompts}) > 1  # really different lengths, so padding happens
    batch = s.generate(prompts, 6, tok.eos_token_id, tok.pad_token_id, torch.Generator().manual_seed(5))
    with torch.no_grad():
        for i, p in enumerate(prompts):  # score batch row i's completion as a batch of one
            one = scrl_min.Rollout(torch.tensor([p]), torch.ones(1, len(p), dtype=torch.bool),
                                   batch.completion_ids[i:i + 1], batch.completion_mask[i:i + 1],
                                   batch.sampler_logp[i:i + 1], batch.head_ids[i:i + 1],
                                   batch.head_logp[i:i + 1])
            logp, _ = trainer_logprobs(model, one, 1.0)
            m = one.completion_mask
            assert (logp - one.sampler_logp)[m].abs().max() < 1e-4


def test_staleness_and_persistent_noise(policy):
    model, tok = policy
    sd0 = model.state_dict()
    sd1 = {k: v + 0.01 if v.is_floating_point() else v for k, v in sd0.items()}
    name = "model.layers.0.mlp.up_proj.weight"
    stale = TorchSampler(model.config, precision="fp32", k=4, staleness=1)
    stale.push_weights(sd0)
    stale.push_weights(sd1)  # lags by one push: still on sd0
    assert torch.equal(stale.model.state_dict()[name], sd0[name])
    stale.push_weights(sd1)
    assert torch.equal(stale.model.state_dict()[name], sd1[name])
    noisy = TorchSampler(model.config, precision="fp32", k=4, noise_std=0.05, seed=3)
    noisy.push_weights(sd0)
    f0 = noisy.model.state_dict()[name] / sd0[name]
    noisy.push_weights(sd1)
    f1 = noisy.model.state_dict()[name] / sd1[name]
    assert torch.allclose(f0, f1, atol=1e-5)  # drawn once, the same factors after every push
    assert 0.03 < (f0 - 1).std() < 0.07


def _expected_snapshot(n: int, s: int, schedule: str) -> int:
    """The weights the step after push n samples with, by the schedule's definition (written out here,
    independently of the queue): constant lag s, or a refresh every s + 1 pushes."""
    return max(0, n - s) if schedule == "constant" else (s + 1) * (n // (s + 1))


@pytest.mark.parametrize("schedule", ["constant", "refresh"])
def test_staleness_schedule_samples_with_the_expected_snapshot(policy, schedule):
    """After each push n, the sampler's log-probs of its own samples are those of the snapshot the schedule
    names (a teacher-forced forward of every snapshot, the nearest one must be it, to 1e-4), and no other."""
    model, tok = policy
    s, pushes = 2, 8
    g = torch.Generator().manual_seed(11)
    snaps = [{k: v + 0.02 * n * torch.randn(v.shape, generator=g) if v.is_floating_point() and v.dim() >= 2 else v
              for k, v in model.state_dict().items()} for n in range(pushes)]  # θ_0 (unchanged), θ_1, ...
    refs = []
    for sd in snaps:
        m = type(model)(model.config).eval()
        m.load_state_dict(sd)
        refs.append(m)
    sampler = TorchSampler(model.config, precision="fp32", k=4, staleness=s, staleness_schedule=schedule)
    prompts = prompts_of(tok, 2)
    used = []
    for n in range(pushes):
        sampler.push_weights(snaps[n])
        ro = sampler.generate(prompts, 5, tok.eos_token_id, tok.pad_token_id, torch.Generator().manual_seed(n))
        m = ro.completion_mask
        with torch.no_grad():
            gaps = [(trainer_logprobs(r, ro, 1.0)[0] - ro.sampler_logp)[m].abs().max().item() for r in refs]
        used.append(min(range(pushes), key=gaps.__getitem__))
        assert gaps[used[-1]] < 1e-4 and sorted(gaps)[1] > 1e-3, (n, gaps)  # one snapshot fits, the others do not
    assert used == [_expected_snapshot(n, s, schedule) for n in range(pushes)], used
    expected = {"constant": [0, 0, 0, 1, 2, 3, 4, 5], "refresh": [0, 0, 0, 3, 3, 3, 6, 6]}[schedule]
    assert used == expected  # lag s every step vs the lag cycling 0, 1, 2 (refresh every s + 1 = 3 pushes)


def test_staleness_schedule_loads_only_at_a_refresh_and_resumes_mid_cycle():
    """The weight queue shared by both samplers (torch and vLLM): which pushes reach `_load` (an engine
    reload) under each schedule, and a queue restored mid-cycle (`queue_state` → `restore_queue`, as a
    checkpoint does) continues the cycle exactly."""
    from scrl_min.torch_sampler import _WeightQueue

    class Recorder(_WeightQueue):
        def __init__(self, s, schedule):
            self._init_queue(s, 0.0, 0, schedule)
            self.loads = []

        def _load(self, sd):
            self.loads.append(int(sd["n"]))

    for schedule, loads in (("constant", [0, 0, 0, 1, 2, 3, 4]), ("refresh", [0, 3, 6])):
        q = Recorder(2, schedule)
        for n in range(7):
            q.push_weights({"n": torch.tensor(n)})
        assert q.loads == loads, (schedule, q.loads)
    for cut in range(1, 7):  # interrupt after push `cut`, restore into a fresh queue, push the rest
        a, b = Recorder(2, "refresh"), Recorder(2, "refresh")
        for n in range(cut + 1):
            a.push_weights({"n": torch.tensor(n)})
        b.restore_queue(a.queue_state())
        loaded = [b.loads[-1]]  # the restored queue loads its first entry: the weights the next step uses
        for n in range(cut + 1, 9):
            b.push_weights({"n": torch.tensor(n)})
            loaded.append(b.loads[-1])
        assert loaded == [_expected_snapshot(n, 2, "refresh") for n in range(cut, 9)], (cut, loaded)
    with pytest.raises(ScrlError, match="unknown staleness schedule 'cyclic'"):
        Recorder(2, "cyclic")
    with pytest.raises(ScrlError, match="unknown staleness_schedule 'cyclic'"):
        TrainConfig(staleness_schedule="cyclic")


def test_fp8_sampler_mismatch_is_real_and_small(policy):
    model, tok = policy
    s = TorchSampler(model.config, precision="fp8", k=8)
    s.push_weights(model.state_dict())
    ro = s.generate(prompts_of(tok, 8), 12, tok.eos_token_id, tok.pad_token_id,
                    torch.Generator().manual_seed(2))
    with torch.no_grad():
        logp, _ = trainer_logprobs(model, ro, 1.0)
    diff = (logp - ro.sampler_logp)[ro.completion_mask].abs()
    assert 1e-4 < diff.mean() < 0.5


# ─── validation and bad input ───────────────────────────────────────────────────────────────────
def _fake_rollout(B=2, T=3, k=4, V=10):
    lq = torch.log_softmax(torch.randn(B, T, V), -1)
    top = lq.topk(k, -1)
    y = top.indices[..., 0]
    return scrl_min.Rollout(torch.zeros(B, 2, dtype=torch.long), torch.ones(B, 2, dtype=torch.bool),
                            y, torch.ones(B, T, dtype=torch.bool), top.values[..., 0].clone(),
                            top.indices.clone(), top.values.clone())


def test_validate_rollout_names_sequence_and_position():
    ro = _fake_rollout()
    validate_rollout(ro, 10)
    ro.sampler_logp[1, 2] = float("nan")
    with pytest.raises(RolloutError, match="NaN sampler log-prob at sequence 1, completion position 2"):
        validate_rollout(ro, 10)
    ro = _fake_rollout()
    ro.head_ids[0, 1, 3] = 10
    with pytest.raises(RolloutError, match="outside the vocabulary.*sequence 0, completion position 1"):
        validate_rollout(ro, 10)
    ro = _fake_rollout()
    ro.head_ids[1, 0, 2] = ro.head_ids[1, 0, 0]
    with pytest.raises(RolloutError, match="duplicated id in the sampler's head at sequence 1, "
                                           "completion position 0"):
        validate_rollout(ro, 10)
    ro = _fake_rollout()
    ro.head_logp[0, 1, 2:] = float("-inf")  # empty slots may repeat any id
    ro.head_ids[0, 1, 2:] = 0
    with pytest.raises(RolloutError, match="k=4 asked, 2 valid.* sequence 0, completion position 1"):
        validate_rollout(ro, 10)  # ... but a head shorter than asked is refused,
    validate_rollout(ro, 10, exact_support=True)  # unless the sampler drew from a filtered support
    ro.sampler_logp[0, 2] = -9999.0
    with pytest.raises(RolloutError, match="missing .* sampled token at sequence 0, completion position 2"):
        validate_rollout(ro, 10, exact_support=True)
    ro = _fake_rollout()
    ro.head_logp[0, 0] = -0.1  # four entries of mass 0.9 each
    with pytest.raises(RolloutError, match="head mass above 1 at sequence 0"):
        validate_rollout(ro, 10)


def test_bad_configs_give_clear_errors(policy, tmp_path):
    model, _ = policy
    with pytest.raises(ScrlError, match="unknown arm 'fp8_sc'"):
        scrl_min.arm_config("fp8_sc", out_dir=str(tmp_path))
    with pytest.raises(ScrlError, match=r"unknown TrainConfig field\(s\) \['top_k_logprobs'\]"):
        scrl_min.arm_config("sc", top_k_logprobs=16)
    with pytest.raises(ScrlError, match="unknown weighting 'cispo'"):
        Trainer(TrainConfig(weighting="cispo", out_dir=str(tmp_path)))
    with pytest.raises(ScrlError, match="unknown sampler_precision 'int4'"):
        Trainer(TrainConfig(sampler_precision="int4", out_dir=str(tmp_path)))
    with pytest.raises(ScrlError, match="k=4096 is larger than the vocabulary"):
        Trainer(TrainConfig(k=4096, out_dir=str(tmp_path)))
    with pytest.raises(ScrlError, match="checkpoint not found"):
        Trainer(TrainConfig(model=str(tmp_path / "nope"), out_dir=str(tmp_path)))
    with pytest.raises(ScrlError, match="unknown advantage_mode"):
        Trainer(TrainConfig(advantage_mode="baseline", out_dir=str(tmp_path)))
    with pytest.raises(ScrlError, match=r"unknown sampler 'sglang'; choose one of \('torch', 'vllm'\)"):
        TrainConfig(sampler="sglang", out_dir=str(tmp_path))  # the config refuses it, before any model loads
    with pytest.raises(ScrlError, match="group_size must be > 0, got 0"):
        TrainConfig(group_size=0)
    with pytest.raises(ScrlError, match="centered advantages need group_size >= 2"):
        TrainConfig(advantage_mode="centered", group_size=1)
    with pytest.raises(ScrlError, match=r"mis_band must be \[lo, hi\]"):
        TrainConfig(mis_band=(5.0, 0.5))
    with pytest.raises(ScrlError, match="unknown weight_level 'seq'"):
        Trainer(TrainConfig(weight_level="seq", out_dir=str(tmp_path)))
    with pytest.raises(ScrlError, match="unknown sampler precision"):
        TorchSampler(model.config, precision="fp4")


def test_reward_verifier():
    assert distinct_names_reward("if x is None: return len(x)", 4) == 1.0  # if is None return len → 5, cap
    assert distinct_names_reward("if if if", 24) == pytest.approx(1 / 24)
    assert distinct_names_reward("foo bar_if iff", 24) == 0.0  # whole identifiers only
    assert distinct_names_reward("print(sorted(set(zip(a, b))))", 8) == pytest.approx(4 / 8)


# ─── the trainer: a real run, parameters move, resume loses nothing ─────────────────────────────
SMALL = dict(prompts_per_step=2, group_size=3, max_new_tokens=6, k=16, progress=False, eval_prompts=6,
             checkpoint_every=2, lr=0.5)


@pytest.mark.parametrize("weight_level", ["token", "sequence"])
def test_training_run_logs_metrics_and_changes_parameters(tmp_path, weight_level):
    cfg = scrl_min.arm_config("sc_mis", steps=3, out_dir=str(tmp_path / "run"), weight_level=weight_level,
                      **SMALL)
    tr = Trainer(cfg)
    before = {k: v.clone() for k, v in tr.policy.state_dict().items()}
    recs = tr.train()
    assert [r["step"] for r in recs] == [0, 1, 2]
    for key in ("reward", "completion_len", "kl_sampled", "ratio_mean", "ratio_max", "head_mass_q",
                "grad_norm", "rho_mean", "rho_at_bound"):
        assert all(isinstance(r[key], float) and r[key] == r[key] for r in recs), key
    assert recs[0]["fp8_backend"] in ("scaled_mm", "emulated")
    moved = sum(not torch.equal(before[k], v) for k, v in tr.policy.state_dict().items())
    assert moved > 10
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (saved["sampler_precision"], saved["weighting"], saved["centering"]) == ("fp8", "mis", True)


def test_resume_after_interrupt_reproduces_the_uninterrupted_run(tmp_path):
    full = Trainer(scrl_min.arm_config("plain", steps=4, staleness=1, out_dir=str(tmp_path / "a"), **SMALL)).train()
    # interrupted run: 3 steps logged, but the last checkpoint is at step 2
    part = Trainer(scrl_min.arm_config("plain", steps=3, staleness=1, out_dir=str(tmp_path / "b"), **SMALL))
    part.cfg.checkpoint_every = 2
    part.resume()
    for _ in range(3):
        part.run.append(part.train_step())
        if part.step == 2:
            part.save_checkpoint()
    assert len(scrl_min.read_metrics(part.metrics_path)) == 3
    resumed = Trainer(scrl_min.arm_config("plain", steps=4, staleness=1, out_dir=str(tmp_path / "b"), **SMALL)).train()
    assert [r["step"] for r in resumed] == [0, 1, 2, 3]
    for a, b in zip(full, resumed):
        assert a["reward"] == b["reward"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-7)


def test_refresh_schedule_resumed_mid_cycle_reproduces_the_uninterrupted_run(tmp_path):
    """staleness 2 on the refresh schedule (an exact fp32 sampler: staleness is the only mismatch), interrupted
    with its checkpoint after step 1 (the sampler's queue mid-cycle: it holds θ_0, θ_1 and samples with θ_0),
    resumes to the uninterrupted run's steps; the schedule is really in effect (the constant-lag run of the
    same seed agrees up to step 2 and differs at step 3, where refresh loads θ_3: on-policy again)."""
    cfg = dict(staleness=2, staleness_schedule="refresh", sampler_precision="fp32", noise_std=0.0, **SMALL)
    full = Trainer(scrl_min.arm_config("plain", steps=5, out_dir=str(tmp_path / "a"), **cfg)).train()
    part = Trainer(scrl_min.arm_config("plain", steps=5, out_dir=str(tmp_path / "b"), **cfg))
    part.resume()
    for _ in range(3):  # three steps logged, the checkpoint from after step 1
        part.run.append(part.train_step())
        if part.step == 1:
            part.save_checkpoint()
            assert len(part.sampler.queue_state()) == 2  # mid-cycle
    resumed = Trainer(scrl_min.arm_config("plain", steps=5, out_dir=str(tmp_path / "b"), **cfg)).train()
    assert [r["step"] for r in resumed] == [0, 1, 2, 3, 4]
    for a, b in zip(full, resumed):
        assert a["reward"] == b["reward"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-7)
        assert a["kl_qp"] == pytest.approx(b["kl_qp"], rel=1e-5, abs=1e-7)
    const = Trainer(scrl_min.arm_config("plain", steps=5, out_dir=str(tmp_path / "c"),
                                        **{**cfg, "staleness_schedule": "constant"})).train()
    assert [r["kl_qp"] for r in const[:3]] == pytest.approx([r["kl_qp"] for r in full[:3]], rel=1e-5, abs=1e-7)
    assert full[3]["kl_qp"] < 1e-4 < const[3]["kl_qp"]  # refresh: on-policy at step 3; constant: 2 steps stale


def test_resume_refuses_a_different_config(tmp_path):
    Trainer(scrl_min.arm_config("sc", steps=2, out_dir=str(tmp_path), **SMALL)).train()
    with pytest.raises(ScrlError, match="different config"):
        Trainer(scrl_min.arm_config("tis", steps=3, out_dir=str(tmp_path), **SMALL)).train()
    # a run saved before a config field existed resumes when the field keeps its default ...
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved["weight_level"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert len(Trainer(scrl_min.arm_config("sc", steps=3, out_dir=str(tmp_path), **SMALL)).train()) == 3
    # ... and is refused when it does not
    with pytest.raises(ScrlError, match="weight_level"):
        Trainer(scrl_min.arm_config("sc", steps=4, weight_level="sequence", out_dir=str(tmp_path), **SMALL)).train()


def test_any_local_checkpoint_works_in_place_of_the_default(tmp_path):
    """A different Qwen3 (random weights, vocab < 128 so k defaults to V) saved to a folder trains."""
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tok = AutoTokenizer.from_pretrained(str(DEFAULT_MODEL_PATH))
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                      tie_word_embeddings=False, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    Qwen3ForCausalLM(cfg).save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    tr = Trainer(scrl_min.arm_config("sc", model=str(tmp_path / "ckpt"), steps=2,
                                      out_dir=str(tmp_path / "run"), **{**SMALL, "k": None}))
    assert tr.sampler.k == min(128, len(tok))
    recs = tr.train()
    assert len(recs) == 2 and all(r["head_mass_q"] <= 1.0 + 1e-4 for r in recs)


def test_cli_help_and_one_line_errors(tmp_path):
    """`python -m scrl_min`: --help documents every flag from TrainConfig's comments; a bad config is
    one line on stderr, exit status 1 (sys.exit with a message), and leaves no run folder behind."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "scrl_min"]
    h = subprocess.run(cmd + ["--help"], capture_output=True, text=True)
    assert h.returncode == 0 and "{torch,vllm}" in h.stdout and "GSPO-style" in h.stdout
    out = tmp_path / "never"
    r = subprocess.run(cmd + ["--arm", "sc", "--advantage_mode", "grpo", "--group_size", "1",
                              "--steps", "1", "--out_dir", str(out)], capture_output=True, text=True)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("python -m scrl_min: error:")
    r = subprocess.run(cmd + ["--constant_reward", "nan", "--steps", "1", "--out_dir", str(out)],
                       capture_output=True, text=True)  # an optional float flag, checked by the config
    assert r.returncode == 1 and "constant_reward must be a finite number" in r.stderr.strip().splitlines()[-1]
    r = subprocess.run(cmd + ["--arm", "bogus"], capture_output=True, text=True)
    assert r.returncode == 2 and "invalid choice: 'bogus'" in r.stderr
    assert not out.exists()


# a flag value the CLI refuses → its one-line message (the flag or field, and the value) and exit status
BAD_FLAGS = [
    (["--centering", "maybe"], "argument --centering: expected true or false (1/0, yes/no, on/off), got 'maybe'", 2),
    (["--steps", "0"], "--steps must be >= 1 for a run, got 0", 1),
    (["--lr", "nan"], "lr must be a finite number, got nan", 1),
    (["--lr", "-1"], "lr must be >= 0, got -1.0", 1),
    (["--temperature", "inf"], "temperature must be a finite number, got inf", 1),
    (["--noise_std", "nan"], "noise_std must be a finite number, got nan", 1),
    (["--tis_cap", "inf"], "tis_cap must be a finite number, got inf", 1),
    (["--tis_cap", "0"], "tis_cap must be > 0", 1),
    (["--mis_band", "0.5", "nan"], "mis_band must be finite numbers, got [0.5, nan]", 1),
    (["--max_grad_norm", "inf"], "max_grad_norm must be a finite number, got inf", 1),
    (["--arm", "bf16", "--noise_std", "0.1"], "the bf16 arm is the no-mismatch reference (noise_std 0), got "
                                              "noise_std=0.1", 1),
]


@pytest.mark.parametrize("flags, message, status", BAD_FLAGS, ids=[" ".join(f) for f, _, _ in BAD_FLAGS])
def test_cli_refuses_a_bad_value_in_one_line_before_anything_runs(tmp_path, monkeypatch, capsys, flags, message,
                                                                  status):
    """`python -m scrl_min` with a value it cannot run: one line naming the flag and the value, before a
    model loads or a folder is made (a NaN lr used to train, then blame the sampler; --steps 0 made an empty
    run folder; --centering maybe named `_parse_bool` under the 30-line usage)."""
    import scrl_min.driver as driver

    def no_run(cfg):
        raise AssertionError(f"a run started with {cfg}")

    monkeypatch.setattr(driver, "Trainer", no_run)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        driver.main([*flags, "--out_dir", str(out)])
    code = e.value.code  # argparse: 2, its message on stderr; sys.exit(message): the message, status 1
    err = capsys.readouterr().err if isinstance(code, int) else f"{code}\n"
    assert (code if isinstance(code, int) else 1) == status
    assert err.startswith("python -m scrl_min: error: ") and err.count("\n") == 1 and message in err, err
    assert not out.exists()


def test_every_float_field_of_the_config_is_checked_finite():
    """TrainConfig refuses NaN and ±inf in each float field (the API as well as the CLI); a config that only
    builds a Trainer for its task (steps=0, as notebook 15 does) stays allowed."""
    floats = [f.name for f in dataclasses.fields(TrainConfig) if f.type in ("float", "Optional[float]")]
    assert set(floats) | {"mis_band"} == set(scrl_min.driver.FLOAT_FIELDS)
    for name in scrl_min.driver.FLOAT_FIELDS:
        for bad in (float("nan"), float("inf"), -float("inf")):
            with pytest.raises(ScrlError, match=f"^{name} must be (a )?finite number"):
                TrainConfig(**{name: (0.5, bad) if name == "mis_band" else bad})
    assert TrainConfig(steps=0, lr=0.0).steps == 0


def test_run_folders_per_configuration_never_block_a_later_run(tmp_path):
    """A small trial and a run with other settings get different folders (config_id), so neither
    blocks the other; a longer run of the same settings resumes the trial's folder and keeps its
    steps; arm presets compose with explicit fields (TIS + SC)."""
    trial = scrl_min.with_run_dir(scrl_min.arm_config("sc", steps=2, **SMALL), tmp_path, "sc")
    other = scrl_min.with_run_dir(scrl_min.arm_config("sc", steps=2, **{**SMALL, "group_size": 2}),
                                  tmp_path, "sc")
    longer = scrl_min.with_run_dir(scrl_min.arm_config("sc", steps=3, **SMALL), tmp_path, "sc")
    assert trial.out_dir != other.out_dir and trial.out_dir == longer.out_dir
    first = Trainer(trial).train()
    assert len(Trainer(other).train()) == 2  # no "different config" error
    resumed = Trainer(longer).train()
    assert [r["step"] for r in resumed] == [0, 1, 2] and resumed[:2] == first
    combo = scrl_min.arm_config("tis", centering=True)
    assert (combo.weighting, combo.centering, combo.sampler_precision) == ("tis", True, "fp8")
    # the reference's σ = 0 is decided in arm_config: another σ is refused, a bf16 sampler with noise is plain's
    assert scrl_min.arm_config("bf16").noise_std == scrl_min.arm_config("bf16", noise_std=0.0).noise_std == 0.0
    with pytest.raises(ScrlError, match="the bf16 arm is the no-mismatch reference"):
        scrl_min.arm_config("bf16", noise_std=0.1)
    noisy_bf16 = scrl_min.arm_config("plain", sampler_precision="bf16", noise_std=0.1)
    assert (noisy_bf16.sampler_precision, noisy_bf16.noise_std, noisy_bf16.centering) == ("bf16", 0.1, False)


def test_a_finished_run_is_read_back_from_its_records_alone(tmp_path, monkeypatch):
    """Results committed without checkpoints (config.json + metrics.jsonl) are read back by `train`
    without loading the model; a different config, or too few steps, is not taken for a finished run."""
    import scrl_min.driver as driver

    cfg = scrl_min.arm_config("sc", steps=2, out_dir=str(tmp_path), **SMALL)
    recs = scrl_min.train(cfg)
    machines = json.loads((tmp_path / "machine.json").read_text())
    assert machines == [driver.cpu_record()] and machines[0]["isa"] in ("amx", "avx512", "avx2", "other")
    (tmp_path / "checkpoint.pt").unlink()

    def no_model(*a, **k):
        raise AssertionError("a finished run loaded the model")

    monkeypatch.setattr(driver, "load_policy", no_model)
    assert scrl_min.train(cfg) == recs
    assert driver.RunFolder(tmp_path).finished(dataclasses.replace(cfg, steps=3)) is None
    assert driver.RunFolder(tmp_path).finished(dataclasses.replace(cfg, lr=0.25)) is None
    assert driver.RunFolder(tmp_path).config_diff(dataclasses.replace(cfg, lr=0.25)) == {"lr": (cfg.lr, 0.25)}
    with pytest.raises(AssertionError, match="loaded the model"):  # not finished: it would train
        scrl_min.train(dataclasses.replace(cfg, steps=3))


# ─── shared prompts: one prefill per distinct prompt, in the sampler and in the trainer ─────────────
def test_trainer_logprobs_with_shared_prompts_equals_one_full_forward(policy):
    """`trainer_logprobs` runs each distinct prompt once and copies its KV cache to the rows of its
    group; the reference is one plain forward over prompt + completion of every row (values and
    gradients, float32 round-off)."""
    model, tok = policy
    s = TorchSampler(model.config, precision="fp8", k=8, temperature=0.8, noise_std=0.1, seed=1)
    s.push_weights(model.state_dict())
    prompts = [p for p in prompts_of(tok, 3) for _ in range(3)]  # groups of 3 rows, lengths differ
    ro = s.generate(prompts, 7, tok.eos_token_id, tok.pad_token_id, torch.Generator().manual_seed(3))
    ro.completion_mask[1, 4:] = False  # rows that stopped early (EOS at 3 and at 0), as an engine gives
    ro.completion_mask[5, 1:] = False

    def reference():
        ids = torch.cat([ro.prompt_ids, ro.completion_ids], 1)
        attn = torch.cat([ro.prompt_mask, ro.completion_mask], 1).long()
        logits = model(input_ids=ids, attention_mask=attn,
                       position_ids=(attn.cumsum(-1) - 1).clamp(min=0)).logits
        P, T = ro.prompt_ids.shape[1], ro.completion_ids.shape[1]
        lp = torch.log_softmax(logits[:, P - 1:P - 1 + T].double() / 0.8, -1)
        both = torch.cat([ro.completion_ids[..., None], ro.head_ids], -1)
        return lp.gather(-1, both)

    m = ro.completion_mask
    w = torch.randn(ro.completion_ids.shape + (1 + 8,), generator=torch.Generator().manual_seed(0)).double()
    grads = []
    for fn in (reference, lambda: torch.cat([x.double()[..., None] if x.dim() == 2 else x.double()
                                             for x in trainer_logprobs(model, ro, 0.8)], -1)):
        model.zero_grad()
        out = fn()
        (out * w)[m].sum().backward()
        grads.append((out.detach(), [p.grad.clone() for p in model.parameters()]))
    (ref, g_ref), (got, g_got) = grads
    assert (ref - got)[m].abs().max() < 1e-5
    rel = max((a - b).norm() / a.norm() for a, b in zip(g_ref, g_got) if a.norm() > 0)
    assert rel < 1e-5, rel
    # with the rows' cache copies mixed up (row 0 reads row 8's prompt) it must not match
    bad = scrl_min.Rollout(ro.prompt_ids[[8] + list(range(1, 9))], ro.prompt_mask[[8] + list(range(1, 9))],
                           *[getattr(ro, f) for f in ("completion_ids", "completion_mask", "sampler_logp",
                                                       "head_ids", "head_logp")])
    with torch.no_grad():
        lp_bad, _ = trainer_logprobs(model, bad, 0.8)
    assert (lp_bad[0] - ref[0, :, 0])[m[0]].abs().max() > 0.1


def test_sampler_prefill_once_per_distinct_prompt(policy):
    """The prefill runs on the distinct prompts only, and every row's log-probs still match a
    teacher-forced forward of that row (as in the contract test, bf16 tolerances)."""
    model, tok = policy
    s = TorchSampler(model.config, precision="bf16", k=8, temperature=1.0)
    s.push_weights(model.state_dict())
    prompts = [p for p in prompts_of(tok, 2) for _ in range(4)]
    seen = []
    hook = s.model.model.embed_tokens.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].shape))
    ro = s.generate(prompts, 5, tok.eos_token_id, tok.pad_token_id, torch.Generator().manual_seed(0))
    hook.remove()
    assert seen[0][0] == 2 and all(sh[0] == 8 for sh in seen[1:])  # prefill: 2 distinct prompts
    ids = torch.cat([ro.prompt_ids, ro.completion_ids], 1)
    attn = torch.cat([ro.prompt_mask, ro.completion_mask], 1).long()
    with torch.no_grad():
        logits = s.model(input_ids=ids, attention_mask=attn, position_ids=(attn.cumsum(-1) - 1).clamp(min=0)).logits
    P = ro.prompt_ids.shape[1]
    full = torch.log_softmax(logits[:, P - 1:P + 4].double(), -1)
    m = ro.completion_mask
    err = (full.gather(-1, ro.completion_ids[..., None]).squeeze(-1) - ro.sampler_logp.double())[m].abs()
    assert err.max() < 0.08 and err.mean() < 0.005
    assert len({tuple(r) for r in ro.completion_ids.tolist()}) > 2  # rows of a group sample apart


def test_distinct_rows():
    ids = torch.tensor([[0, 5, 6], [0, 5, 6], [7, 5, 6], [0, 5, 6], [0, 0, 6]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1], [0, 1, 1], [0, 1, 1]], dtype=torch.bool)
    uniq, row_of = scrl_min.logprobs._distinct_rows(ids, mask)
    # rows 0, 1, 3 are one prompt; row 2 another; row 4 holds token 0 (= pad id) as a real token
    assert torch.equal(ids[uniq][row_of], ids) and torch.equal(mask[uniq][row_of], mask)
    assert len(uniq) == 3 and row_of[0] == row_of[1] == row_of[3] and row_of[4] != row_of[0]


def test_sampler_attention_broadcasts_kv_heads_with_the_same_numbers(policy):
    """The sampler's "sdpa_gqa" attention (K/V heads broadcast in the kernel) against transformers'
    own "sdpa" (K/V heads copied) on the same weights, left-padded prompts: equal logits."""
    model, tok = policy
    s = TorchSampler(model.config, precision="fp32", k=4)
    s.push_weights(model.state_dict())
    assert s.model.config._attn_implementation == "sdpa_gqa" and model.config._attn_implementation == "sdpa"
    ids, mask = scrl_min.torch_sampler._left_pad(prompts_of(tok, 4), tok.pad_token_id)
    pos = (mask.long().cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        a = s.model(input_ids=ids, attention_mask=mask.long(), position_ids=pos).logits
        b = model(input_ids=ids, attention_mask=mask.long(), position_ids=pos).logits
    assert (a - b)[mask].abs().max() < 1e-5


def test_a_run_folder_is_trained_by_one_process_at_a_time(tmp_path):
    """A second trainer on a folder that a live process holds is refused before it writes anything;
    a lock left by a process that has ended is taken over; the lock goes when training ends."""
    import subprocess
    import sys

    cfg = scrl_min.arm_config("sc", steps=1, out_dir=str(tmp_path / "run"), **SMALL)
    (tmp_path / "run").mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "run" / "run.lock").write_text(str(holder.pid))
        with pytest.raises(ScrlError, match=f"being trained by process {holder.pid}"):
            Trainer(cfg).train()
        assert not (tmp_path / "run" / "metrics.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()
    recs = Trainer(cfg).train()  # the holder has ended: its lock is stale
    assert len(recs) == 1 and not (tmp_path / "run" / "run.lock").exists()
