"""The run driver: configs and arms, the Trainer that owns a run's state, run folders, runs over seeds
and the command line. The method it runs is `core.py`; the samplers are `torch_sampler.py` and
`vllm_engine.py`; statistics over the runs' records are `stats.py`.

Reading order: `TrainConfig` (every field of a run, checked once in `__post_init__`) · `ARMS` and
`arm_config` (the experiment's named presets) · `config_id` and `with_run_dir` (a folder per
configuration) · `RunFolder` (lock, resume, checkpoints, the config a folder holds) · `Trainer`
(policy + sampler + clean evaluation + `train_step`, which calls `core.rl_step`) · `train_many`,
`run_grid` (runs in parallel processes) · `main` (`python -m scrl_min`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from .core import ADVANTAGE_MODES, LEVELS, MIS_BAND, TIS_CAP, WEIGHTING, WEIGHTINGS, ScrlError, StepConfig, rl_step
from .formats import FP8_BACKEND, FP8_BACKENDS, KV_CACHES, PRECISIONS
from .task import DEFAULT_MODEL_PATH, REPO_ROOT, encode_prompt, make_task_dataset, task_rewards
from .torch_sampler import STALENESS_SCHEDULES, TorchSampler
from .vllm_engine import VLLM_PRECISIONS, VLLMSampler, vllm_precision_for

OPTIMIZERS = ("sgd", "adam")
SAMPLERS = ("torch", "vllm")  # rollout engines: TorchSampler, VLLMSampler
# the choices of TrainConfig's string fields (checked in __post_init__, offered by the CLI)
CHOICES = dict(advantage_mode=ADVANTAGE_MODES, optimizer=OPTIMIZERS, sampler=SAMPLERS,
               sampler_precision=PRECISIONS, kv_cache=KV_CACHES, vllm_precision=("auto", *VLLM_PRECISIONS),
               weighting=WEIGHTINGS, weight_level=LEVELS, fp8_backend=FP8_BACKENDS,
               staleness_schedule=STALENESS_SCHEDULES)
# TrainConfig's float fields (mis_band: a pair of floats; constant_reward: a float or None), checked finite
FLOAT_FIELDS = ("temperature", "noise_std", "tis_cap", "mis_band", "lr", "max_grad_norm", "constant_reward")


def arg(default, help: str):
    """A TrainConfig field: its default and its one-line documentation (shown by `--help`)."""
    return field(default=default, metadata={"help": help})


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Configs and arms
# ═════════════════════════════════════════════════════════════════════════════════════════════════
@dataclass
class TrainConfig:
    """One RL run. Every field is a literal, so a run is reproducible from its saved config.json.
    The named arms of the experiment (`ARMS`, `arm_config`) are presets over these fields."""

    # --- what is trained, and where results go
    model: str = arg(str(DEFAULT_MODEL_PATH), "local checkpoint path or HF model id of the policy")
    out_dir: str = arg("runs/default", "metrics.jsonl, config.json and checkpoint.pt go here")
    seed: int = arg(0, "seeds prompts, sampling, noise draw")
    # --- the task and the rollout
    n_prompts: int = arg(64, "size of the task dataset")
    prompts_per_step: int = arg(8, "distinct prompts per RL step")
    group_size: int = arg(4, "G: completions per prompt (a GRPO group)")
    max_new_tokens: int = arg(24, "completion length budget, tokens")
    names_target: int = arg(12, "distinct Python names in a completion that earn the full reward 1.0")
    constant_reward: Optional[float] = arg(None, "every completion earns this reward (a length-neutral task: no "
                                                 "signal, plain is pure drift); None = the verifier's reward")
    temperature: float = arg(1.0, "sampling temperature; the trainer divides its logits by the same")
    k: Optional[int] = arg(None, "head size: top-k log-probs the sampler returns per token; None = min(128, V)")
    # --- the sampler and its mismatch with the trainer
    sampler: str = arg("torch", "rollout engine: torch (TorchSampler) | vllm (VLLMSampler; needs vLLM)")
    sampler_precision: str = arg("fp8", "fp32 | bf16 | fp8 (W8A8 e4m3) | fp8_e5m2 | int8 | int8_w8a8 | int4_g128 | int4_g32")
    kv_cache: str = arg("auto", "torch sampler: auto (float32) | fp8_e4m3 (vLLM's FP8 KV cache, scale 1.0)")
    vllm_precision: str = arg("auto", "vLLM numerics: auto | bf16 | fp8_kv | fp8 (see vllm_precision_for)")
    fp8_backend: str = arg(FP8_BACKEND, "scaled_mm (torch._scaled_mm) | emulated (same e4m3 numbers, fp32 GEMM)")
    noise_std: float = arg(0.1, "σ: persistent relative weight noise on the sampler; 0 turns it off")
    staleness: int = arg(0, "s: the sampler's weights lag the trainer by s steps")
    staleness_schedule: str = arg("constant", "constant: the sampler holds the weights of s steps ago | refresh: "
                                              "refreshed every s + 1 steps, its lag cycles 0..s (the article's)")
    # --- the loss
    weighting: str = arg(WEIGHTING, "importance weight f(r): none | is | tis | mis | icepop")
    centering: bool = arg(True, "score centering: subtract the top-k estimate of the drift")
    weight_level: str = arg("token", "token: f(r) per token · sequence: one GSPO-style f(s_i) per sequence")
    tis_cap: float = arg(TIS_CAP, "C of TIS")
    mis_band: tuple = arg(MIS_BAND, "[lo, hi] of MIS / IcePop")
    advantage_mode: str = arg("raw", "raw (A = r) | signed (2r − 1) | grpo ((r − mean_G) / std_G) | centered (2(r − mean_G))")
    # --- optimization
    steps: int = arg(300, "RL steps (one optimizer step each)")
    optimizer: str = arg("sgd", "sgd | adam")
    lr: float = arg(0.5, "learning rate")
    max_grad_norm: float = arg(0.0, "clip the global grad norm here; 0 disables clipping")
    # --- clean evaluation and measurements
    eval_every: int = arg(10, "steps between clean evaluations (and after the last step); 0 turns them off")
    eval_prompts: int = arg(64, "held-out prompts (never trained on) of the clean evaluation, one completion each")
    measure_drift: bool = arg(True, "log the exact drift and signal (full-vocabulary q and p; torch sampler only)")
    # --- bookkeeping
    checkpoint_every: int = arg(25, "steps between checkpoints (and always at the end)")
    progress: bool = arg(True, "progress bar over steps")

    def __post_init__(self):
        """Each field checked once, here: ScrlError names the field, its value and what it may be."""
        for name, choices in CHOICES.items():
            if getattr(self, name) not in choices:
                raise ScrlError(f"unknown {name} {getattr(self, name)!r}; choose one of {tuple(choices)}")
        # NaN passes no comparison below, ±inf passes some; either would be saved in config.json as a
        # non-JSON literal and reach the run (a NaN lr trains, then the sampler meets NaN weights)
        for name in FLOAT_FIELDS:
            value = getattr(self, name)
            numbers = [] if value is None else value if name == "mis_band" else [value]
            if not all(math.isfinite(v) for v in numbers):
                raise ScrlError(f"{name} must be {'finite numbers' if name == 'mis_band' else 'a finite number'}, "
                                f"got {value}")
        positive = dict(n_prompts=self.n_prompts, prompts_per_step=self.prompts_per_step,
                        group_size=self.group_size, max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                        eval_prompts=self.eval_prompts, checkpoint_every=self.checkpoint_every)
        for name, value in positive.items():
            if not value > 0:
                raise ScrlError(f"{name} must be > 0, got {value}")
        if self.k is not None and self.k < 1:
            raise ScrlError(f"head size k must be >= 1 (or None for min(128, V)), got {self.k}")
        for name in ("eval_every", "noise_std", "staleness", "steps", "lr", "max_grad_norm"):
            if not getattr(self, name) >= 0:
                raise ScrlError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.tis_cap > 0:
            raise ScrlError(f"tis_cap must be > 0 (TIS's weight is min(r, tis_cap)), got {self.tis_cap}")
        if self.advantage_mode in ("grpo", "centered") and self.group_size < 2:
            raise ScrlError(f"{self.advantage_mode} advantages need group_size >= 2, got {self.group_size}")
        if self.sampler == "vllm" and self.kv_cache != "auto":
            raise ScrlError(f"kv_cache={self.kv_cache!r} is the torch sampler's; vLLM's FP8 KV cache is "
                            f"vllm_precision='fp8_kv'")
        if len(self.mis_band) != 2 or not 0 <= self.mis_band[0] <= self.mis_band[1]:
            raise ScrlError(f"mis_band must be [lo, hi] with 0 <= lo <= hi, got {self.mis_band}")

    def step_config(self) -> StepConfig:
        """The fields one RL step reads (`core.rl_step`), as its `StepConfig`."""
        return StepConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(StepConfig)})



# The arms of the experiment: named presets over TrainConfig's fields (sampler numerics × correction).
# The bf16 reference has no weight noise: it is the no-mismatch run the others are compared with (arm_config
# refuses another noise_std for it).
ARMS = {
    "bf16":   dict(sampler_precision="bf16", weighting="none", centering=False, noise_std=0.0),
    "plain":  dict(sampler_precision="fp8", weighting="none", centering=False),
    "tis":    dict(sampler_precision="fp8", weighting="tis", centering=False),
    "mis":    dict(sampler_precision="fp8", weighting="mis", centering=False),
    "sc":     dict(sampler_precision="fp8", weighting="none", centering=True),
    "sc_tis": dict(sampler_precision="fp8", weighting="tis", centering=True),
    "sc_mis": dict(sampler_precision="fp8", weighting="mis", centering=True),
}
# Fields that do not change a run's results: a run folder may be resumed with other values of them.
RUN_BOOKKEEPING = ("steps", "progress", "out_dir", "checkpoint_every")
# Fields added after runs were named: left out of config_id while they hold their default, so every
# config that existed before them keeps its id (and its run folder resumes).
HASHED_UNLESS_DEFAULT = ("kv_cache", "constant_reward", "staleness_schedule")
# Bumped when the trainer makes different runs from the same config (v2: paired random streams and
# held-out prompts), so that config_id names new folders and an old run is never resumed as a new one.
TRAINER_VERSION = 2
EVAL_SEED = 10_007  # seeds the held-out prompt set (the same for every seed and arm)


def arm_config(arm: str, **fields) -> TrainConfig:
    """TrainConfig of a named arm (`ARMS`) with `fields` on top. The preset sets sampler precision,
    weighting and centering (and noise_std = 0 for the bf16 reference); an explicit field wins, so
    arm_config("tis", centering=True) is TIS + SC. The reference's σ = 0 is decided here, once: "bf16"
    with noise_std > 0 would be a mismatched arm under the reference's name, so it is refused (a bf16
    sampler with weight noise is arm_config("plain", sampler_precision="bf16", noise_std=σ)). Raises
    ScrlError for an unknown arm or field, or a nonzero noise_std for "bf16"."""
    if arm not in ARMS:
        raise ScrlError(f"unknown arm {arm!r}; choose one of {sorted(ARMS)}")
    unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(TrainConfig)})
    if unknown:
        raise ScrlError(f"unknown TrainConfig field(s) {unknown}")
    if arm == "bf16" and fields.get("noise_std", 0.0) != 0.0:
        raise ScrlError(f"the bf16 arm is the no-mismatch reference (noise_std 0), got noise_std="
                        f"{fields['noise_std']}; a bf16 sampler with weight noise is the plain arm with "
                        f"sampler_precision='bf16'")
    return TrainConfig(**{**ARMS[arm], **fields})


EMBEDDED_MODEL = ("models", "qwen3-tiny-code")  # the embedded model's path inside any checkout of the project


def model_key(model: str) -> str:
    """The model as config_id and run folders compare it: a path inside the checkout relative to its root
    (the embedded default is "models/qwen3-tiny-code" wherever the repository is cloned); an absolute path
    ending in models/qwen3-tiny-code outside it is another checkout's embedded model (the run records committed
    in results/ name it by the absolute path of the clone that trained them), so the same key; anything else (a
    path elsewhere, an HF model id) as given."""
    path = Path(model)
    if path.is_absolute():
        with contextlib.suppress(ValueError):
            return path.resolve().relative_to(REPO_ROOT.resolve()).as_posix()
        if path.parts[-len(EMBEDDED_MODEL):] == EMBEDDED_MODEL:
            return "/".join(EMBEDDED_MODEL)
    return model


def config_id(cfg: TrainConfig) -> str:
    """Eight hex digits naming a run's results: a hash of every field except `RUN_BOOKKEEPING` (and
    the `HASHED_UNLESS_DEFAULT` fields at their default). Two configs with the same id make the same
    run (up to their step count), so a run folder named with it resumes safely and never collides
    with a run of other settings."""
    import hashlib

    default = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    d = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in RUN_BOOKKEEPING
         and not (k in HASHED_UNLESS_DEFAULT and v == default[k])}
    d["model"] = model_key(d["model"])
    d["trainer_version"] = TRAINER_VERSION
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=list).encode()).hexdigest()[:8]


def with_run_dir(cfg: TrainConfig, root, tag: str) -> TrainConfig:
    """cfg with out_dir = root/<tag>-<config_id(cfg)>: a folder per configuration, so a small trial
    never blocks a later run with other settings, and a rerun of the same settings resumes."""
    return dataclasses.replace(cfg, out_dir=str(Path(root) / f"{tag}-{config_id(cfg)}"))


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# Runs: the policy, run folders, the Trainer
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def seeds_named_elsewhere(stem: str, root: Path = REPO_ROOT) -> dict:
    """The fresh-seed check of a pre-registered notebook: {seed: [files]} for every integer seed the repository
    names outside notebook `stem` (e.g. "16_grpo_regime"): every int under a key named seed, seeds, *_seed or
    *_seeds in figures/**/*.json and results/**/config.json (the runs behind every figure and every kept run
    record), and `seed`/`seeds` values (a number, a list, a range(a, b)) in the other notebooks' parameters cells,
    in the parameters files (their `stem` entries left out), and in tests/ and scripts/. Files whose path contains
    `stem` are left out, and so are figures/verdict*.json, which restate the notebooks' own JSON for the verdict page
    and the deck (a notebook's seeds appear there because it ran them). A notebook that names a block by its first
    seed and a count is caught at the first seed."""
    import re

    import yaml

    named = {}

    def walk(x, path, under_seed=False):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, path, bool(re.search(r"(^|_)seeds?$", str(k))))
        elif isinstance(x, list):
            for v in x:
                walk(v, path, under_seed)
        elif under_seed and isinstance(x, int) and not isinstance(x, bool):
            named.setdefault(x, set()).add(path)

    for path in [*sorted((root / "figures").rglob("*.json")), *sorted((root / "results").rglob("config.json"))]:
        rel = str(path.relative_to(root))
        if stem not in rel and not (path.parent.name == "figures" and path.name.startswith("verdict")):
            walk(json.loads(path.read_text()), rel)
    pattern = re.compile(r"(?:\b|_)seeds?\b\W{0,3}[=:]\s*(\[[\d,\s]*\]|range\(\s*\d+\s*,\s*\d+\s*\)|\d+)")
    texts = {}
    for path in sorted((root / "notebooks").glob("[0-9][0-9]_*.py")):
        if not path.name.startswith(stem):  # the parameters cell: from its tag to the next cell
            texts[path] = path.read_text().partition('tags=["parameters"]')[2].partition("\n# %%")[0]
    for path in sorted((root / "notebooks").glob("*.yaml")):
        texts[path] = json.dumps({k: v for k, v in (yaml.safe_load(path.read_text()) or {}).items()
                                  if not str(k).startswith(stem)})
    for folder in ("tests", "scripts"):
        texts.update({p: p.read_text() for p in sorted((root / folder).glob("*.py"))})
    for path, text in texts.items():
        for m in pattern.finditer(text):
            v = m.group(1)
            values = (range(*map(int, re.findall(r"\d+", v))) if v.startswith("range")
                      else map(int, re.findall(r"\d+", v)))
            for seed in values:
                named.setdefault(seed, set()).add(str(path.relative_to(root)))
    return {seed: sorted(f) for seed, f in named.items()}


def load_policy(model: str):
    """(model in float32, tokenizer) from a local path or HF model id. Raises ScrlError if missing."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar per load clutters logs of many short runs
    path = Path(model)
    if not path.exists() and (model.startswith((".", "/", "~")) or len(path.parts) > 2):
        raise ScrlError(f"model checkpoint not found: {model!r} (give a local directory with "
                        f"config.json and model.safetensors, or a Hugging Face model id)")
    try:
        tok = AutoTokenizer.from_pretrained(model)
        policy = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    except OSError as e:
        raise ScrlError(f"could not load model {model!r}: {e}") from e
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return policy, tok


def read_metrics(path) -> list:
    """All step records of a metrics.jsonl file (list of dicts); [] if it does not exist."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class RunFolder:
    """A run's folder: config.json (the run's TrainConfig), metrics.jsonl (one line per step, written as
    it happens), checkpoint.pt (the state at the last checkpoint, written atomically), run.lock (the
    process training into it), sampler.json (the sampler's numerics) and machine.json (the CPUs it ran
    on). A finished run needs only config.json and metrics.jsonl to be read back."""

    def __init__(self, out_dir):
        self.path = Path(out_dir)

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    def records(self) -> list:
        """All step records logged so far (list of dicts)."""
        return read_metrics(self.metrics_path)

    def append(self, rec: dict) -> None:
        """Log one step's record (a line of metrics.jsonl, flushed at once)."""
        with open(self.metrics_path, "a") as f:
            f.write(json.dumps(rec) + "\n")

    def save_checkpoint(self, state: dict) -> None:
        """Write checkpoint.pt atomically: an interrupt never leaves half a file."""
        tmp = self.path / "checkpoint.pt.tmp"
        torch.save(state, tmp)
        os.replace(tmp, self.path / "checkpoint.pt")

    def load_checkpoint(self, cfg: "TrainConfig") -> Optional[dict]:
        """The saved state if the folder holds a checkpoint (then the saved config must match `cfg` in
        every field that changes results, else ScrlError; a field newer than the saved run counts as its
        default), with metrics.jsonl cut back to the checkpoint's step; None, with metrics.jsonl removed,
        if it holds none. Writes cfg to config.json either way."""
        mine = json.loads(json.dumps(dataclasses.asdict(cfg)))
        cfg_path, ckpt = self.path / "config.json", self.path / "checkpoint.pt"
        state = None
        if ckpt.exists():
            diff = self.config_diff(cfg)
            if diff:
                raise ScrlError(f"{self.path} holds a run with a different config {diff}; "
                                f"use another out_dir or delete it")
            state = torch.load(ckpt, weights_only=False)
            kept = [r for r in self.records() if r["step"] < state["step"]]
            self.metrics_path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        else:
            self.metrics_path.unlink(missing_ok=True)
        cfg_path.write_text(json.dumps(mine, indent=1))
        return state

    def config_diff(self, cfg: "TrainConfig") -> dict:
        """{field: (saved, cfg's)} for every field that changes results and differs between the folder's
        config.json and `cfg` (a field newer than the saved run counts as its default); {} when they
        agree or the folder holds no config.json."""
        cfg_path = self.path / "config.json"
        saved = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
        default = json.loads(json.dumps(dataclasses.asdict(TrainConfig())))
        mine = json.loads(json.dumps(dataclasses.asdict(cfg)))
        same = lambda k, a, b: model_key(a) == model_key(b) if k == "model" else a == b  # noqa: E731
        return {k: (saved.get(k, default[k]), v) for k, v in mine.items()
                if k not in RUN_BOOKKEEPING and not same(k, saved.get(k, default[k]), v)}

    def finished(self, cfg: "TrainConfig") -> Optional[list]:
        """The step records of a finished run of `cfg`, else None. Finished: config.json holds `cfg`
        (`config_diff` empty) and metrics.jsonl has steps 0, 1, ..., cfg.steps − 1. No checkpoint is
        needed, so a folder committed with only config.json and metrics.jsonl (results kept across
        machines) is read back instead of trained again."""
        if not (self.path / "config.json").exists() or self.config_diff(cfg):
            return None
        recs = self.records()
        return recs if [r["step"] for r in recs] == list(range(cfg.steps)) else None

    def record_machine(self) -> None:
        """Add this machine's CPU to machine.json (a list: a run resumed elsewhere lists every CPU it
        ran on). Per-run numbers hold on one CPU model only (float round-off in the sampler flips sampled
        tokens), so an analysis that pools machines can group runs by it."""
        path, cpu = self.path / "machine.json", cpu_record()
        seen = json.loads(path.read_text()) if path.exists() else []
        if cpu not in seen:
            path.write_text(json.dumps(seen + [cpu], indent=1))

    @contextlib.contextmanager
    def lock(self):
        """Hold run.lock (this process's id) while training: two processes training into one folder
        would interleave its metrics and checkpoints. A lock left by a process that no longer runs is
        taken over. Raises ScrlError if a live process holds it."""
        lock = self.path / "run.lock"
        for _ in range(2):
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                try:
                    pid = int(lock.read_text() or 0)
                    os.kill(pid, 0)  # raises if no such process
                except (ValueError, ProcessLookupError, FileNotFoundError):
                    lock.unlink(missing_ok=True)  # stale: its process is gone
                    continue
                except PermissionError:  # a live process of another user
                    pass
                raise ScrlError(f"{self.path} is being trained by process {pid} right now; wait for it, "
                                f"or give this run another out_dir")
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            break
        else:
            raise ScrlError(f"could not claim {lock}")
        try:
            yield
        finally:
            lock.unlink(missing_ok=True)


