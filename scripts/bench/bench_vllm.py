"""What returning top-k log-probs costs a vLLM sampler, on the embedded model.

    python scripts/bench/bench_vllm.py --out runs/bench_vllm.json        (~1 min on 2 CPU cores)

Measures, on one in-process bf16 engine:
  1. head extraction: vLLM's per-token log-probs → the dense (B, T, k) Rollout tensors, tokens/s,
     for the flat-array path (`flat_logprobs=True`, array ops) and the per-entry dict path;
  2. generation throughput for the same batch (every sequence runs to --tokens, EOS ignored) with
     no log-probs, the sampled token's only (logprobs=0), and the top-k (flat, dict, and flat with
     detokenized log-prob entries), median of --repeats runs;
  3. where the time of a top-k generation goes (cProfile, grouped: model forward, sampler, vLLM's
     log-prob bookkeeping, the rest).
Prints a table and writes everything as JSON to --out.
"""
import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

import scrl_min
from scrl_min import DEFAULT_MODEL_PATH, load_policy, VLLMSampler, dense_from_flat

from scrl_min.vllm_engine import _check_lengths, _empty_dense  # noqa: E402  (the tensors dense_from_flat fills)


def dense_from_dicts(seqs: list, B: int, T: int, k: int, pad_id: int):
    """The baseline this benchmark times `dense_from_flat` against: vLLM's per-position {id: Logprob} dicts read one
    entry at a time (the sampler's reference path before the flat arrays; tests/vllm_fakes.py keeps the checked
    oracle, with its errors). seqs: B completions of at most T tokens; returns dense_from_flat's five tensors."""
    ids, cmask, logq, head_ids, head_logp = _empty_dense(B, T, k, pad_id)
    _check_lengths(seqs, T)
    for b, s in enumerate(seqs):
        for t, (y, row) in enumerate(zip(s.token_ids, s.logprobs)):
            ids[b, t], cmask[b, t], logq[b, t] = y, True, row[y].logprob
            for j, (v, tid) in enumerate(sorted(((v.logprob, i) for i, v in row.items()), key=lambda e: (-e[0], e[1]))[:k]):
                head_logp[b, t, j], head_ids[b, t, j] = v, (tid if v != float("-inf") else 0)
    return ids, cmask, logq, head_ids, head_logp


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=16, help="batch size B")
    ap.add_argument("--tokens", type=int, default=64, help="generated tokens per sequence T")
    ap.add_argument("--k", type=int, default=128, help="top-k log-probs per token")
    ap.add_argument("--repeats", type=int, default=3, help="runs per measurement (median reported)")
    ap.add_argument("--out", default="runs/bench_vllm.json", help="JSON results file")
    args = ap.parse_args(argv)
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    B, T, k = args.prompts, args.tokens, args.k
    _, tok = load_policy(str(DEFAULT_MODEL_PATH))
    ds = scrl_min.make_task_dataset(B, seed=0)
    prompts = [scrl_min.encode_prompt(tok, p) for p in ds["prompt"]]
    t0 = time.perf_counter()
    s = VLLMSampler(str(DEFAULT_MODEL_PATH), precision="bf16", k=k, temperature=1.0,
                    kv_cache_gib=0.5)
    start_s = time.perf_counter() - t0
    llm = s.llm
    inputs = [TokensPrompt(prompt_token_ids=p) for p in prompts]

    def sp(**kw):
        return [SamplingParams(temperature=1.0, max_tokens=T, ignore_eos=True, seed=i,
                               detokenize=kw.pop("detokenize", False), **kw) for i in range(B)]

    def run(params):
        return llm.generate(inputs, params, use_tqdm=False)

    run(sp(logprobs=k, flat_logprobs=True))  # warm-up
    res = dict(config=dict(B=B, T=T, k=k, repeats=args.repeats, vocab=s.vocab_size,
                           omp_threads=torch.get_num_threads(), engine_start_s=round(start_s, 2),
                           torch=torch.__version__, vllm=s.settings["vllm_version"]))
    # --- 2. generation throughput -----------------------------------------------------------------
    variants = {
        "no_logprobs": sp(),
        "logprobs_0": sp(logprobs=0, flat_logprobs=True),
        f"logprobs_{k}_flat": sp(logprobs=k, flat_logprobs=True),
        f"logprobs_{k}_dict": sp(logprobs=k, flat_logprobs=False),
        f"logprobs_{k}_flat_detokenized": sp(logprobs=k, flat_logprobs=True, detokenize=True),
    }
    gen = {}
    for name, params in variants.items():
        med, times = median_time(lambda p=params: run(p), args.repeats)
        gen[name] = dict(seconds=round(med, 4), tokens_per_s=round(B * T / med, 1),
                         runs=[round(t, 4) for t in times])
    base = gen["no_logprobs"]["seconds"]
    for v in gen.values():
        v["overhead_vs_no_logprobs"] = round(v["seconds"] / base - 1, 3)
    res["generation"] = gen
    # --- 1. head extraction -----------------------------------------------------------------------
    seqs_flat = [o.outputs[0] for o in run(variants[f"logprobs_{k}_flat"])]
    seqs_dict = [o.outputs[0] for o in run(variants[f"logprobs_{k}_dict"])]
    N = sum(len(q.token_ids) for q in seqs_flat)
    ext = {}
    for name, fn, seqs in [("flat_arrays", dense_from_flat, seqs_flat),
                           ("per_entry_dicts", dense_from_dicts, seqs_dict)]:
        med, times = median_time(lambda f=fn, q=seqs: f(q, B, T, k, 0), args.repeats)
        ext[name] = dict(seconds=round(med, 5), tokens_per_s=round(N / med),
                         entries_per_s=round(N * (k + 1) / med))
    a = dense_from_flat(seqs_flat, B, T, k, 0)
    b = dense_from_dicts(seqs_flat_as_dicts(seqs_flat), B, T, k, 0)
    ext["paths_agree_exactly"] = all(torch.equal(x, y) for x, y in zip(a, b))
    ext["speedup"] = round(ext["per_entry_dicts"]["seconds"] / ext["flat_arrays"]["seconds"], 1)
    res["head_extraction"] = ext
    # the whole VLLMSampler.generate (engine + tensors + validate_rollout) at the same size
    s.temperature = 1.0
    g = torch.Generator().manual_seed(0)
    full = []
    for _ in range(args.repeats):
        ro = s.generate(prompts, T, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, generator=g)
        full.append(dict(s.last_timing, tokens=int(ro.completion_mask.sum())))
    res["sampler_generate"] = {key: round(statistics.median(t[key] for t in full), 4)
                               for key in full[0]}
    # --- 3. where the time goes -------------------------------------------------------------------
    prof = cProfile.Profile()
    prof.enable()
    run(variants[f"logprobs_{k}_flat"])
    prof.disable()
    res["profile_logprobs_flat"] = profile_groups(prof)
    prof = cProfile.Profile()
    prof.enable()
    run(variants["no_logprobs"])
    prof.disable()
    res["profile_no_logprobs"] = profile_groups(prof)

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(f"B={B} T={T} k={k}, {torch.get_num_threads()} torch thread(s), engine start {start_s:.1f} s")
    print(f"{'generation':36s} {'s':>8s} {'tok/s':>9s} {'overhead':>9s}")
    for name, v in gen.items():
        print(f"{name:36s} {v['seconds']:8.3f} {v['tokens_per_s']:9.0f} {v['overhead_vs_no_logprobs']:+9.1%}")
    print(f"head extraction: flat {ext['flat_arrays']['tokens_per_s']:,} tok/s, dict "
          f"{ext['per_entry_dicts']['tokens_per_s']:,} tok/s ({ext['speedup']}x); exact agreement: "
          f"{ext['paths_agree_exactly']}")
    print(f"VLLMSampler.generate medians: {res['sampler_generate']}")
    for key in ("profile_logprobs_flat", "profile_no_logprobs"):
        print(key, res[key])
    print(f"wrote {args.out}")


