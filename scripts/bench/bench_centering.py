"""Trainer-side cost of score centering at Qwen-like shapes (a benchmark, not a test).

One step = forward + backward of the LM head (hidden states → log-probs, chunked by
`scrl_min.lm_head_logprobs`) and the loss, for N tokens:
  * centering: log-probs at 1 + k ids per token (the sampled id and the sampler's top-k head), the
    score-centered loss (weighting "none", centering on);
  * plain:     log-probs at the sampled id only, the same loss with centering off.
Both share the dominant cost, the (N × H) @ (H × V) logits and their backward; centering adds k
gathers per token and a (N, k) multiply-add, which is ~k / V ≈ 0.1% of the softmax work.

Timing: the two arms alternate in one process, median of --reps runs each (after a warm-up run).
Peak memory: each arm again in a fresh subprocess: the kernel's peak-RSS counter (VmHWM) is reset
once the inputs exist (/proc/self/clear_refs), so the number is the step's own peak above them. Results go to stdout and to --out as JSON.

    OMP_NUM_THREADS=2 python scripts/bench/bench_centering.py --out figures/bench_centering.json
"""
import argparse
import json
import platform
import statistics
import subprocess
import sys
import time

import torch

import scrl_min


def make_inputs(n_tokens: int, hidden: int, vocab: int, k: int, seed: int = 0):
    """Hidden states and LM head (grad), sampled ids, a top-k head with its sampler log-probs."""
    g = torch.Generator().manual_seed(seed)
    h = (torch.randn(n_tokens, hidden, generator=g) / hidden ** 0.5).requires_grad_()
    W = torch.randn(vocab, hidden, generator=g).requires_grad_()
    # k distinct ids per row: a random offset plus a stride with k · stride < V (no (N, V) temporaries)
    stride = max(1, (vocab - 1) // k)
    head = (torch.randint(0, vocab, (n_tokens, 1), generator=g) + stride * torch.arange(k)) % vocab
    q_head = torch.log_softmax(torch.randn(n_tokens, k + 1, generator=g) * 2, -1)[:, :k]  # mass < 1
    q_head = q_head.sort(-1, descending=True).values
    y = head[:, 0].clone()  # the sampled token: in the head here
    return h, W, y, head, q_head


def step(arm: str, h, W, y, head, q_head, chunk_size: int) -> None:
    """One forward + backward of LM head + loss. Gradients accumulate into h.grad and W.grad."""
    N = y.shape[0]
    A = torch.ones(N)
    mask = torch.ones(N, 1, dtype=torch.bool)
    if arm == "centering":
        lp = scrl_min.lm_head_logprobs(h, W, torch.cat([y[:, None], head], -1), chunk_size=chunk_size)
        logp, logp_head = lp[:, :1], lp[:, None, 1:]  # (N, 1), (N, 1, k)
    else:
        logp = scrl_min.lm_head_logprobs(h, W, y[:, None], chunk_size=chunk_size)  # (N, 1)
        logp_head = q_head[:, None]  # not gathered from the trainer: centering is off
    per_token, _ = scrl_min.score_centered_pg_loss(
        logp, logp_head, q_head[:, :1], q_head[:, None], A, mask, centering=(arm == "centering"))
    scrl_min.reduce_loss(per_token, mask).backward()


def status_mb(key: str) -> float:
    """VmRSS / VmHWM (peak RSS) of this process from /proc/self/status, in MiB (Linux)."""
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith(key + ":"))
    return int(line.split()[1]) / 1024


def memory_child(args) -> None:
    """Run one arm once in this (fresh) process; print its peak RSS above the inputs' RSS, in MiB."""
    inputs = make_inputs(args.tokens, args.hidden, args.vocab, args.k)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    base = status_mb("VmRSS")
    step(args.memory_child, *inputs, args.chunk)
    peak = status_mb("VmHWM")
    print(json.dumps({"base_mb": base, "peak_mb": peak, "extra_mb": peak - base}))


def shape_arguments(ap: argparse.ArgumentParser) -> None:
    """The Qwen-like shapes both trainer-side benchmarks take: --tokens, --hidden, --vocab, --k."""
    ap.add_argument("--tokens", type=int, default=2048, help="tokens per step (N)")
    ap.add_argument("--hidden", type=int, default=1024, help="hidden size (H)")
    ap.add_argument("--vocab", type=int, default=151_936, help="vocabulary size (V)")
    ap.add_argument("--k", type=int, default=128, help="sampler head size")


def peak_memory_children(script: str, arms, args, *extra: str) -> dict:
    """{arm: the peak-RSS JSON its --memory-child run of `script` prints}, each arm in a fresh process, with the shape
    options of `args` and `extra` command-line arguments passed on."""
    memory = {}
    for arm in arms:
        shape = ["--tokens", str(args.tokens), "--hidden", str(args.hidden), "--vocab", str(args.vocab),
                 "--k", str(args.k)]
        r = subprocess.run([sys.executable, script, "--memory-child", arm, *shape, *extra],
                           capture_output=True, text=True, check=True)
        memory[arm] = json.loads(r.stdout.strip().splitlines()[-1])
    return memory


def report(result: dict, out) -> None:
    """Print the results as JSON and, when `out` is set, write them there."""
    print(json.dumps(result, indent=1))
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shape_arguments(ap)
    ap.add_argument("--chunk", type=int, default=512, help="rows per LM-head chunk")
    ap.add_argument("--reps", type=int, default=5, help="timed runs per arm (after one warm-up)")
    ap.add_argument("--out", default=None, help="write the results here as JSON")
    ap.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        return memory_child(args)

    shape = dict(tokens=args.tokens, hidden=args.hidden, vocab=args.vocab, k=args.k, chunk=args.chunk)
    print(f"shapes {shape}, torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    inputs = make_inputs(args.tokens, args.hidden, args.vocab, args.k)
    times = {"plain": [], "centering": []}
    for rep in range(args.reps + 1):  # rep 0 is the warm-up
        for arm in (("plain", "centering") if rep % 2 else ("centering", "plain")):
            for t in inputs[:2]:
                t.grad = None
            t0 = time.perf_counter()
            step(arm, *inputs, args.chunk)
            dt = time.perf_counter() - t0
            if rep:
                times[arm].append(dt)
            print(f"  rep {rep} {arm:9s} {dt:7.2f} s", flush=True)
    med = {arm: statistics.median(ts) for arm, ts in times.items()}
    # each rep runs the two arms back to back: the median of per-rep ratios cancels slow drifts
    paired = statistics.median(c / p for c, p in zip(times["centering"], times["plain"]))
    memory = peak_memory_children(__file__, times, args, "--chunk", str(args.chunk))
    result = dict(shape=shape, threads=torch.get_num_threads(), cpu=platform.processor() or platform.machine(),
                  times_s=times, median_s=med, ratio_centering_over_plain=med["centering"] / med["plain"],
                  paired_ratio_median=paired,
                  peak_memory_mb=memory,
                  first_principles_extra_work=f"k/V = {args.k / args.vocab:.2e} of the softmax gathers")
    report(result, args.out)


if __name__ == "__main__":
    main()
