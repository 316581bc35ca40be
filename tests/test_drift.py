"""The drift alone (scrl_min.drift): the exact expected update and the EOS measurements, against independent
computations (a teacher-forced float64 forward over the whole vocabulary, a per-prefix loop), and the iterated runs
(the same numbers in worker processes as in this one; read back from their JSON)."""
import copy

import pytest
import torch

import scrl_min
from scrl_min import DEFAULT_MODEL_PATH, RHO_EPS, TorchSampler, encode_prompt, load_policy, make_task_dataset
from scrl_min.drift import eos_stats, expected_update, iterate_drift, iterated_drift_runs

SIZES = dict(prompts_per_step=2, group_size=2, max_new_tokens=6)


@pytest.fixture(scope="module")
def setup():
    model, tok = load_policy(str(DEFAULT_MODEL_PATH))
    prompts = [encode_prompt(tok, p) for p in make_task_dataset(6, seed=11)["prompt"]]
    return model, tok, prompts


def sampler_of(model, precision="fp8", noise=0.1, seed=3):
    s = TorchSampler(model.config, precision=precision, k=model.config.vocab_size, noise_std=noise, seed=seed,
                     fp8_backend="emulated")
    s.push_weights(model.state_dict())
    return s


def brute_force_update(model, sampler, prompts, bs, weights, k, eos_id, pad_id):
    """The same batch regenerated, then Σ_prefixes Σ_v sg(w_v) log p_v / N from a teacher-forced forward of each
    whole sequence, float64 log-softmax over the vocabulary, q from the sampler's full log q (vocabulary order)."""
    pick = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(bs))[:SIZES["prompts_per_step"]]
    ro = sampler.generate([prompts[i] for i in pick.tolist() for _ in range(SIZES["group_size"])],
                          SIZES["max_new_tokens"], eos_id, pad_id, generator=torch.Generator().manual_seed(bs + 1),
                          full_logq=True)
    ids = torch.cat([ro.prompt_ids, ro.completion_ids], 1)
    attn = torch.cat([ro.prompt_mask, ro.completion_mask], 1).long()
    logits = model(input_ids=ids, attention_mask=attn, position_ids=(attn.cumsum(-1) - 1).clamp(min=0)).logits
    P, T = ro.prompt_ids.shape[1], ro.completion_ids.shape[1]
    m = ro.completion_mask
    logp = torch.log_softmax(logits[:, P - 1:P - 1 + T].double(), -1)[m]  # (N, V)
    q = ro.full_logq[m].double().exp()
    p = logp.detach().exp()
    w = q.clone()
    if weights == "sc":
        top = q.topk(k, -1).indices  # the sampler's k most likely ids
        qh, ph = q.gather(-1, top), p.gather(-1, top)
        tail_q = (1 - qh.sum(-1)).clamp(min=0)
        rho = torch.where(tail_q <= 1e-6, 0.0, tail_q / (1 - ph.sum(-1)).clamp(min=RHO_EPS))
        c = torch.zeros_like(q).scatter(-1, top, qh - rho[:, None] * ph)
        w = q - c + c.sum(-1, keepdim=True) * p
    obj = (w * logp).sum() / m.sum()
    return torch.autograd.grad(obj, list(model.parameters())), int(m.sum())


def flat(gs):
    return torch.cat([g.reshape(-1).double() for g in gs])


@pytest.mark.parametrize("weights,k", [("plain", 64), ("sc", 64)])
def test_expected_update_against_a_float64_teacher_forced_forward(setup, weights, k):
    model, tok, prompts = setup
    smp = sampler_of(model)
    got, n = expected_update(model, smp, prompts, [7], weights=weights, k=k, eos_id=tok.eos_token_id,
                             pad_id=tok.pad_token_id, **SIZES)
    ref, n_ref = brute_force_update(model, smp, prompts, 7, weights, k, tok.eos_token_id, tok.pad_token_id)
    assert n == n_ref > 0
    err = (flat(got) - flat(ref)).norm() / flat(ref).norm()
    assert err < 1e-3, err


def test_expected_update_is_zero_where_it_must_be(setup):
    """Plain's update at an on-policy sampler (q = p) and SC's with k = V (the head is the vocabulary, no tail) are
    zero up to float round-off; plain's at the mismatched sampler is not."""
    model, tok, prompts = setup
    V = model.config.vocab_size
    kw = dict(eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, **SIZES)
    mismatched = flat(expected_update(model, sampler_of(model), prompts, [5], weights="plain", k=V, **kw)[0]).norm()
    on_policy = flat(expected_update(model, sampler_of(model, "fp32", 0.0), prompts, [5], weights="plain", k=V,
                                     **kw)[0]).norm()
    sc_full = flat(expected_update(model, sampler_of(model), prompts, [5], weights="sc", k=V, **kw)[0]).norm()
    assert mismatched > 0
    assert on_policy < 1e-3 * mismatched, (on_policy, mismatched)
    assert sc_full < 1e-3 * mismatched, (sc_full, mismatched)


