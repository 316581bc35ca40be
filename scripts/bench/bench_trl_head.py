"""Score centering's extra cost over TRL's own loss at a real vocabulary, through TRL's path (a benchmark, not a test).

A synthetic LM head at Qwen-like shapes (hidden 1,024, V = 151,936; 2,048 tokens; k = 128) on the CPU's cores, in
one of three precisions (--dtype): float32; bf16 (hidden states and LM head in bfloat16, a bf16 model); autocast
(float32 tensors under CPU bf16 autocast, TRL's `bf16=True`). In bf16 and autocast the centering also moves TRL's
log p(y) to the float32 softmax's (`reduced_logits`, `float32_logp_shift`), as the trainer does. One step = forward + backward of the loss from the final hidden states, in three arms:
  * trl:        TRL's fused, chunked LM head (`trl.kernels.ChunkedLogProbFunction`, log p(y) and the entropy, as
                GRPOTrainer asks for them) and the policy-gradient term −A · log p(y) (token mean);
  * trl_sc:     the same plus the centering term as ScoreCenteringGRPOTrainer adds it: the logit gaps at the head
                ids (`head_logit_gaps`) from the hidden states before TRL's head runs, then `centering_head_logprobs`
                (log p at the k head ids from TRL's log p(y) and k + 1 logits per token; rows with |Σ c| > 1 over
                the vocabulary) and core's `centering_term`;
  * trl_sc_gap_after: trl_sc with the logit gaps computed after TRL's head instead of before (the order before
                2026-12-05): their backward then runs first, and its (V × H) ∂W is held through TRL's backward;
  * trl_sc_old: the earlier path: a second, chunked LM-head pass over the vocabulary for the head
                (`lm_head_logprobs`), for comparison;
  * sc_only:    the centering's own work alone: trl_sc's extra forward and backward, with log p(y) a leaf standing
                in for TRL's output (TRL's backward is the same kernel call whether or not log p(y) receives the
                centering's gradient) and W.grad already holding a dense gradient, as TRL's leaves it, so the
                accumulation of the centering's ∂W is in the number. Its time over trl's is the extra cost measured
                without the difference of two long, noisy steps.
The sampler's head: the top-k of q = softmax(z + noise) (noise std --noise on every logit), y drawn from q.

Timing: arms alternate in one process (order flipped every rep), --reps timed reps after a warm-up; the paired
number is the median over reps of trl_sc / trl (and the mean of those per-rep ratios with its 95% t-interval, a
rep one unit). Peak memory: each arm once more in a fresh subprocess, its peak RSS
(VmHWM, reset once the inputs exist) above the inputs. The 1-minute load average before and after is recorded.

    OMP_NUM_THREADS=2 python scripts/bench/bench_trl_head.py --reps 6 --out figures/bench_trl_head.json
    OMP_NUM_THREADS=2 python scripts/bench/bench_trl_head.py --reps 12 --arms trl,trl_sc,sc_only --out figures/bench_trl_head_r12.json
    OMP_NUM_THREADS=2 python scripts/bench/bench_trl_head.py --reps 2 --arms trl,trl_sc_old   (the earlier path)
    OMP_NUM_THREADS=2 python scripts/bench/bench_trl_head.py --reps 3 --dtype bf16 --out figures/bench_trl_head_bf16.json
    OMP_NUM_THREADS=2 python scripts/bench/bench_trl_head.py --reps 3 --dtype autocast --out figures/bench_trl_head_autocast.json
    (the same two with --out figures/bench_trl_head_bf16_quiet.json / _autocast_quiet.json: the runs on a quiet machine)
    THP_MEM_ALLOC_ENABLE=1 OMP_NUM_THREADS=2 python scripts/bench/bench_trl_head.py --out figures/bench_trl_head_thp.json

THP_MEM_ALLOC_ENABLE=1 is PyTorch's own switch (since 2.2) for allocating CPU tensors of 2 MB and more on transparent
huge pages (madvise): a fresh (V × H) buffer then costs one page fault per 2 MB instead of one per 4 kB. The result
records it and the kernel's THP mode.
"""
import argparse
import json
import os
import statistics
import sys
import time
from contextlib import nullcontext
from typing import Optional

import torch
from trl.kernels import ChunkedLogProbFunction

import scrl_min
from scrl_min.driver import cpu_record
from scrl_min.trl import (centering_head_logprobs, float32_logp_shift, head_compute_dtype, head_logit_gaps,
                          reduced_logits)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_centering import peak_memory_children, report, shape_arguments, status_mb  # noqa: E402

TRL_CHUNK = 32768  # TRL's _CHUNKED_LOGPROB_CHUNK_SIZE (trl 1.16): vocabulary columns per tile


