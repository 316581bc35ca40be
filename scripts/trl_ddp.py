"""Score centering in TRL under data parallelism: `accelerate launch`, 2 CPU processes, gloo.

    accelerate launch --multi_gpu --num_processes 2 scripts/trl_ddp.py --out runs/trl_ddp
    accelerate launch --multi_gpu --num_processes 2 scripts/trl_ddp.py --out DIR --batch B.pt --steps 0

Both parts build the same trainer as the tests and notebook 05 (`scrl_min.trl.task_trainer`) on the embedded
model, with `use_cpu=True, ddp_backend="gloo"`. Without a GPU, `--multi_gpu` is what makes `accelerate launch`
start torchrun with two processes; `use_cpu=True` (a TrainingArguments field) then makes Accelerate choose
DistributedType.MULTI_CPU and gloo (accelerate/state.py, `PartialState._prepare_backend`); `ddp_backend="gloo"`
says so explicitly. The trainer wraps the model in torch DDP, whose backward all-reduces (averages) gradients.

  train  (--steps > 0) `trainer.train()` for --steps optimizer steps, 4 prompts × groups of 2 per step over the two
         processes (TorchSampler on each, rewards gathered for the advantages, TRL's loss + the centering term).
         Rank 0 writes --out/ddp_train.json: TRL's log history, how far the parameters moved, and the largest
         difference between the two processes' parameters after training (DDP keeps them equal: 0 expected).
  grad   (with --batch; runs first) one backward on a fixed global batch saved by the single-process side
         (tests/test_trl.py): rank r takes rows [r·B/2, (r+1)·B/2) (TRL's own contiguous process slice), computes
         the trainer's loss through the DDP-wrapped model and backpropagates (gradient all-reduce). Rank 0 saves
         --out/ddp_grads.pt: {loss_type: flat gradient, ...} for each of --loss_types, with --config (JSON) as
         extra trainer options.
One launch does both, since starting the two processes (importing TRL, which imports vLLM) is most of the time.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from scrl_min.trl import task_trainer

# per process: 4 sequences = 2 prompts × a group of 2, 16 tokens; the global batch is 8 sequences
DDP_CONFIG = dict(use_cpu=True, ddp_backend="gloo", per_device_train_batch_size=4, num_generations=2,
                  max_completion_length=16, learning_rate=1e-2)


def flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().flatten() for t in tensors])


def shard(batch: dict, rank: int, world: int) -> dict:
    """This process's contiguous rows of a global batch; non-row entries (num_items_in_batch) unchanged."""
    B = batch["completion_ids"].shape[0]
    if B % world:
        raise ValueError(f"global batch of {B} rows does not split over {world} processes")
    rows = slice(rank * B // world, (rank + 1) * B // world)
    return {k: v[rows] if torch.is_tensor(v) and v.dim() and v.shape[0] == B else v for k, v in batch.items()}


def grad_mode(args) -> None:
    batch = torch.load(args.batch, weights_only=False)
    extra = json.loads(args.config)
    grads = {}
    with tempfile.TemporaryDirectory() as tmp:
        for loss_type in args.loss_types.split(","):
            tr = task_trainer(tmp, **{**DDP_CONFIG, **extra, "loss_type": loss_type})
            acc = tr.accelerator
            model = acc.prepare_model(tr.model)  # torch DDP over gloo
            if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
                raise RuntimeError(f"expected a DDP model, got {type(model).__name__} "
                                   f"({acc.distributed_type}, {acc.num_processes} processes)")
            model.train()
            tr.current_gradient_accumulation_steps = 1  # what HF's loop sets for one accumulation window
            local = shard(batch, acc.process_index, acc.num_processes)
            acc.backward(tr.compute_loss(model, local))
            g = flat(p.grad for p in tr.model.parameters() if p.grad is not None)
            both = acc.gather(g[None])  # (2, N): every process holds the all-reduced gradient
            tokens = acc.gather(local["completion_mask"].sum()[None])  # generated tokens per process
            grads[loss_type] = dict(grad=g, rank_gap=(both[0] - both[1]).abs().max().item(),
                                    local_tokens=tokens.tolist())
    if acc.is_main_process:
        torch.save(grads, Path(args.out) / "ddp_grads.pt")


def train_mode(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    extra = json.loads(args.config)
    tr = task_trainer(out, **{**DDP_CONFIG, "max_steps": args.steps, **extra})
    if tr.accelerator.num_processes < 2:
        raise RuntimeError("one process: start this script with `accelerate launch --multi_gpu --num_processes 2`")
    before = flat(tr.model.parameters())
    tr.train()
    after = flat(tr.model.parameters())
    acc = tr.accelerator
    both = acc.gather(after[None])  # (2, N)
    if acc.is_main_process:
        record = dict(num_processes=acc.num_processes, distributed_type=str(acc.distributed_type),
                      backend=torch.distributed.get_backend(), steps=args.steps,
                      param_change_max=(after - before).abs().max().item(),
                      param_gap_between_processes=(both[0] - both[1]).abs().max().item(),
                      log_history=tr.state.log_history)
        (out / "ddp_train.json").write_text(json.dumps(record, indent=1))
        print(json.dumps({k: v for k, v in record.items() if k != "log_history"}))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for ddp_grads.pt and ddp_train.json")
    ap.add_argument("--batch", help="the global batch (.pt) saved by the single-process side: run the grad part")
    ap.add_argument("--loss_types", default="grpo,bnpo,dr_grpo,dapo,luspo", help="grad: comma-separated")
    ap.add_argument("--steps", type=int, default=2, help="train: optimizer steps (0: no training)")
    ap.add_argument("--config", default="{}", help="extra ScoreCenteringConfig fields, as JSON")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.batch:
        grad_mode(args)
    if args.steps > 0:
        train_mode(args)
    # Both processes leave together and take the process group down while Python is whole: a rank that exits first
    # with gloo's worker threads still alive can abort at interpreter shutdown ("terminate called without an active
    # exception", SIGABRT, after its work is done; PyTorch's documented shutdown is destroy_process_group at the end
    # of main). Only after both parts succeeded: after an error the other rank may never reach the barrier
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
