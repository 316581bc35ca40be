"""Settings for `make test`, which runs the suite in two pytest-xdist worker processes (`-n 2 --dist loadscope`).

Each worker gets its own torch.distributed rendezvous port. TRL's trainer, accelerate and vLLM's in-process engine
read `MASTER_PORT` (accelerate falls back to 29500), and so do the notebook kernels a smoke run starts, which
inherit the worker's environment. Two workers on one port would make one of them fail to bind, e.g. notebook 05's
smoke run beside another worker's vLLM engine. Inside one worker, tests run one after another, as in a
single-process run.
"""
import os

BASE_PORT = 29500  # torch.distributed's usual default; worker gwN gets BASE_PORT + 10 N


def pytest_configure(config):
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1", ... in a worker; unset in a one-process run
    if worker:
        os.environ["MASTER_PORT"] = str(BASE_PORT + 10 * int(worker.removeprefix("gw")))
