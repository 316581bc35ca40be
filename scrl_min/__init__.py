"""scrl-min: score centering for RL with a mismatched sampler.

The method is `core.py` (read it top to bottom); the samplers that produce its input are `engines.py`;
configs, the Trainer and runs over seeds are `driver.py`; statistics over seeds and figure checks are
`stats.py`; TRL's GRPOTrainer with score
centering is `scrl_min.trl` (imported on its own: it imports TRL). Notebooks and scripts import the
names below from `scrl_min`, never from a file, so a definition can move between files.
"""
from .core import (ADVANTAGE_MODES, EMPTY_LOGP, LEVELS, MAX_LOG_RATIO, PYTHON_NAMES, RHO_EPS, TAIL_TOL, WEIGHTINGS,
                   Rollout, RolloutError, ScrlError, centering_coefficients, centering_term, compute_advantages,
                   distinct_names_reward, drift_and_signal, encode_prompt, gather_logprobs, importance_weight,
                   lm_head_logprobs, make_task_dataset, reduce_loss, rl_step, score_centered_pg_loss,
                   score_centered_pg_loss_options, tail_alpha, tail_rounding, task_rewards, task_user_message,
                   trainer_logprobs, validate_rollout)
from .engines import (DEFAULT_MODEL_PATH, FORMATS, FP8_BACKEND, FP8_BACKENDS, GRIDS, KV_CACHES, KV_SCALE, PRECISIONS,
                      PROBE_TOL, REPO_ROOT, SAMPLERS, VLLM_PRECISIONS, QuantLinear, TorchSampler, VLLMSampler,
                      code_values, cpu_supports_fp8_kv, dense_from_flat, dequantize, fp8_kv_cache, fp8_kv_round, quantize,
                      reserved_kv_cache, vllm_precision_for)
from .driver import (ARMS, EVAL_SEED, OPTIMIZERS, RunFolder, TrainConfig, Trainer, arm_config, config_id, load_policy,
                     main, make_sampler, progress_bar, read_metrics, run_grid, train, train_many, with_run_dir)
from .stats import (COLLAPSE_STD, band_plot, check_layout, collapsed, curve_auc, eval_curve, final_reward, holm,
                    mcnemar_exact, mean_ci95, moving_average, p_text, paired_contrasts)

__all__ = [n for n in dir() if not n.startswith("_")]
