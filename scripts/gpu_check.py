"""GPU checks that a CPU cannot run, in independent parts (none of this has run on a GPU in this project).

    python scripts/gpu_check.py --out runs/gpu_check.json                    # every part, on cuda:0
    python scripts/gpu_check.py --parts loss,fp8 --out runs/gpu_check.json   # only torch + transformers needed
    python scripts/gpu_check.py --dry-run                                    # tiny sizes on the CPU (the test)

Parts (each imports what it needs when it runs, so `loss` and `fp8` run where TRL and vLLM are not installed; a part
that fails is recorded with its error and the others still run; the exit code is 1 if any part failed):
  loss      torch only. `score_centered_pg_loss`, `centering_term` and `lm_head_logprobs` on CUDA tensors against the
            same calls on CPU copies (values, gradients, diagnostics: max relative gap ≤ 1e-4, float32), and
            `validate_rollout` raising the same error on a corrupted CUDA batch.
  fp8       torch + transformers. The torch sampler's real FP8 GEMMs (`torch._scaled_mm`) against its float32
            emulation (the same e4m3 operands), on notebook 04's prompts (`make_task_dataset(n, seed=0)`): one
            completion per prompt from the emulated sampler, then both samplers' models teacher-forced on the same
            tokens on the device; per generated token |Δ log q(y_t)| (mean, max) and KL(q_emulated ‖ q_scaled_mm)
            over the vocabulary (mean, max), and each against the float32 trainer for scale.
  trl_loss  + TRL. `ScoreCenteringGRPOTrainer` (TorchSampler backend) with the model on CUDA: one batch, the gradient
            of TRL's loss + the centering term against `score_centered_pg_loss` with TRL's reduction written out
            (tests/test_trl.py's reference), ‖Δg‖ / ‖g‖.
  trl_vllm  + vLLM. 3 TRL steps with score centering on TRL's colocate vLLM engine in bf16 (bf16=True, an engine in
            bf16): every sync verified by the probe (its |Δ log p| recorded), the centering metrics logged.
  trl_fp8   + vLLM. The same with an FP8 engine (vllm_engine_kwargs quantization="fp8", kv_cache_dtype="fp8"): records
            whether the trainer's colocate weight sync (`reload_engine_weights`: vLLM's `reload_weights`, which
            re-runs the FP8 weight processing) passes the probe. A refusal here is a finding (the check doing its
            job), recorded, not a failure.
Results go to stdout and, as JSON, to --out.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's scrl_min, run from anywhere
PARTS = ("loss", "fp8", "trl_loss", "trl_vllm", "trl_fp8")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a − b| / max(max |b|, 1e-12), on the CPU, in float64."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-12))


def part_loss(device: str, dry: bool) -> dict:
    """The loss, the centering term and the LM-head log-probs on `device` against CPU copies."""
    from scrl_min import (RolloutError, Rollout, centering_term, lm_head_logprobs, score_centered_pg_loss,
                          validate_rollout)

    g = torch.Generator().manual_seed(0)
    B, T, V, k, H = (2, 4, 32, 5, 8) if dry else (16, 64, 32000, 128, 512)
    lq = (2 * torch.randn(B, T, V, generator=g)).log_softmax(-1)  # the sampler's q
    lp = (lq + 0.3 * torch.randn(B, T, V, generator=g)).log_softmax(-1)  # the trainer's p
    head = lq.topk(k, -1).indices  # (B, T, k)
    y = torch.multinomial(lq.exp().view(-1, V), 1, generator=g).view(B, T)
    mask = torch.rand(B, T, generator=g) < 0.9
    A = torch.randn(B, generator=g)
    out = {}
    for weighting in ("none", "tis", "mis"):
        res = {}
        for dev in ("cpu", device):
            lp_y = lp.gather(-1, y[..., None])[..., 0].to(dev).requires_grad_()
            lp_h = lp.gather(-1, head).to(dev).requires_grad_()
            lq_y, lq_h = lq.gather(-1, y[..., None])[..., 0].to(dev), lq.gather(-1, head).to(dev)
            loss, diag = score_centered_pg_loss(lp_y, lp_h, lq_y, lq_h, A.to(dev), mask.to(dev), weighting=weighting)
            term, _ = centering_term(lp_h, lq_h, A.to(dev), mask.to(dev), weighting=weighting)
            loss.sum().backward()
            res[dev] = [loss, term, lp_y.grad, lp_h.grad, *diag.values()]
            assert all(x.device.type == torch.device(dev).type for x in res[dev]), "a result left the device"
        out[weighting] = max(_rel(a, b) for a, b in zip(res[device], res["cpu"]))
    hidden, W = torch.randn(B, T, H, generator=g), torch.randn(V, H, generator=g) / H ** 0.5
    a = lm_head_logprobs(hidden.to(device), W.to(device), head.to(device))
    out["lm_head_logprobs"] = _rel(a, lm_head_logprobs(hidden, W, head))
    ro = Rollout(torch.zeros(B, 1, dtype=torch.long), torch.ones(B, 1, dtype=torch.bool), y, mask,
                 lq.gather(-1, y[..., None])[..., 0], head, lq.gather(-1, head))
    b, t = mask.nonzero()[0].tolist()
    ro.head_ids[b, t, 1] = ro.head_ids[b, t, 0]  # a repeated id: both devices must name (b, t)
    errors = []
    for dev in ("cpu", device):
        moved = Rollout(*(x.to(dev) for x in (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                                               ro.sampler_logp, ro.head_ids, ro.head_logp)))
        try:
            validate_rollout(moved, V)
            errors.append(None)
        except RolloutError as e:
            errors.append(str(e))
    gaps = [v for key, v in out.items()]
    ok = max(gaps) <= 1e-4 and errors[0] is not None and errors[0] == errors[1]
    return dict(ok=ok, max_rel_gap=out, contract_error=errors[1], sizes=dict(B=B, T=T, V=V, k=k))


def _move(model, device: str) -> None:
    """model.to(device), including the emulated QuantLinears' dequantized weight (a plain attribute, not a buffer)."""
    model.to(device)
    for mod in model.modules():
        if getattr(mod, "_w_deq_t", None) is not None:
            mod._w_deq_t = mod._w_deq_t.to(device)