def cpu_record() -> dict:
    """This machine's CPU: {"model": its model name (Linux's /proc/cpuinfo, else platform.processor()), "isa":
    "amx" | "avx512" | "avx2" | "other" (the widest vector extension, by torch's own checks, as
    `cpu_supports_fp8_kv`), "torch": torch's version}."""
    import platform

    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor() or "unknown"
    isa = ("amx" if torch.cpu._is_amx_tile_supported() else "avx512" if torch.cpu._is_avx512_supported()
           else "avx2" if torch.cpu._is_avx2_supported() else "other")
    return dict(model=model, isa=isa, torch=torch.__version__)


def make_sampler(cfg: "TrainConfig", model_config, k: int):
    """The rollout engine of a run: `TorchSampler` or `VLLMSampler` with the config's numerics."""
    if cfg.sampler == "torch":
        return TorchSampler(model_config, precision=cfg.sampler_precision, k=k, temperature=cfg.temperature,
                            noise_std=cfg.noise_std, staleness=cfg.staleness, seed=cfg.seed,
                            fp8_backend=cfg.fp8_backend, kv_cache=cfg.kv_cache,
                            staleness_schedule=cfg.staleness_schedule)
    return VLLMSampler(cfg.model, precision=vllm_precision_for(cfg.sampler_precision, cfg.vllm_precision),
                       k=k, temperature=cfg.temperature, seed=cfg.seed, noise_std=cfg.noise_std,
                       staleness=cfg.staleness, staleness_schedule=cfg.staleness_schedule, kv_cache_gib=0.5)


