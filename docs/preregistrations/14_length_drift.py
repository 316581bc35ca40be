# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 14 · Length drift (claim C7): pre-registration and the one-step prediction
#
# *Committed on 2026-12-03 as a pre-registration record, before any training run of its experiment. It becomes
# `notebooks/14_length_drift` (listed in the README's reading order, with a CI entry) when the constant-reward
# option and its runs land; until then it lives here, outside the notebook tests.*
#
# The article's claim C7: under a mismatched sampler the plain update's drift moves the length of the
# completions, and score centering (SC) removes that drift. The task's reward pays for length (more
# distinct names in a longer completion), so the training notebooks cannot tell drift from signal. With
# a constant reward the signal $\mathrm{Cov}_q(A, s)$ is exactly zero and plain's update is pure drift,
# $\mathbb{E}_q[A]\,\mu$ at every prefix, so anything that moves the end-of-sequence (EOS) probability
# is drift.
#
# This notebook holds the **design of the paired-seed experiment, written before any run**, and the
# **prediction from one exact drift step**: computed here without training. The training runs need a
# constant-reward option in the task (a `TrainConfig` field, hashed only when it differs from its
# default so that existing run ids do not change). That option is not in `scrl_min` yet, so the runs and
# their section are not here yet.
#
# **Run time and hardware:** CPU only, no GPU; the prediction takes about 2 minutes on 2 CPU cores.
# The defaults write `runs/figures/14_length_drift.{png,json}`. Run it headless with
# `python scripts/run_notebooks.py notebooks/14_length_drift.ipynb`.

# %% [markdown]
# ## Parameters

# %% tags=["parameters"]
model = "default"  # policy: "default" (embedded tiny Qwen3, V 2048), a local checkpoint or an HF model id
seed = 0  # seeds the sampler's weight noise, the drift batches and the held-out trajectories
sampler_format = "fp8"  # the headline sampler: TorchSampler precision
sampler_noise = 0.1  # σ: relative weight noise on the sampler
lr = 0.5  # SGD learning rate of the training runs
mean_advantage = 0.15  # E[A] under the constant reward (raw): the drift step is lr × E[A] × μ (lr E[A] = 0.075)
k = 128  # SC's head, tokens
max_new_tokens = 96  # completion budget of the length experiment, tokens
prompts_per_step = 8  # distinct prompts per batch
group_size = 4  # completions per prompt
drift_batches = 4  # sampler batches whose prefixes define the expected drift step
heldout_prompts = 32  # held-out prompts (the evaluation set) whose on-policy trajectories give the fixed prefixes
steps = 60  # updates of the planned runs (the naive 60-step extrapolation of the prediction)
figures_dir = "runs/figures"  # figure and its numbers, relative to the repo root