@torch.no_grad()
def part_fp8(device: str, dry: bool) -> dict:
    """The torch sampler's scaled_mm FP8 GEMMs vs their float32 emulation, teacher-forced on the same tokens."""
    from scrl_min import TorchSampler, encode_prompt, load_policy, make_task_dataset
    from scrl_min import DEFAULT_MODEL_PATH

    n, T = (2, 4) if dry else (128, 24)  # notebook 04: 128 task prompts (seed 0), 24 tokens
    policy, tok = load_policy(str(DEFAULT_MODEL_PATH))
    prompts = [encode_prompt(tok, p) for p in make_task_dataset(n, seed=0)["prompt"]]
    sd = policy.state_dict()
    samplers = {}
    for backend in ("emulated", "scaled_mm"):
        s = TorchSampler(policy.config, precision="fp8", k=8, temperature=1.0, fp8_backend=backend)
        s.push_weights(sd)
        samplers[backend] = s
    t0 = time.time()
    ro = samplers["emulated"].generate(prompts, T, tok.eos_token_id, tok.pad_token_id,
                                       torch.Generator().manual_seed(0))  # on the CPU, as the sampler runs
    gen_s = time.time() - t0
    ids = torch.cat([ro.prompt_ids, ro.completion_ids], 1).to(device)  # (B, P + T)
    attn = torch.cat([ro.prompt_mask, ro.completion_mask], 1).long().to(device)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    P, m = ro.prompt_ids.shape[1], ro.completion_mask.to(device)
    logq = {}
    for name, model in [("emulated", samplers["emulated"].model), ("scaled_mm", samplers["scaled_mm"].model),
                        ("trainer_fp32", policy)]:
        _move(model, device)
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits[:, P - 1:P - 1 + T].float()
        logq[name] = torch.log_softmax(logits, -1)  # (B, T, V): row P − 1 + t scores completion token t
        _move(model, "cpu")
    y = ro.completion_ids.to(device)[..., None]

    def compare(a, b):
        d = (logq[a].gather(-1, y) - logq[b].gather(-1, y))[..., 0][m].abs()
        kl = (logq[a].exp() * (logq[a] - logq[b])).sum(-1)[m]  # KL(a ‖ b) per generated token
        return dict(abs_dlogp_mean=float(d.mean()), abs_dlogp_max=float(d.max()), kl_mean=float(kl.mean()),
                    kl_max=float(kl.max()))

    res = {"scaled_mm_vs_emulated": compare("emulated", "scaled_mm"),
           "emulated_vs_trainer": compare("emulated", "trainer_fp32"),
           "scaled_mm_vs_trainer": compare("scaled_mm", "trainer_fp32")}
    return dict(ok=True, **res, tokens=int(m.sum()), prompts=n, generate_s=round(gen_s, 2),
                backends=[samplers[b].fp8_backend for b in samplers], device=device)


def _trl_args(device: str, dry: bool, **cfg) -> dict:
    on_cpu = device == "cpu"
    return dict(use_cpu=on_cpu, bf16=not on_cpu, per_device_train_batch_size=8, num_generations=2,
                max_completion_length=8 if dry else 24, learning_rate=1e-2, **cfg)