class Trainer:
    """A run's state: the policy, its optimizer, the sampler, the random streams and the run folder.
    Its `train_step` is `core.rl_step` on the next prompts, with clean evaluations around it.

    Paired random streams: a seed gives every arm the same prompt order (`gen`, one draw of the same
    size per step), the same sampling seed at each step and the same noise draw (seeded by cfg.seed in
    the sampler); sampling never advances the prompt stream. Raises ScrlError for a missing model or
    a head size k larger than the vocabulary (the config checks everything else)."""

    def __init__(self, cfg: TrainConfig):
        self.cfg, self.run = cfg, RunFolder(cfg.out_dir)
        torch.manual_seed(cfg.seed)
        self.policy, self.tok = load_policy(cfg.model)
        V = self.policy.config.vocab_size
        k = min(128, V) if cfg.k is None else cfg.k
        if k > V:
            raise ScrlError(f"head size k={cfg.k} is larger than the vocabulary ({V} tokens)")
        self.sampler = make_sampler(cfg, self.policy.config, k)
        # held-out prompts for the clean evaluation (one set for every seed and arm), never trained on
        self.eval_set = make_task_dataset(cfg.eval_prompts, seed=EVAL_SEED) if cfg.eval_every > 0 else None
        held_out = self.eval_set["prefix"] if self.eval_set is not None else ()
        self.dataset = make_task_dataset(cfg.n_prompts, seed=cfg.seed, exclude=held_out)
        self.prompt_ids = [encode_prompt(self.tok, p) for p in self.dataset["prompt"]]
        if self.eval_set is not None:  # the trainer's own policy as the sampler: no mismatch
            self.eval_prompt_ids = [encode_prompt(self.tok, p) for p in self.eval_set["prompt"]]
            self.eval_sampler = TorchSampler(self.policy.config, precision="fp32", k=1,
                                             temperature=cfg.temperature)
        opt_cls = torch.optim.SGD if cfg.optimizer == "sgd" else torch.optim.Adam
        self.opt = opt_cls(self.policy.parameters(), lr=cfg.lr)
        self.gen = torch.Generator().manual_seed(cfg.seed)  # the prompt stream
        self.step = 0
        self.eos_id = self.tok.eos_token_id
        st = self.sampler.settings  # the sampler's numerics, repeated in every metrics line
        self._sampler_record = dict(sampler_engine=st["engine"], sampler_precision=st["precision"],
                                    sampler_weights=st["weights"], sampler_kv_cache=st["kv_cache_dtype"])
        if "fp8_backend" in st:  # torch sampler only: how its FP8 GEMMs run
            self._sampler_record["fp8_backend"] = st["fp8_backend"]
        self.run.path.mkdir(parents=True, exist_ok=True)  # only once everything above has worked

    @property
    def metrics_path(self) -> Path:
        return self.run.metrics_path

    def state_dict(self) -> dict:
        """Everything a resumed run needs to continue as if never stopped."""
        return dict(step=self.step, policy=self.policy.state_dict(), opt=self.opt.state_dict(),
                    gen=self.gen.get_state(), torch_rng=torch.get_rng_state(),
                    sampler_queue=self.sampler.queue_state())

    def save_checkpoint(self) -> None:
        self.run.save_checkpoint(self.state_dict())

    def resume(self) -> None:
        """Continue from the run folder's checkpoint if it has one (`RunFolder.load_checkpoint`), else
        start afresh: the sampler gets the starting weights."""
        state = self.run.load_checkpoint(self.cfg)
        if state is None:
            self.sampler.push_weights(self.policy.state_dict())
            return
        self.policy.load_state_dict(state["policy"])
        self.opt.load_state_dict(state["opt"])
        self.gen.set_state(state["gen"])
        torch.set_rng_state(state["torch_rng"])
        self.sampler.restore_queue(state["sampler_queue"])
        self.step = state["step"]

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Clean evaluation: the trainer's own policy (an exact float32 copy as the sampler, no noise,
        no staleness) on the held-out prompts, one completion each, with the same sampling seed at
        every evaluation and in every arm of a seed. Returns eval_reward, eval_reward_std and
        eval_len (mean completion length, tokens)."""
        self.eval_sampler.push_weights(self.policy.state_dict())
        g = torch.Generator().manual_seed(EVAL_SEED * 1_000_003 + self.cfg.seed)
        ro = self.eval_sampler.generate(self.eval_prompt_ids, self.cfg.max_new_tokens, self.eos_id,
                                        self.tok.pad_token_id, generator=g)
        r = task_rewards(self.tok, ro, self.cfg.names_target)
        return dict(eval_reward=r.mean().item(), eval_reward_std=r.std().item(),
                    eval_len=ro.completion_mask.sum(1).float().mean().item())

    def train_step(self) -> dict:
        """One RL step (`core.rl_step`) on the next prompts; returns its metrics record."""
        cfg, t0 = self.cfg, time.time()
        evals = {}
        if self.eval_set is not None and self.step == 0:  # the starting point, same for every arm
            evals = {f"{k}_init": v for k, v in self.evaluate().items()}
        # prompts_per_step distinct prompts, each repeated G times (a GRPO group)
        pick = torch.randperm(len(self.prompt_ids), generator=self.gen)[:cfg.prompts_per_step]
        prompts = [self.prompt_ids[i] for i in pick.tolist() for _ in range(cfg.group_size)]
        g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + self.step)  # this step's sampling seed
        try:
            metrics = rl_step(self.policy, self.opt, self.sampler, self.tok, prompts, cfg.step_config(), g,
                              measure=cfg.measure_drift and isinstance(self.sampler, TorchSampler))
        except ScrlError as e:
            raise ScrlError(f"step {self.step}: {e}; last good checkpoint kept in {self.run.path}") from e
        rec = dict(step=self.step, **metrics, **evals, **self._sampler_record)
        self.step += 1
        if self.eval_set is not None and (self.step % cfg.eval_every == 0 or self.step == cfg.steps):
            rec.update(self.evaluate())  # the policy after this step's update (self.step updates)
        rec["seconds"] = time.time() - t0
        return rec

    def train(self) -> list:
        """Run (or resume) to cfg.steps; append one JSON line per step; return all step records."""
        with self.run.lock():
            self.resume()
            self.run.record_machine()
            (self.run.path / "sampler.json").write_text(json.dumps(self.sampler.settings, indent=1))
            bar = progress_bar(total=self.cfg.steps, initial=self.step, desc=self.run.path.name,
                               disable=not self.cfg.progress, leave=False)
            try:
                while self.step < self.cfg.steps:
                    rec = self.train_step()
                    self.run.append(rec)
                    bar.update(1)
                    bar.set_postfix(reward=f"{rec['reward']:.3f}", kl=f"{rec['kl_sampled']:.4f}")
                    if self.step % self.cfg.checkpoint_every == 0 or self.step == self.cfg.steps:
                        self.save_checkpoint()
            finally:
                bar.close()  # before any error message, so it is not printed on the bar's line
            return self.run.records()


def progress_bar(iterable=None, **kw):
    """A text tqdm bar: live in a terminal and in JupyterLab, and a saved notebook keeps its last
    state as plain text (a widget bar shows "Error displaying widget" once the notebook is reopened).
    In a Jupyter kernel it writes to stdout, so it is not shown as an error block."""
    import sys

    from tqdm.std import tqdm

    in_kernel = "ipykernel" in sys.modules
    return tqdm(iterable, file=sys.stdout if in_kernel else sys.stderr, ncols=100 if in_kernel else None,
                **kw)


def train(cfg: TrainConfig) -> list:
    """Run or resume one RL run described by `cfg`; returns its per-step metric records. A finished run
    (`RunFolder.finished`) is read back without loading the model."""
    done = RunFolder(cfg.out_dir).finished(cfg)
    return done if done is not None else Trainer(cfg).train()


def _train_one(cfg: TrainConfig) -> list:
    return train(dataclasses.replace(cfg, progress=False))


def _one_thread(fn, item):
    torch.set_num_threads(1)
    return fn(item)


def parallel_map(fn, items: list, workers: int = 2, desc: str = "runs", label=str) -> list:
    """[fn(item) for item in items], `workers` at a time in spawned processes of one CPU thread each, with a bar
    over items (in this process, in order, when workers <= 1). fn must be importable (a module-level function).

    Returns the results in the items' order. A failed item does not stop the others: after they finish, raises
    ScrlError listing each failure as label(item) and its error. Workers are spawned, so a script that calls this
    needs the ``if __name__ == "__main__":`` guard (notebooks do not).
    """
    from concurrent.futures import ProcessPoolExecutor, as_completed
    import functools
    import multiprocessing as mp

    results, errors = [None] * len(items), []
    if workers <= 1:
        for i, item in enumerate(progress_bar(items, desc=desc)):
            try:
                results[i] = fn(item)
            except Exception as e:  # keep going: the other items' results are worth keeping
                errors.append(f"{label(item)}: {type(e).__name__}: {e}")
    elif items:
        with ProcessPoolExecutor(min(workers, len(items)), mp_context=mp.get_context("spawn")) as pool:
            futs = {pool.submit(functools.partial(_one_thread, fn), item): i for i, item in enumerate(items)}
            for fut in progress_bar(as_completed(futs), total=len(futs), desc=desc):
                i = futs[fut]
                try:
                    results[i] = fut.result()
                except Exception as e:
                    errors.append(f"{label(items[i])}: {type(e).__name__}: {e}")
    if errors:
        raise ScrlError(f"{len(errors)} of {len(items)} failed:\n  " + "\n  ".join(errors))
    return results


def train_many(configs: list, workers: int = 2) -> list:
    """Run (or resume) several runs, `workers` at a time in separate processes of one CPU thread
    each (`parallel_map`: small models use two cores better as two runs than as one run on two threads).

    Returns the per-step records of each config, in order. A failed run raises after the others
    finish, naming its out_dir; finished runs keep their metrics and checkpoints. Workers are
    spawned, so a script that calls this needs the ``if __name__ == "__main__":`` guard
    (notebooks do not).
    """
    if workers <= 1:
        return [train(c) for c in configs]
    return parallel_map(_train_one, configs, workers=workers, desc="runs", label=lambda c: c.out_dir)


def run_grid(jobs: dict, workers: int = 2) -> dict:
    """Run (or resume) every config of `jobs` (any key → TrainConfig), `workers` at a time
    (`train_many`); returns {key: per-step records}. Prints the runs' CPU-thread minutes."""
    results = dict(zip(jobs, train_many(list(jobs.values()), workers=workers)))
    minutes = sum(r["seconds"] for recs in results.values() for r in recs) / 60
    print(f"{len(jobs)} runs, {minutes:.1f} CPU-thread minutes")
    return results


