"""The package's shape and its traps: imports point one way (the method file imports no engine, driver or
statistics), `__all__` is what the notebooks and scripts use, a new TrainConfig field cannot rename every run
folder unnoticed, and the embedded model's path can be overridden from outside a checkout."""
import ast
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import scrl_min
from scrl_min.driver import HASHED_UNLESS_DEFAULT, RUN_BOOKKEEPING, TRAINER_VERSION

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "scrl_min"


def package_imports(path: Path) -> set:
    """The scrl_min modules a file imports (relative or absolute), by their file name without .py."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                out |= {node.module} if node.module else {a.name for a in node.names}
            elif node.module and node.module.startswith("scrl_min."):
                out.add(node.module.split(".")[1])
    return out - {"__init__"}


# ─── one way through the files ──────────────────────────────────────────────────────────────────
def test_imports_point_one_way_and_form_no_cycle():
    """errors ← logprobs, task ← core ← the samplers, the driver, stats: the method file imports no file beside
    it but its error types, log-prob machinery and task (the reward of rl_step), the task only the error types,
    and no two files import each other, directly or not."""
    graph = {p.stem: package_imports(p) for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert graph["errors"] == set() and graph["logprobs"] == {"errors"} and graph["task"] == {"errors"}
    assert graph["core"] == {"errors", "logprobs", "task"}, f"core.py imports {graph['core']}"
    assert graph["stats"] == {"core"}, f"stats.py imports {graph['stats']}"
    for name in ("formats", "torch_sampler", "vllm_engine", "driver", "stats", "trl"):
        users = {m for m, deps in graph.items() if name in deps}
        assert not users & {"core", "logprobs", "task"}, f"{name}.py is imported by {users}"

    def reach(start, seen=()):
        for dep in graph.get(start, ()):
            if dep in seen:
                continue
            yield dep
            yield from reach(dep, (*seen, dep))

    cycles = sorted(m for m in graph if m in set(reach(m)))
    assert not cycles, f"import cycle through {cycles}"


def test_the_method_file_starts_with_the_method():
    """core.py: f(r) of eq. SC within the first ~110 lines (after the docstring, the constants and `Rollout`),
    the input checks after the method, the file shorter than the 890 lines it had before the split."""
    lines = (PACKAGE / "core.py").read_text().splitlines()
    first = {name: next(i for i, line in enumerate(lines, 1) if line.startswith(f"def {name}(")) for name in
             ("importance_weight", "score_centered_pg_loss", "rl_step", "validate_rollout")}
    assert first["importance_weight"] <= 120, first
    assert first["score_centered_pg_loss"] < first["rl_step"] < first["validate_rollout"], first
    assert len(lines) < 890


def names_imported_from_scrl_min(path: Path) -> set:
    """Names a notebook's or script's code takes from the package: `from scrl_min import ...` and
    `scrl_min.name`."""
    out = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "scrl_min":
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "scrl_min":
            out.add(node.attr)
    return out


def test_all_is_what_the_notebooks_and_scripts_use():
    """`__all__` lists exactly the names notebooks (their jupytext .py) and scripts import from `scrl_min`,
    and every one of them is importable."""
    used = set()
    for path in [*sorted((REPO / "notebooks").glob("*.py")), *sorted((REPO / "scripts").rglob("*.py"))]:
        used |= names_imported_from_scrl_min(path)
    used = {n for n in used if not n.startswith("__")} - {"trl"}  # trl: a submodule, imported on its own
    missing = sorted(n for n in used if not hasattr(scrl_min, n))
    assert not missing, f"notebooks or scripts import {missing}, which scrl_min does not have"
    assert set(scrl_min.__all__) == used, (f"add to scrl_min.__all__: {sorted(used - set(scrl_min.__all__))}; "
                                           f"no notebook or script uses: {sorted(set(scrl_min.__all__) - used)}")


# ─── traps ──────────────────────────────────────────────────────────────────────────────────────
# The TrainConfig fields config_id hashes, and those it hashes only away from their default. A field added to
# TrainConfig must be decided on here (see the message of the test below).
HASHED_FIELDS = {
    "advantage_mode", "centering", "constant_reward", "eval_every", "eval_prompts", "fp8_backend", "group_size", "k", "kv_cache",
    "lr", "max_grad_norm", "max_new_tokens", "measure_drift", "mis_band", "model", "n_prompts", "names_target",
    "noise_std", "optimizer", "prompts_per_step", "sampler", "sampler_precision", "seed", "staleness",
    "staleness_schedule",
    "temperature", "tis_cap", "vllm_precision", "weight_level", "weighting"}
UNLESS_DEFAULT = {"kv_cache", "constant_reward", "staleness_schedule"}
# config_id of every arm (model given as a relative path: the default is the checkout's absolute path)
ARM_IDS = {"bf16": "4ab6877d", "plain": "7aa14ebf", "tis": "a7bd03c6", "mis": "d607cda6", "sc": "503fc9a5",
           "sc_tis": "f5c8a63e", "sc_mis": "ea64a3bd"}


def test_config_id_hashes_the_fields_decided_on():
    """A new TrainConfig field renames every run folder (config_id hashes it) unless it is decided on."""
    fields = {f.name for f in dataclasses.fields(scrl_min.TrainConfig)}
    hashed = fields - set(RUN_BOOKKEEPING)
    new, gone = sorted(hashed - HASHED_FIELDS), sorted(HASHED_FIELDS - hashed)
    assert not new and not gone and set(HASHED_UNLESS_DEFAULT) == UNLESS_DEFAULT, (
        f"TrainConfig fields that config_id hashes changed (new {new}, gone {gone}; HASHED_UNLESS_DEFAULT "
        f"{sorted(HASHED_UNLESS_DEFAULT)}). Decide, in scrl_min/driver.py, for each new field: does not change "
        f"a run's results → add it to RUN_BOOKKEEPING; changes results, and runs made before it keep their "
        f"folders → add it to HASHED_UNLESS_DEFAULT (hashed only away from its default); changes every run → "
        f"bump TRAINER_VERSION (every cached run is redone). Then update HASHED_FIELDS / UNLESS_DEFAULT in "
        f"tests/test_structure.py")


def test_config_ids_of_the_arms_are_unchanged():
    """The run folders of every arm keep their names (a field added at its default, a reordered config or a
    changed hash would silently orphan the cached runs)."""
    ids = {a: scrl_min.config_id(scrl_min.arm_config(a, model="models/qwen3-tiny-code")) for a in scrl_min.ARMS}
    assert TRAINER_VERSION == 2 and ids == ARM_IDS, (
        f"config ids changed: {ids}; every cached run folder would be orphaned. If that is intended, bump "
        f"TRAINER_VERSION and update ARM_IDS here; if not, see test_config_id_hashes_the_fields_decided_on")


def test_run_folder_names_do_not_depend_on_where_the_checkout_is(tmp_path):
    """The embedded model's absolute path (wherever the repository is cloned) names the same run folder as its
    relative path, so runs committed from one clone are found by another; a model outside the checkout keeps its
    own path. A saved config.json naming the model by another clone's absolute path is the same config."""
    from scrl_min.driver import RunFolder, model_key

    default = scrl_min.arm_config("sc", model=str(scrl_min.DEFAULT_MODEL_PATH))
    relative = scrl_min.arm_config("sc", model="models/qwen3-tiny-code")
    assert scrl_min.config_id(default) == scrl_min.config_id(relative) == ARM_IDS["sc"]
    assert model_key(str(tmp_path / "ckpt")) == str(tmp_path / "ckpt")
    assert scrl_min.config_id(scrl_min.arm_config("sc", model=str(tmp_path / "ckpt"))) != ARM_IDS["sc"]
    saved = json.loads(json.dumps(dataclasses.asdict(relative)))
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert RunFolder(tmp_path).config_diff(default) == {}
    assert "model" in RunFolder(tmp_path).config_diff(scrl_min.arm_config("sc", model=str(tmp_path / "ckpt")))
    # a record committed from a clone elsewhere (results/*/config.json name the model by that clone's absolute
    # path): the same config here, so `finished` reads the run back instead of training it again
    saved["model"] = "/elsewhere/some-clone/models/qwen3-tiny-code"
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert RunFolder(tmp_path).config_diff(default) == {}
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": i}) + "\n" for i in range(default.steps)))
    assert len(RunFolder(tmp_path).finished(default)) == default.steps
    assert model_key("/elsewhere/models/my-model") == "/elsewhere/models/my-model"