def part_trl_loss(device: str, dry: bool) -> dict:
    """TRL + SC (TorchSampler backend) with the policy on the device: gradient vs the written-out reference."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from test_trl import char_variety, grad_of, reference_loss  # the reference of tests/test_trl.py

    from scrl_min.trl import task_trainer

    with tempfile.TemporaryDirectory() as tmp:
        tr = task_trainer(tmp, reward_funcs=char_variety, **{**_trl_args(device, dry), "bf16": False},
                          loss_type="dapo", vllm_importance_sampling_mode="token_truncate",
                          vllm_importance_sampling_clip_max=1.05)
        assert tr.model.device.type == torch.device(device).type, tr.model.device
        tr.model.train()
        tr.current_gradient_accumulation_steps = 1
        inputs = tr._generate_and_score_completions([tr.train_dataset[i] for i in range(4) for _ in range(2)])
        g = grad_of(tr.model, tr.compute_loss(tr.model, inputs))
        ref = reference_loss(tr.model, inputs, dict(weighting="tis", tis_cap=1.05), None,
                             dict(vllm_importance_sampling_clip_max=1.05), "dapo")
        g_ref = grad_of(tr.model, ref)
        gap = float((g - g_ref).norm() / g_ref.norm())
    return dict(ok=gap <= 1e-4, grad_rel_gap=gap, device=str(inputs["completion_ids"].device))


def _trl_vllm_run(device: str, dry: bool, engine_kwargs: dict) -> dict:
    from scrl_min import ScrlError
    from scrl_min.trl import task_trainer

    with tempfile.TemporaryDirectory() as tmp:
        tr = task_trainer(tmp, **_trl_args(device, dry, max_steps=1 if dry else 3), use_vllm=True,
                          vllm_mode="colocate", vllm_max_model_length=512, vllm_gpu_memory_utilization=0.3,
                          vllm_engine_kwargs=engine_kwargs)
        try:
            tr.train()
        except ScrlError as e:
            return dict(ok=False, refused=str(e), last_sync=tr.last_sync, engine_precision=tr.engine_precision)
        logs = [h for h in tr.state.log_history if "score_centering/loss" in h]
        keys = ("score_centering/sync_probe_mean_abs", "score_centering/head_mass_q", "score_centering/rho_mean",
                "sampling/mismatch_kl", "score_centering/loss", "reward")
        return dict(ok=len(logs) == (1 if dry else 3), engine_precision=tr.engine_precision, probe_tol=tr.probe_tol,
                    steps=[{k: h.get(k) for k in keys} for h in logs])


def part_trl_vllm(device: str, dry: bool) -> dict:
    """3 TRL steps with SC on the colocate vLLM engine in bf16."""
    return _trl_vllm_run(device, dry, dict(enforce_eager=True, kv_cache_memory_bytes=1 << 27) if dry else {})


def part_trl_fp8(device: str, dry: bool) -> dict:
    """The same on an FP8 engine: does TRL's per-tensor weight sync pass the probe? (recorded either way)"""
    if dry:
        return dict(ok=True, skipped="FP8 weights need a GPU (vLLM's CPU FP8 GEMM needs AMX)")
    res = _trl_vllm_run(device, dry, dict(quantization="fp8", kv_cache_dtype="fp8"))
    res["ok"] = True  # a refusal by the probe is the finding this part exists for
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, from {PARTS}")
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU: checks the script, not the GPU")
    ap.add_argument("--device", default=None, help="default: cuda:0, or cpu with --dry-run")
    ap.add_argument("--out", type=Path, default=Path("runs/gpu_check.json"))
    args = ap.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        ap.error(f"unknown parts {sorted(unknown)}; choose from {PARTS}")
    device = args.device or ("cpu" if args.dry_run else "cuda:0")
    if device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("no CUDA device here: run with --dry-run (CPU) or on a GPU machine")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    results = dict(device=device, dry_run=args.dry_run, torch=torch.__version__,
                   gpu=torch.cuda.get_device_name(0) if device.startswith("cuda") else None)
    for name in parts:
        t0 = time.time()
        try:
            res = globals()[f"part_{name}"](device, args.dry_run)
        except Exception as e:  # one part's failure must not hide the others' results
            res = dict(ok=False, error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-3000:])
        res["seconds"] = round(time.time() - t0, 1)
        results[name] = res
        print(f"{name}: {'ok' if res['ok'] else 'FAILED'} "
              f"{json.dumps({k: v for k, v in res.items() if k != 'traceback'}, default=str)[:600]}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, default=str))
    return 0 if all(results[p]["ok"] for p in parts) else 1


if __name__ == "__main__":
    sys.exit(main())