def make_inputs(n_tokens: int, hidden: int, vocab: int, k: int, noise: float, seed: int = 0, dtype: str = "float32"):
    """Hidden states h (N, H) and LM head W (V, H), both with grad (bfloat16 for dtype "bf16", else float32); logits
    z = h Wᵀ with std ≈ 3; the sampler's q = softmax(z + noise), its top-k head (ids, log q) (N, k) and y ~ q (N,).
    Built a block of rows at a time."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n_tokens, hidden, generator=g)
    W = torch.randn(vocab, hidden, generator=g) * (3.0 / hidden ** 0.5)
    ids, lq, y = [], [], []
    with torch.no_grad():
        for s in range(0, n_tokens, 256):
            zq = h[s:s + 256] @ W.T
            zq += noise * torch.randn(zq.shape, generator=g)
            lsm = torch.log_softmax(zq, -1)  # (n, V)
            y.append(torch.multinomial(lsm.exp(), 1, generator=g)[:, 0])
            top = lsm.topk(k, -1)
            ids.append(top.indices)
            lq.append(top.values)
    if dtype == "bf16":
        h, W = h.bfloat16(), W.bfloat16()
    return h.requires_grad_(), W.requires_grad_(), torch.cat(y), torch.cat(ids), torch.cat(lq)


class _Head(torch.nn.Module):
    def __init__(self, W):
        super().__init__()
        self.weight, self.bias = W, None


def step(arm: str, h, W, y, ids, lq, logp_y=None, autocast: bool = False) -> dict:
    """One forward + backward (the forward under CPU bf16 autocast with `autocast`); gradients accumulate into h.grad
    and W.grad. Returns {"full_rows": n} for trl_sc and sc_only. sc_only takes TRL's log p(y) values (N,) as `logp_y`
    (computed here when None)."""
    with torch.autocast("cpu", dtype=torch.bfloat16) if autocast else nullcontext():
        loss, info = _forward(arm, h, W, y, ids, lq, logp_y)
    loss.backward()
    return info


def _forward(arm, h, W, y, ids, lq, logp_y):
    N = y.shape[0]
    A = torch.linspace(-1, 1, N)  # advantages of both signs
    if arm == "sc_only":
        if logp_y is None:
            with torch.no_grad():
                logp_y = ChunkedLogProbFunction.apply(h, W, None, y, 1.0, TRL_CHUNK, None, 1.0, ("log_probs",))[0]
        logp_y = logp_y.detach().requires_grad_()  # a leaf: the centering's gradient to log p(y) stops here
        if W.grad is None:  # TRL's dense ∂W, already there (the timing loop sets it outside the clock)
            W.grad = torch.zeros_like(W)
        loss = 0.0
    gap, rounded = None, None
    if arm in ("trl_sc", "trl_sc_gap_after", "sc_only"):
        # as ScoreCenteringGRPOTrainer does: the logit gaps from the backbone's hidden states before TRL's head runs
        # (trl_sc_gap_after: after it, as before 2026-12-05; their backward then runs first and holds its (V, H)
        # gradient through TRL's backward)
        def gap_now():  # (gap, rounded) as the trainer's `_logit_gaps`
            g, z, z_y = head_logit_gaps(h[None], W, y[None], ids[None], 1.0, raw=True)
            dt = head_compute_dtype(h.dtype, "cpu", False)
            return g, (None if torch.finfo(dt).bits >= 32 else
                       (z, z_y, *reduced_logits(h[None], W, y[None], ids[None], z, z_y, dt)))
        gap, rounded = gap_now() if arm != "trl_sc_gap_after" else (None, None)
    if arm != "sc_only":
        logp_y, _entropy, *_ = ChunkedLogProbFunction.apply(h, W, None, y, 1.0, TRL_CHUNK, None, 1.0,
                                                            ("log_probs", "entropy"))
        loss = -(A * logp_y).mean()  # TRL's policy term (no IS), token mean
        if arm == "trl_sc_gap_after":
            gap, rounded = gap_now()
    info = {}
    if arm != "trl":
        mask = torch.ones(1, N, dtype=torch.bool)
        if arm in ("trl_sc", "sc_only", "trl_sc_gap_after"):
            shift = None if rounded is None else float32_logp_shift(logp_y[None], *rounded, ids[None], y[None], 1.0)
            lp_head, full = centering_head_logprobs(logp_y[None], h[None], _Head(W), y[None], ids[None], lq[None],
                                                    mask, 1.0, dict(weighting="none"), nullcontext(), gap=gap,
                                                    logp_y_shift=shift)
            info["full_rows"] = int(full.sum())
        else:  # the earlier path: a second pass over the vocabulary
            lp_head = scrl_min.lm_head_logprobs(h[None], W, ids[None])
        term, _ = scrl_min.centering_term(lp_head, lq[None], A[None], mask)
        loss = loss + term.mean()
    return loss, info


def memory_child(args) -> None:
    """One arm once in this (fresh) process: its peak RSS above the inputs' RSS, in MiB, as JSON on stdout."""
    inputs = make_inputs(args.tokens, args.hidden, args.vocab, args.k, args.noise, dtype=args.dtype)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    base = status_mb("VmRSS")
    step(args.memory_child, *inputs, autocast=args.dtype == "autocast")
    print(json.dumps({"base_mb": round(base, 1), "peak_mb": round(status_mb("VmHWM"), 1),
                      "extra_mb": round(status_mb("VmHWM") - base, 1)}))


