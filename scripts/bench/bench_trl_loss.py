"""The centering's own work inside TRL's loss, piece by piece, on one fixed batch (a benchmark, not a test).

`scripts/bench/bench_trl.py` times whole steps, where a step's page faults and the machine's load move each arm by more
than the centering costs. This times only what `ScoreCenteringGRPOTrainer._compute_loss` adds to TRL's loss, on one
batch of bench_trl.py's setting (the embedded model in float32, 8 prompts × 4 completions × 24 tokens, the FP8
TorchSampler with σ = 0.1), from the backbone's hidden states and log p(y) of one forward computed once:

  * check_batch        the rollout contract on the batch (`validate_rollout`);
  * gaps_forward       `head_logit_gaps`: the k + 1 logits per token, forward only;
  * centering          the gaps, `centering_head_logprobs` (full-softmax rows included), `centering_term`, TRL's
                       reduction, and the backward of all of it into the hidden states and the LM head;
  * metrics            `_log_centering`;
  * total              all four in a row, as the trainer runs them.

Each is the median of --reps calls after 5 warm-up calls, in milliseconds, for every k of --k; TRL's own step time to
compare with is in figures/bench_trl.json (`trl_plain.step_s`).

    OMP_NUM_THREADS=1 python scripts/bench/bench_trl_loss.py --out figures/bench_trl_loss.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_trl import TRLArm  # noqa: E402

from scrl_min import gather_logprobs  # noqa: E402
from scrl_min.driver import cpu_record  # noqa: E402


def _median_ms(fn, reps: int) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1e3, 2)


def measure(k: int, reps: int) -> dict:
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        arm = TRLArm(tmp, True, k)
        tr = arm.tr
        arm.step()  # one real step: the trainer is set up as in training
        inputs = tr._generate_and_score_completions(next(iter(tr.get_train_dataloader())))
        tr.model.train()
        P, T = inputs["prompt_ids"].shape[1], inputs["completion_ids"].shape[1]
        mask = inputs["completion_mask"].bool()
        with torch.no_grad():  # the backbone's last hidden states and log p(y), as TRL's fused head would give them
            hidden = tr.model.model(input_ids=torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
                                    attention_mask=torch.cat([inputs["prompt_mask"], mask.long()], 1)
                                    ).last_hidden_state
            logp_y = gather_logprobs(tr.model.lm_head(hidden[:, P - 1:P - 1 + T]), inputs["completion_ids"])

        def leaves():
            tr.model.zero_grad(set_to_none=True)
            return hidden.clone().requires_grad_(), logp_y.clone().requires_grad_()

        def gaps_forward():
            h, _ = leaves()
            tr._logit_gaps(h, inputs)

        def centering():
            h, lp = leaves()
            term, diag = tr._centering(h, lp, inputs, *tr._logit_gaps(h, inputs))
            term.backward()
            return term, diag, lp

        term, diag, lp = centering()
        log_ratio = lp.detach() - inputs["sampling_per_token_logps"]

        def metrics():
            tr._log_centering(term.detach(), diag, log_ratio, mask)

        def total():
            tr.check_batch(inputs)
            t, d, _ = centering()
            tr._log_centering(t.detach(), d, log_ratio, mask)

        res = dict(check_batch=_median_ms(lambda: tr.check_batch(inputs), reps),
                   gaps_forward=_median_ms(gaps_forward, reps), centering=_median_ms(centering, reps),
                   metrics=_median_ms(metrics, reps), total=_median_ms(total, reps))
        res.update(tokens=int(mask.sum()), full_softmax_rows=int(diag["full_softmax_rows"].sum()))
        return res


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, nargs="+", default=[32, 128], help="head sizes to time")
    ap.add_argument("--reps", type=int, default=60, help="timed calls per piece (after 5 warm-up calls)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench_trl_loss.json"))
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    res = {}
    for k in args.k:
        res[f"k{k}"] = measure(k, args.reps)
        print(f"k = {k}: " + ", ".join(f"{name} {v}" for name, v in res[f"k{k}"].items()), flush=True)
    import trl
    cpu = cpu_record()  # {"model", "isa", "torch"}
    res["config"] = dict(unit="ms, median over reps", reps=args.reps, omp_threads=torch.get_num_threads(),
                         torch=torch.__version__, trl=trl.__version__, cpu=cpu["model"],
                         isa=cpu["isa"], cores=os.cpu_count(),
                         load_average_1min_before_after=[round(load0, 2), round(os.getloadavg()[0], 2)])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