def seqs_flat_as_dicts(seqs):
    """The flat outputs viewed as per-position dicts (vLLM's own FlatLogprobs.__getitem__)."""
    from types import SimpleNamespace

    return [SimpleNamespace(token_ids=q.token_ids, logprobs=list(q.logprobs)) for q in seqs]


# (name, file substring, function name): cumulative time of these calls inside one generate()
POINTS = [
    ("llm_generate", "entrypoints/llm.py", "generate"),
    ("engine_core_step", "v1/engine/core.py", "step"),
    ("model_runner_execute_model", "gpu_model_runner.py", "execute_model"),
    ("model_forward", "models/qwen3.py", "forward"),
    ("sampler_forward", "v1/sample/sampler.py", "forward"),
    ("sampler_gather_topk_logprobs", "v1/sample/sampler.py", "gather_logprobs"),
    ("logprob_tensors_to_lists", "v1/outputs.py", "tolists"),
    ("output_processor", "v1/engine/output_processor.py", "process_outputs"),
    ("output_logprobs_update", "v1/engine/logprobs.py", "_update_sample_logprobs"),
    ("flat_append_per_entry", "vllm/logprobs.py", "append_fast"),
]


def profile_groups(prof) -> dict:
    """Cumulative seconds of a few vLLM entry points (see POINTS) inside the profiled call."""
    st = pstats.Stats(prof)
    out = {}
    for name, file, fn in POINTS:
        hits = [(cc, nc, cum) for (f, _, func), (cc, nc, _, cum, _) in st.stats.items()
                if file in f and func == fn]
        if hits:
            out[name] = dict(seconds=round(max(h[2] for h in hits), 4), calls=max(h[1] for h in hits))
    return out


if __name__ == "__main__":
    sys.exit(main())