def test_committed_run_records_are_read_back_in_a_clone_elsewhere():
    """Every run record committed under results/ is finished for its own config in this checkout, whatever the
    absolute path of the clone that trained it."""
    from scrl_min.driver import RunFolder

    folders = sorted(p.parent for p in (REPO / "results").glob("*/*/config.json"))
    assert folders
    fields = {f.name for f in dataclasses.fields(scrl_min.TrainConfig)}
    for folder in folders:
        saved = json.loads((folder / "config.json").read_text())
        cfg = scrl_min.TrainConfig(**{k: v for k, v in saved.items() if k in fields})
        cfg = dataclasses.replace(cfg, model=str(scrl_min.DEFAULT_MODEL_PATH))
        assert RunFolder(folder).config_diff(cfg) == {}, folder


def test_model_path_follows_the_environment_variable(tmp_path):
    """SCRL_MIN_MODEL overrides the embedded checkpoint's path (a package installed outside its checkout has
    no models/ folder beside it); without it, the checkout's models/qwen3-tiny-code."""
    code = "import scrl_min; print(scrl_min.DEFAULT_MODEL_PATH); print(scrl_min.TrainConfig().model)"
    env = {k: v for k, v in os.environ.items() if k != "SCRL_MIN_MODEL"}
    run = lambda e: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e,  # noqa: E731
                                   cwd=tmp_path, check=True).stdout.split("\n")[:2]
    other = str(tmp_path / "my-checkpoint")
    assert run({**env, "SCRL_MIN_MODEL": other}) == [other, other]
    default = str(Path(scrl_min.__file__).resolve().parent.parent / "models" / "qwen3-tiny-code")
    assert run(env) == [default, default]


def test_no_script_imports_from_tests_and_benchmarks_live_in_scripts_bench():
    """Scripts, the deck and the benchmarks import scrl_min and libraries, never the test suite (its fakes and
    oracles are the tests' own); every benchmark script sits in scripts/bench/. The one exception is
    scripts/gpu_check.py, the test suite's GPU leg (it runs tests/test_trl.py's reference on the device machine)."""
    sources = [p for p in sorted((REPO / "scripts").rglob("*.py")) + sorted((REPO / "slides").glob("*.py"))
               if p.name != "gpu_check.py"]
    assert len(sources) > 5
    for path in sources:
        src = path.read_text()
        tree = ast.parse(src)
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not any(m.split(".")[0] in ("tests", "conftest", "vllm_fakes") or m.startswith("test_") for m in names), \
            f"{path.relative_to(REPO)} imports from the test suite: {sorted(names)}"
        assert '/ "tests"' not in src and "'tests'" not in src, f"{path.relative_to(REPO)} puts tests/ on its path"
    assert not list((REPO / "scripts").glob("bench*.py")), "benchmark scripts belong in scripts/bench/"
    assert (REPO / "scripts" / "bench" / "bench_step.py").is_file()