# %% [markdown]
# ## 1 · The design, declared before any run
#
# * **Task**: the code-names task with a **constant reward** (every completion earns the same reward, so
#   raw advantages are a constant $A = E[A]$ and group-centred ones are 0; runs use raw advantages),
#   and `names_target = 1`. The budget is 96 tokens, so EOS has room to move.
# * **Arms** (paired by seed: same prompts and sampler noise): **plain** and **SC (k = 128)** at the
#   headline sampler (FP8 + 10% weight noise), and **bf16** (no mismatch, plain loss) as the reference.
#   About 60 steps, SGD lr 0.5, the trainer's batch (8 prompts × 4 completions).
# * **Seeds**: at least 8 paired seeds; more if the power computation asks. Its input, the seed-to-seed sd
#   of the primary metric, is not known before a pilot. The pilot: 3 seeds of plain and SC, not reused.
#   The count is then n = ((z_0.975 + z_0.9) sd / Δ)² with Δ the predicted 60-step effect below, at
#   least 8.
# * **Primary metric**: the change from step 0 to the last step in the trainer's **mean log p(EOS) over a
#   fixed set of held-out prefixes** (section 2's), paired **plain − SC** over seeds, t interval. The
#   prediction: positive (plain raises p(EOS) and SC does not), of the size computed below.
# * **Secondary**: the clean-eval completion length at the last step, plain − SC (paired); and plain −
#   bf16, SC − bf16 (Holm over the three).
# * **Decision**: the primary is reproduced if its 95% interval lies above 0, contradicted if it lies
#   below 0, and "no length drift here" if it lies within ± half the predicted 60-step effect.
# * **The prediction** (section 2, computed before any run by a headless run of this notebook at its
#   defaults: 4 sampler batches, 8,323 sampler tokens; 32 held-out trajectories, 2,221 prefixes, base mean
#   log p(EOS) −7.831, hazard-implied length 58.43 tokens). One drift step at lr E[A] = 0.075 moves mean
#   log p(EOS) by **+0.0030 nats (plain)** and **+0.0010 (SC, k = 128)**. The hazard-implied length moves by
#   −0.003 tokens for both. Extrapolated naively over 60 steps (no compounding, no re-sync effects):
#   plain +0.183 and SC +0.059 nats, so **plain − SC ≈ +0.12 nats**. The hazard-implied lengths are −0.19
#   and −0.18 tokens, so **no length difference between plain and SC is predicted** at this size. SC's
#   residual is not zero: EOS is usually outside the sampler's top-128 head (p(EOS) ≈ e^−7.8), so the tail
#   model's error falls on it. The primary's "no drift" band is therefore ± 0.06 nats.

# %% [markdown]
# ## 2 · The prediction: one exact drift step
#
# At a prefix $h$ with trainer $p$ and sampler $q$, the expected logit-space update of one sampled token
# under a constant advantage $A$ is $A\,\mathbb{E}_q[e_y - p] = A\,(q - p)$ for plain. For SC with a head
# $H$ of the sampler's $k$ most likely tokens it is $A\,[(q - p) - (c - (\textstyle\sum c)\,p)]$, with
# $c_v = q_v - \rho\,p_v$ on $H$ and $\rho = (1 - \sum_H q)_+ / \max(1 - \sum_H p, \varepsilon)$: the
# head's residual, zero with $k = V$. Both are vectors $w$ with $\sum_v w_v = 0$ when written as
# $w - (\sum w)\,p$, so the parameter-space expected update over the prefixes of a batch is the gradient
# of $\sum_{\text{prefixes}} \sum_v \mathrm{sg}(w_v) \log p_v / N$: exact given the prefixes, with no
# sampled-token noise. The prefixes come from `drift_batches` batches of the headline sampler (96-token
# budget). One SGD step $\theta \leftarrow \theta + \mathrm{lr}\,E[A]\,g$ is applied to a copy of the
# trainer, for plain and for SC. Then on fixed held-out prefixes we measure the change in mean log
# p(EOS), and the change in the **hazard-implied length**
# $\mathbb{E}[L] = \sum_{t=1}^{T} \prod_{s < t} (1 - h_s)$, $h_s = p(\mathrm{EOS} \mid \text{prefix}_s)$. The
# prefixes are every prefix of one on-policy (fp32, T = 1) completion per held-out prompt, whose
# non-EOS tokens are held fixed.

# %%
import copy
import json
import time

import matplotlib.pyplot as plt
import numpy as np
import torch

import scrl_min
from scrl_min import (DEFAULT_MODEL_PATH, EVAL_SEED, REPO_ROOT, RHO_EPS, TAIL_TOL, TorchSampler, TrainConfig,
                      encode_prompt, load_policy, make_task_dataset, trainer_logprobs)