# ═════════════════════════════════════════════════════════════════════════════════════════════════
# The command line: python -m scrl_min
# ═════════════════════════════════════════════════════════════════════════════════════════════════
def _parse_bool(s: str) -> bool:
    """A bool flag's value: 1/true/yes/on or 0/false/no/off (any case); argparse names the flag on an error."""
    import argparse

    if s.lower() in ("1", "true", "yes", "on"):
        return True
    if s.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false (1/0, yes/no, on/off), got {s!r}")


def _one_line_parser(**kw):
    """argparse's parser whose usage errors are one line (its default prints the 30-line usage first)."""
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message):
            self.exit(2, f"{self.prog}: error: {message} (--help lists the flags)\n")

    return Parser(**kw)


def main(argv=None) -> None:
    """`python -m scrl_min`: one RL run from TrainConfig's fields as flags. Every error is one line on stderr,
    before anything is written: a bad flag value (argparse, exit status 2) or a bad config or run (ScrlError,
    exit status 1; also --steps 0, which TrainConfig allows for a Trainer built only for its task)."""
    import argparse
    import sys

    ap = _one_line_parser(
        prog="python -m scrl_min", description=__doc__.split("\n")[0], allow_abbrev=False,
        epilog="An --arm preset sets sampler_precision, weighting and centering (and noise_std=0 for "
               "bf16, which refuses another σ); flags given explicitly override it, e.g. --arm tis "
               "--centering true is TIS + SC.")
    ap.add_argument("--arm", choices=sorted(ARMS), default=argparse.SUPPRESS,
                    help="named preset over the fields below: " + "; ".join(
                        f"{a}: " + ", ".join(f"{k}={v}" for k, v in p.items()) for a, p in ARMS.items()))
    for f in dataclasses.fields(TrainConfig):
        kw = dict(default=argparse.SUPPRESS, choices=CHOICES.get(f.name),
                  help=f"{f.metadata['help']} (default: {f.default}"
                       + (", or the --arm preset's)" if any(f.name in p for p in ARMS.values()) else ")"))
        if f.type in ("bool", bool):
            kw["type"] = _parse_bool
        elif f.name == "mis_band":
            kw.update(type=float, nargs=2)
        elif f.type in ("Optional[int]", "Optional[float]"):  # k, constant_reward: None unless a number is given
            kw["type"] = int if f.type == "Optional[int]" else float
        else:
            kw["type"] = type(f.default)
        ap.add_argument(f"--{f.name}", **kw)
    given = vars(ap.parse_args(argv))
    arm = given.pop("arm", None)
    try:
        cfg = arm_config(arm, **given) if arm else TrainConfig(**given)
        if cfg.steps < 1:
            raise ScrlError(f"--steps must be >= 1 for a run, got {cfg.steps}")
        recs = train(cfg)
    except ScrlError as e:
        sys.exit(f"python -m scrl_min: error: {e}")
    last = recs[-min(20, len(recs)):]
    kv = "" if cfg.kv_cache == "auto" else f" + {cfg.kv_cache} KV cache"
    name = f"{cfg.sampler_precision}{kv} sampler, weighting {cfg.weighting}, centering {cfg.centering}"
    print(f"{arm + ' (' + name + ')' if arm else name}: {len(recs)} steps, reward over the last {len(last)} steps "
          f"{sum(r['reward'] for r in last) / max(1, len(last)):.3f}  ({cfg.out_dir}/metrics.jsonl)")