def test_expected_update_refuses_bad_arguments(setup):
    model, tok, prompts = setup
    kw = dict(eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, **SIZES)
    with pytest.raises(ValueError, match="weights"):
        expected_update(model, sampler_of(model), prompts, [1], weights="tis", k=8, **kw)
    with pytest.raises(ValueError, match="k = 0"):
        expected_update(model, sampler_of(model), prompts, [1], weights="sc", k=0, **kw)
    small = TorchSampler(model.config, precision="fp32", k=8)
    with pytest.raises(ValueError, match="whole vocabulary"):
        expected_update(model, small, prompts, [1], weights="plain", k=8, **kw)


def test_eos_stats_against_a_per_prefix_loop(setup):
    model, tok, prompts = setup
    eos = tok.eos_token_id
    held = sampler_of(model, "fp32", 0.0).generate(prompts[:3], 8, eos, tok.pad_token_id,
                                                   generator=torch.Generator().manual_seed(2))
    lp_eos, length = eos_stats(model, held, eos)
    want_lp, want_len = [], []
    with torch.no_grad():
        for b in range(len(prompts[:3])):
            prompt = held.prompt_ids[b][held.prompt_mask[b]]
            comp = held.completion_ids[b][held.completion_mask[b]]
            survive, total = 1.0, 0.0
            for t in range(len(comp)):  # p(EOS | prompt + the first t completion tokens), one forward per prefix
                x = torch.cat([prompt, comp[:t]])[None]
                lp = torch.log_softmax(model(input_ids=x).logits[0, -1].double(), -1)[eos].item()
                want_lp.append(lp)
                total += survive
                survive *= 1 - torch.tensor(lp).exp().item()
            want_len.append(total)
    assert torch.allclose(lp_eos.double(), torch.tensor(want_lp, dtype=torch.float64), atol=1e-4)
    assert torch.allclose(length.double(), torch.tensor(want_len, dtype=torch.float64), atol=1e-4)


def test_iterated_runs_in_workers_match_this_process_and_read_back(setup, tmp_path, monkeypatch):
    model, tok, prompts = setup
    held = sampler_of(model, "fp32", 0.0).generate(prompts[:2], 6, tok.eos_token_id, tok.pad_token_id,
                                                   generator=torch.Generator().manual_seed(4))
    run = dict(steps=2, at=[0, 2], batches=1, lr=0.5, mean_advantage=0.15, k=64, sampler_format="fp8",
               sampler_noise=0.1, **SIZES)
    runs = {f"{arm}-s9": dict(arm=arm, seed=9, **run) for arm in ("plain", "sc")}
    common = dict(model_path=str(DEFAULT_MODEL_PATH), held=held, prompts=prompts, eos_id=tok.eos_token_id,
                  pad_id=tok.pad_token_id, key=dict(model="default"))
    pooled = iterated_drift_runs(runs, root=tmp_path / "a", workers=2, **common)
    here = iterated_drift_runs(runs, root=tmp_path / "b", workers=1, **common)
    assert pooled == here
    # the iteration by hand: two updates of plain from the starting policy
    trainer = copy.deepcopy(model)
    smp = sampler_of(model, seed=9)
    start = eos_stats(trainer, held, tok.eos_token_id)[0].mean().item()
    for t in range(2):
        smp.push_weights(trainer.state_dict())
        grads, _ = expected_update(trainer, smp, prompts, [9 * 100_000 + 100 * t], weights="plain", k=64,
                                   eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, **SIZES)
        with torch.no_grad():
            for w, g in zip(trainer.parameters(), grads):
                w += 0.5 * 0.15 * g
    end = eos_stats(trainer, held, tok.eos_token_id)[0].mean().item()
    assert here["plain-s9"]["mean_logp_eos"] == [start, end] and end != start
    assert here["plain-s9"]["key"] == {"model": "default", "arm": "plain", "seed": 9, **run}

    def refuse(*a, **kw):
        raise AssertionError("a saved run was computed again")

    monkeypatch.setattr(scrl_min.drift, "iterate_drift", refuse)
    assert iterated_drift_runs(runs, root=tmp_path / "b", workers=1, **common) == here
    # a different key (another model name) is not read back
    with pytest.raises(scrl_min.ScrlError, match="plain-s9.json"):
        iterated_drift_runs(runs, root=tmp_path / "b", workers=1, **{**common, "key": dict(model="other")})


def test_iterate_drift_refuses_an_unknown_arm(setup):
    model, tok, prompts = setup
    with pytest.raises(ValueError, match="arm"):
        iterate_drift(model, None, prompts, arm="tis", seed=0, steps=1, at=[0], batches=1, lr=0.5,
                      mean_advantage=0.15, k=8, sampler_format="fp8", sampler_noise=0.1, eos_id=tok.eos_token_id,
                      pad_id=tok.pad_token_id, **SIZES)
