"""scrl-min: score centering for RL with a mismatched sampler.

The method is `core.py` (read it top to bottom; its log-prob machinery is `logprobs.py`). Beside it, one
file per reason to change: the task (prompts, the verifier's reward, where the policy is) is `task.py`; the
quantized formats and the FP8 KV cache are `formats.py`; the samplers that produce the method's input are
`torch_sampler.py` and `vllm_engine.py`; configs, the Trainer and runs over seeds are `driver.py`; the drift
alone (the exact expected update of a constant advantage, iterated) is `drift.py`; statistics over seeds and
figure checks are `stats.py`; TRL's GRPOTrainer with score centering is `scrl_min.trl` (imported on its own: it
imports TRL). Notebooks and scripts import the names below from `scrl_min`, never from a file, so a definition
can move between files. `__all__` lists what the notebooks and scripts use; the other names here are the
documented API (docs/api.md) and what the tests and trl.py import.
"""
from .core import (ADVANTAGE_MODES, EMPTY_LOGP, RHO_EPS, TAIL_TOL, WEIGHTINGS, Rollout, RolloutError, ScrlError,
                   centering_coefficients, centering_term, compute_advantages, drift_and_signal, importance_weight,
                   reduce_loss, rl_step, score_centered_pg_loss, score_centered_pg_loss_options, tail_alpha,
                   trainer_logprobs, validate_rollout)
from .task import (DEFAULT_MODEL_PATH, PYTHON_NAMES, REPO_ROOT, distinct_names_reward, encode_prompt, make_task_dataset,
                   task_user_message)
from .logprobs import gather_logprobs, lm_head_logprobs
from .formats import (FORMATS, GRIDS, KV_CACHES, KV_SCALE, PRECISIONS, QuantLinear, code_values, dequantize,
                      fp8_kv_cache, fp8_kv_round, quantize, reserved_kv_cache)
from .torch_sampler import TorchSampler
from .vllm_engine import PROBE_TOL, VLLMSampler, cpu_supports_fp8_kv, dense_from_flat, vllm_precision_for
from .driver import (ARMS, EVAL_SEED, TrainConfig, Trainer, arm_config, config_id, cpu_record, load_policy,
                     parallel_map, progress_bar, read_metrics, run_grid, seeds_named_elsewhere, train, train_many,
                     with_run_dir)
from .drift import eos_stats, expected_update, iterate_drift, iterated_drift_runs
from .stats import (ALPHA, ARM_COLORS, COLLAPSE_STD, MARGIN, band_plot, check_layout, collapsed, curve_auc, decide_family,
                    eval_curve, final_reward, forest_plot, heterogeneity, holm, mcnemar_exact, mean_ci95,
                    moving_average, p_text, paired_contrasts, paired_test, per_seed_plot, seeds_to_decide,
                    test_differences, test_family)

# what the notebooks and scripts import (tests/test_structure.py checks that the list is exactly that)
__all__ = [
    # the method and its task (core.py, logprobs.py, task.py)
    "DEFAULT_MODEL_PATH", "PYTHON_NAMES", "REPO_ROOT", "RHO_EPS", "TAIL_TOL", "WEIGHTINGS",
    "Rollout", "RolloutError", "ScrlError", "centering_term", "compute_advantages", "distinct_names_reward",
    "drift_and_signal", "encode_prompt", "gather_logprobs", "importance_weight", "lm_head_logprobs",
    "make_task_dataset", "reduce_loss", "rl_step", "score_centered_pg_loss", "task_user_message", "trainer_logprobs",
    "validate_rollout",
    # the samplers (formats.py, torch_sampler.py, vllm_engine.py)
    "FORMATS", "KV_CACHES", "PRECISIONS", "PROBE_TOL", "QuantLinear", "TorchSampler", "VLLMSampler",
    "cpu_supports_fp8_kv", "dense_from_flat", "dequantize", "vllm_precision_for",
    # runs (driver.py)
    "ARMS", "EVAL_SEED", "TrainConfig", "Trainer", "arm_config", "cpu_record", "load_policy", "progress_bar", "run_grid",
    "seeds_named_elsewhere", "train_many", "with_run_dir",
    # the drift alone (drift.py)
    "eos_stats", "expected_update", "iterated_drift_runs",
    # statistics and figures (stats.py)
    "ALPHA", "ARM_COLORS", "COLLAPSE_STD", "MARGIN", "band_plot", "check_layout", "collapsed", "curve_auc", "decide_family",
    "eval_curve",
    "final_reward", "forest_plot", "heterogeneity", "holm", "mcnemar_exact", "mean_ci95", "moving_average", "p_text",
    "paired_contrasts", "per_seed_plot", "seeds_to_decide", "test_differences", "test_family",
]