t_start = time.perf_counter()
model_path = str(DEFAULT_MODEL_PATH) if model == "default" else model
assert sampler_format in scrl_min.PRECISIONS, scrl_min.PRECISIONS
fig_dir = REPO_ROOT / figures_dir
fig_dir.mkdir(parents=True, exist_ok=True)
policy, tok = load_policy(model_path)  # the trainer: float32
V = policy.config.vocab_size
assert 1 <= k <= V
eos_id, pad_id = tok.eos_token_id, tok.pad_token_id
eval_set = make_task_dataset(TrainConfig().eval_prompts, seed=EVAL_SEED)
train_prompts = [encode_prompt(tok, p) for p in make_task_dataset(TrainConfig().n_prompts, seed=seed,
                                                                   exclude=eval_set["prefix"])["prompt"]]
heldout = [encode_prompt(tok, p) for p in eval_set["prompt"][:heldout_prompts]]
sampler = TorchSampler(policy.config, precision=sampler_format, k=V, noise_std=sampler_noise, seed=seed,
                       fp8_backend="emulated")
sampler.push_weights(policy.state_dict())
on_policy = TorchSampler(policy.config, precision="fp32", k=1, noise_std=0.0, seed=seed)
on_policy.push_weights(policy.state_dict())
# the fixed held-out prefixes: one on-policy completion per held-out prompt
held = on_policy.generate(heldout, max_new_tokens, eos_id, pad_id, generator=torch.Generator().manual_seed(seed + 1))
print(f"held-out: {len(heldout)} prompts, {int(held.completion_mask.sum())} prefixes; "
      f"mean on-policy completion length {held.completion_mask.sum(1).float().mean():.1f} tokens (budget {max_new_tokens})")


def drift_gradient(model, weights):
    """Expected update direction (P,) per unit of A over the prefixes of `drift_batches` sampler batches.
    weights: "plain" (w = q) or "sc" (w = the head's residual); gradient of Σ_prefixes Σ_v sg(w_v) log p_v / N."""
    grads = [torch.zeros_like(w) for w in model.parameters()]
    n_tok = 0
    for b in range(drift_batches):
        g = torch.Generator().manual_seed(seed * 1000 + 2 * b)
        pick = torch.randperm(len(train_prompts), generator=g)[:prompts_per_step]
        ro = sampler.generate([train_prompts[i] for i in pick.tolist() for _ in range(group_size)], max_new_tokens,
                              eos_id, pad_id, generator=torch.Generator().manual_seed(seed * 1000 + 2 * b + 1),
                              full_logq=True)
        m = ro.completion_mask  # (B, T)
        # the sampler's head is the whole vocabulary sorted by q (k = V): log p there, with grad, in the same order
        _, lp_head = trainer_logprobs(model, ro, 1.0)  # (B, T, V)
        lp = lp_head[m]  # (N, V)
        q = ro.head_logp[m].double().exp()  # (N, V) the sampler's next-token distribution, sorted
        p = lp.detach().double().exp()
        w = q.clone()
        if weights == "sc":  # subtract the head estimate μ̂ = c − (Σc) p, c_v = q_v − ρ p_v on the first k (the k-head)
            tail_q = (1 - q[:, :k].sum(-1)).clamp(min=0)
            tail_p = (1 - p[:, :k].sum(-1)).clamp(min=RHO_EPS)
            rho = torch.where(tail_q <= TAIL_TOL, 0.0, tail_q / tail_p)  # (N,)
            c = torch.zeros_like(q)
            c[:, :k] = q[:, :k] - rho[:, None] * p[:, :k]
            w = w - c + c.sum(-1, keepdim=True) * p
        obj = (w.float() * lp).sum() / m.sum()
        for acc, gr in zip(grads, torch.autograd.grad(obj, list(model.parameters()))):
            acc += gr / drift_batches
        n_tok += int(m.sum())
    return grads, n_tok


@torch.no_grad()
def eos_stats(model):
    # log p(EOS) at every held-out prefix (N,), and the hazard-implied length per held-out trajectory (n,)
    _, _, full_logp = trainer_logprobs(model, held, 1.0, full=True)
    m = held.completion_mask
    lp_eos = full_logp[..., eos_id]  # (n, T)
    h = lp_eos.exp().masked_fill(~m, 0.0)
    survive = torch.cumprod(torch.cat([torch.ones(len(h), 1), 1 - h[:, :-1]], 1), 1) * m  # P(no EOS before t)
    return lp_eos[m], survive.sum(1)


