"""Score centering inside TRL with a reduced-precision trainer: ρ and the gradient against a float64 reference.

TRL's trainer in the two ways users run bf16: `bf16=True` (CPU autocast over float32 weights) and a bf16 model
(`task_trainer(dtype=torch.bfloat16)`, no autocast). The embedded model (V = 2,048) with k = 768 and the TorchSampler
(FP8, σ = 0.1) gives sampler tails 1 − Σ_H q between about 0.5% and 4% on most loss tokens (10th-90th percentile),
where ρ = (1 − Σ_H q) / (1 − Σ_H p) divides by a small difference of numbers near 1. The reference is the same model's
weights in float64, on the same batch: its log-softmax at the head ids, ρ computed here in float64, and the gradient
of `score_centered_pg_loss` with TRL's reduction (`test_trl.reference_loss`: float64 forward, float32 loss
arithmetic). Checks, for each case:

1. per token, at reference tails 1 − Σ_H p in [0.5%, 5%]: the trainer's ρ within 25% of the reference's;
2. the logged `score_centering/rho_mean` within 10% of the reference's mean over the loss tokens;
3. the centering term's gradient (the trainer's with centering minus without, in its own numerics, so the rounding of
   TRL's own policy term cancels) nearer the reference's than the reference's own with ρ dropped (ρ = 0: c_v = m_v,
   the tail term gone; `tail_tol=inf`). Measured after the fix: 0.25-0.55 of the ρ-dropped distance.

Every loss type the trainer supports (`LOSS_TYPES`) and every TRL IS setting it maps, each pairing once per precision
(a Latin square: 5 cases per precision, 10 in all). At a6248fb's trl.py (log p(v) = TRL's bf16 log p(y) + float32
logit gaps) all 10 fail: per-token ρ / ρ_ref from 0.26 to 13,910 (30-60 of 103 tokens outside 25%), rho_mean 623 where
the reference reads 1.003; the gradient check alone passed there (the full-softmax rows caught the worst ρ).
"""
import math

import pytest
import torch

pytest.importorskip("trl")

import scrl_min  # noqa: E402
from scrl_min import score_centered_pg_loss  # noqa: E402
from scrl_min.trl import LOSS_TYPES, task_trainer  # noqa: E402

F64 = torch.float64
K = 768  # of V = 2,048: tails of 0.5-5% on most tokens with the default sampler
CONFIG = dict(use_cpu=True, per_device_train_batch_size=8, num_generations=2, max_completion_length=16,
              learning_rate=1e-2, score_centering_top_k=K)
# TRL IS option → (config fields, score_centered_pg_loss keywords, TRL's sequence ratio (kind, lo, hi) or None).
# Bands wide enough that bf16's rounding of log r (about 1e-2 a token) rarely moves a token across an edge
IS_SETTINGS = {
    "no_is": (dict(vllm_importance_sampling_correction=False), dict(weighting="none"), None),
    "token_truncate": (dict(vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_max=2.0),
                       dict(weighting="tis", tis_cap=2.0), None),
    "token_mask": (dict(vllm_importance_sampling_mode="token_mask", vllm_importance_sampling_clip_min=0.5,
                        vllm_importance_sampling_clip_max=2.0), dict(weighting="mis", mis_band=(0.5, 2.0)), None),
    "sequence_truncate": (dict(vllm_importance_sampling_mode="sequence_truncate",
                               vllm_importance_sampling_clip_max=10.0), dict(weighting="none"), ("truncate", 0, 10.0)),
    "sequence_mask": (dict(vllm_importance_sampling_mode="sequence_mask", vllm_importance_sampling_clip_min=0.1,
                           vllm_importance_sampling_clip_max=10.0), dict(weighting="none"), ("mask", 0.1, 10.0)),
}
PRECISIONS = {"autocast": dict(bf16=True), "bf16_model": dict(dtype=torch.bfloat16)}
# each precision meets every loss type and every IS setting once: loss type i with IS setting (i + shift) mod 5
CASES = [(prec, lt, list(IS_SETTINGS)[(i + shift) % 5])
         for shift, prec in enumerate(PRECISIONS) for i, lt in enumerate(LOSS_TYPES)]


def char_variety(completions, **kwargs):
    """A reward that varies within every group, so no advantage is zero by accident."""
    return [len(set(c[-1]["content"])) / 20 for c in completions]


def float64_copy(model):
    """The trainer's weights in a fresh float64 model (TRL patches the trainer's own forward, so not a deepcopy)."""
    ref, _ = scrl_min.load_policy(str(scrl_min.DEFAULT_MODEL_PATH))
    ref.load_state_dict({k: v.to(F64) for k, v in model.state_dict().items()})
    return ref.to(F64).train()


