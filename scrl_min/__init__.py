"""scrl-min: score centering for RL with a mismatched (FP8) sampler. The method lives in `core.py`."""
from .core import (centering_coefficients, centering_term, score_centered_pg_loss_options, ADVANTAGE_MODES, ARMS, DEFAULT_MODEL_PATH, FORMATS, KV_CACHES, LEVELS, PRECISIONS, PYTHON_NAMES,
                   WEIGHTINGS, FP8Linear, QuantLinear, Rollout, RolloutError, ScrlError, TorchSampler, TrainConfig,
                   VLLMSampler, Trainer, arm_config, compute_advantages, drift_and_signal, encode_prompt, eval_curve, config_id, distinct_names_reward,
                   fp8_kv_cache, gather_logprobs, importance_weight, lm_head_logprobs, load_policy,
                   make_task_dataset, mean_ci95, moving_average, quantize_fp8, read_metrics, reduce_loss, score_centered_pg_loss, tail_alpha,
                   task_user_message, train, train_many, trainer_logprobs, validate_rollout, vllm_precision_for,
                   with_run_dir)

__all__ = [n for n in dir() if not n.startswith("_")]