base_lp, base_len = eos_stats(policy)
rows = {}
for arm in ("plain", "sc"):
    grads, n_tok = drift_gradient(policy, arm)
    stepped = copy.deepcopy(policy)
    with torch.no_grad():
        for w, g in zip(stepped.parameters(), grads):
            w += lr * mean_advantage * g  # the update is minus the loss gradient: + lr E[A] ∇ Σ w log p
    lp1, len1 = eos_stats(stepped)
    rows[arm] = dict(d_logp_eos=float((lp1 - base_lp).mean()), d_len=float((len1 - base_len).mean()),
                     grad_norm=float(torch.cat([g.reshape(-1) for g in grads]).norm()), drift_tokens=n_tok,
                     per_prefix=(lp1 - base_lp).tolist())
    print(f"{arm:5s}: one drift step (lr E[A] = {lr * mean_advantage:.3f}, prefixes of {n_tok} sampler tokens): "
          f"mean log p(EOS) {rows[arm]['d_logp_eos']:+.4f} nats, hazard-implied length {rows[arm]['d_len']:+.3f} tokens; "
          f"‖g‖ {rows[arm]['grad_norm']:.3e};  naive {steps}-step extrapolation {steps * rows[arm]['d_logp_eos']:+.3f} nats, "
          f"{steps * rows[arm]['d_len']:+.2f} tokens")
print(f"base: mean log p(EOS) {float(base_lp.mean()):.3f} over {len(base_lp)} prefixes; hazard-implied length "
      f"{float(base_len.mean()):.2f} tokens;  {time.perf_counter() - t_start:.0f} s")

# %% [markdown]
# The figure: the change in log p(EOS) at each held-out prefix after one drift step, plain against SC.
# The numbers are in `14_length_drift.json`.

# %%
fig, ax = plt.subplots(figsize=(7, 4.5))
for arm, color in (("plain", "tab:red"), ("sc", "tab:blue")):
    ax.hist(rows[arm]["per_prefix"], bins=40, histtype="step", lw=1.8, color=color,
            label=f"{'SC (k=' + str(k) + ')' if arm == 'sc' else 'plain'}: mean {rows[arm]['d_logp_eos']:+.4f}")
ax.axvline(0, color="k", lw=0.8)
ax.set_xlabel("Δ log p(EOS) at a held-out prefix after one drift step, nats")
ax.set_ylabel("prefixes")
ax.set_title(f"one exact drift step at {sampler_format} + σ {sampler_noise:g}, lr E[A] = {lr * mean_advantage:.3f}", fontsize=10)
ax.legend(fontsize=9)
fig.tight_layout()
scrl_min.check_layout(fig)
fig.savefig(fig_dir / "14_length_drift.png", dpi=100)
plt.show()
(fig_dir / "14_length_drift.json").write_text(json.dumps(dict(
    parameters=dict(model=model, seed=seed, sampler_format=sampler_format, sampler_noise=sampler_noise, lr=lr,
                    mean_advantage=mean_advantage, k=k, max_new_tokens=max_new_tokens, prompts_per_step=prompts_per_step,
                    group_size=group_size, drift_batches=drift_batches, heldout_prompts=heldout_prompts, steps=steps),
    base=dict(mean_logp_eos=float(base_lp.mean()), hazard_length=float(base_len.mean()), prefixes=len(base_lp)),
    one_step={arm: {key: v for key, v in r.items() if key != "per_prefix"} for arm, r in rows.items()}), indent=1))
print(f"wrote {figures_dir}/14_length_drift.{{png,json}};  run time (after imports): {time.perf_counter() - t_start:.0f} s")