def reference(model64, inputs, sc_kw, seq, loss_type, centering=True, drop_rho=False):
    """(loss with TRL's reduction, head log-probs (B, T, k) float64): the float64 forward's log-softmax,
    `score_centered_pg_loss` (drop_rho: ρ = 0 on every token, tail_tol=inf), TRL's sequence ratio, TRL's reduction."""
    P, T = inputs["prompt_ids"].shape[1], inputs["completion_ids"].shape[1]
    mask = inputs["completion_mask"].bool()
    logits = model64(input_ids=torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
                     attention_mask=torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)).logits
    lsm = torch.log_softmax(logits[:, P - 1:P - 1 + T].to(F64), -1)  # (B, T, V), temperature 1
    lp_y = lsm.gather(-1, inputs["completion_ids"][..., None])[..., 0]
    lp_head = lsm.gather(-1, inputs["sampler_head_ids"])
    q_y = inputs["sampling_per_token_logps"]
    options = dict(tail_tol=math.inf) if drop_rho else {}
    per_token, _ = score_centered_pg_loss(lp_y, lp_head, q_y, inputs["sampler_head_logp"], inputs["advantages"],
                                          mask, centering=centering, **sc_kw, **options)
    if seq:  # TRL's sequence ratio: the product of the token ratios, truncated or masked
        kind, lo, hi = seq
        R = ((lp_y.detach() - q_y) * mask).sum(-1, keepdim=True).exp()
        per_token = per_token * (R.clamp(max=hi) if kind == "truncate" else R * ((R >= lo) & (R <= hi)))
    B, n = per_token.shape[0], mask.sum()
    loss = {"grpo": (per_token.sum(-1) / mask.sum(-1).clamp(min=1)).mean(), "bnpo": per_token.sum() / n,
            "dr_grpo": per_token.sum() / (B * 16), "dapo": per_token.sum() / inputs["num_items_in_batch"],
            "luspo": per_token.sum() / B}[loss_type]
    return loss, lp_head.detach()


def grad_of(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return torch.cat([p.grad.flatten().to(F64) for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("precision, loss_type, is_setting", CASES)
def test_bf16_trainer_rho_and_gradient_match_float64(tmp_path, monkeypatch, precision, loss_type, is_setting):
    cfg, sc_kw, seq = IS_SETTINGS[is_setting]
    tr = task_trainer(tmp_path, n_prompts=8, reward_funcs=char_variety,
                      **{**CONFIG, **PRECISIONS[precision], "loss_type": loss_type, **cfg})
    tr.model.train()
    tr.current_gradient_accumulation_steps = 1  # set by HF's training loop per accumulation window
    inputs = tr._generate_and_score_completions([tr.train_dataset[i] for i in range(4) for _ in range(2)])
    mask = inputs["completion_mask"].bool()
    assert inputs["advantages"].abs().sum() > 0
    seen, real = [], scrl_min.trl.centering_term

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        seen.append(out[1]["rho"].detach().to(F64))
        return out

    monkeypatch.setattr(scrl_min.trl, "centering_term", spy)
    g_trl = grad_of(tr.model, tr.compute_loss(tr.model, inputs))
    assert len(seen) == 1
    rho = seen[0]
    logged = tr._metrics["train"]["score_centering/rho_mean"][-1]
    tr.args.score_centering = False  # TRL's loss alone, in the same numerics: the difference is the centering's
    g_trl_plain = grad_of(tr.model, tr.compute_loss(tr.model, inputs))

    model64 = float64_copy(tr.model)
    loss_ref, lp_ref = reference(model64, inputs, sc_kw, seq, loss_type)
    g_ref = grad_of(model64, loss_ref)
    g_no_rho = grad_of(model64, reference(model64, inputs, sc_kw, seq, loss_type, drop_rho=True)[0])
    g_ref_plain = grad_of(model64, reference(model64, inputs, sc_kw, seq, loss_type, centering=False)[0])

    # ρ in float64 from the reference's head log-probs: (1 − Σ_H q)_+ / max(1 − Σ_H p, ε)
    tail_q = (1 - inputs["sampler_head_logp"].to(F64).exp().sum(-1)).clamp(min=0)
    tail_p = 1 - lp_ref.exp().sum(-1)
    rho_ref = tail_q / tail_p.clamp(min=scrl_min.RHO_EPS)
    band = mask & (tail_p >= 0.005) & (tail_p <= 0.05)
    assert band.sum() >= 0.5 * mask.sum(), (band.sum().item(), mask.sum().item())  # the case tests what it says
    ratio = rho[band] / rho_ref[band]
    worst = ratio[(ratio - 1).abs().argmax()].item()
    assert (ratio - 1).abs().max() <= 0.25, f"per-token ρ / ρ_ref reaches {worst:.4g} ({band.sum().item()} tokens)"
    mean_ref = rho_ref[mask].mean().item()
    assert abs(logged / mean_ref - 1) <= 0.10, f"logged rho_mean {logged:.4g}, reference {mean_ref:.4g}"

    # the centering term's gradient: with it minus without it, the trainer's in its own numerics, the reference's in
    # float64 (the bf16 rounding of TRL's own policy term, common to both of the trainer's, cancels)
    sc_trl, sc_ref, sc_no_rho = g_trl - g_trl_plain, g_ref - g_ref_plain, g_no_rho - g_ref_plain
    err, tail_effect = (sc_trl - sc_ref).norm().item(), (sc_no_rho - sc_ref).norm().item()
    assert tail_effect > 1e-3 * g_ref.norm()  # ρ moves the gradient: the comparison below can fail
    assert err < tail_effect, f"‖Δg − Δg_ref‖ = {err:.3g}, with ρ dropped {tail_effect:.3g}"