def _mean_interval(ratios: list) -> Optional[list]:
    """[mean, lower, upper] of per-rep paired ratios: the mean with its 95% t-interval over reps (a rep is one unit,
    `scrl_min.mean_ci95`); None with fewer than 3 reps."""
    if len(ratios) < 3:
        return None
    m, h = (float(v) for v in scrl_min.mean_ci95(ratios))
    return [round(m, 4), round(m - h, 4), round(m + h, 4)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shape_arguments(ap)
    ap.add_argument("--noise", type=float, default=0.5, help="std of the sampler's logit noise (nats)")
    ap.add_argument("--reps", type=int, default=6, help="timed reps per arm (after one warm-up)")
    ap.add_argument("--arms", default="trl,trl_sc,sc_only",
                    help="comma-separated, from trl, trl_sc, sc_only, trl_sc_old (the earlier second-pass path), "
                         "trl_sc_gap_after (the logit gaps computed after TRL's head, their backward first)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bf16", "autocast"),
                    help="float32; bf16 (h and W in bfloat16); autocast (float32 under CPU bf16 autocast)")
    ap.add_argument("--out", default=None, help="write the results here as JSON")
    ap.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        return memory_child(args)
    load0 = os.getloadavg()[0]
    shape = dict(tokens=args.tokens, hidden=args.hidden, vocab=args.vocab, k=args.k, noise=args.noise, dtype=args.dtype)
    print(f"shapes {shape}, torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    inputs = make_inputs(args.tokens, args.hidden, args.vocab, args.k, args.noise, dtype=args.dtype)
    autocast = args.dtype == "autocast"
    arms = args.arms.split(",")
    known = {"trl", "trl_sc", "sc_only", "trl_sc_old", "trl_sc_gap_after"}
    if arms[0] != "trl" or not set(arms) <= known:
        ap.error(f"--arms must start with trl and name only {', '.join(sorted(known))}: {args.arms}")
    times, full_rows = {a: [] for a in arms}, []
    for rep in range(args.reps + 1):  # rep 0 is the warm-up
        for arm in (arms if rep % 2 else arms[::-1]):
            for t in inputs[:2]:
                t.grad = None
            if arm == "sc_only":  # outside the timing: TRL's log p(y) values and the dense ∂W TRL leaves
                inputs[1].grad = torch.zeros_like(inputs[1])
                with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    lp_y = ChunkedLogProbFunction.apply(inputs[0], inputs[1], None, inputs[2], 1.0, TRL_CHUNK, None,
                                                        1.0, ("log_probs",))[0]
            t0 = time.perf_counter()
            info = step(arm, *inputs, logp_y=lp_y if arm == "sc_only" else None, autocast=autocast)
            dt = time.perf_counter() - t0
            if rep:
                times[arm].append(dt)
            full_rows += [info["full_rows"]] if "full_rows" in info else []
            print(f"  rep {rep} {arm:10s} {dt:7.2f} s", flush=True)
    med = {a: statistics.median(ts) for a, ts in times.items()}
    ratios = {a: [x / y for x, y in zip(times[a], times["trl"])] for a in arms[1:]}  # per rep, over trl's
    paired = {a: statistics.median(r) for a, r in ratios.items()}
    interval = {a: _mean_interval(r) for a, r in ratios.items()}
    # sc_only's stand-in ∂W is not the step's memory
    memory = peak_memory_children(__file__, [a for a in arms if a != "sc_only"], args, "--noise", str(args.noise),
                                  "--dtype", args.dtype)
    import trl
    cpu = cpu_record()  # {"model", "isa", "torch"}
    try:
        thp_mode = open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip()
    except OSError:
        thp_mode = None
    result = dict(shape=shape, threads=torch.get_num_threads(), torch=torch.__version__, trl=trl.__version__,
                  cpu=cpu["model"], isa=cpu["isa"], cores=os.cpu_count(),
                  allocator=dict(THP_MEM_ALLOC_ENABLE=os.environ.get("THP_MEM_ALLOC_ENABLE"), kernel_thp=thp_mode),
                  load_average_1min_before_after=[round(load0, 2), round(os.getloadavg()[0], 2)],
                  times_s={a: [round(t, 3) for t in ts] for a, ts in times.items()},
                  median_s={a: round(m, 3) for a, m in med.items()},
                  paired_ratio_over_trl={a: round(r, 4) for a, r in paired.items()},
                  paired_ratio_mean_95={a: v for a, v in interval.items()},
                  full_softmax_rows=dict(per_step=full_rows[-1] if full_rows else None, tokens=args.tokens),
                  peak_memory_mb=memory)
    report(result, args.out)


if __name__ == "__main__":
    main()
