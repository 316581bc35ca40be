"""Trainer log-probs without the (tokens × vocabulary) logits in memory: the machinery below the method.

`core.trainer_logprobs` reads the trainer's log p at the sampled token and at the sampler's head from
here: `completion_logits` runs the policy over prompt + completion with each distinct prompt once (the
G rows of a GRPO group share their prompt's KV cache); `gather_logprobs` (from logits) and
`lm_head_logprobs` (from the last hidden states and the LM head) reduce (rows × V) to the few ids
asked, a chunk of rows at a time, checkpointed under autograd. TRL-style trainers call
`lm_head_logprobs` directly. Nothing here knows the method; it changes for memory and speed.
"""
from __future__ import annotations

import torch

from .errors import ScrlError


def _chunk_logprobs(z: torch.Tensor, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(z / T) at ids for one chunk of rows: z (n, V), ids (n, m) → (n, m) float32."""
    z = z.float() / temperature
    return z.gather(-1, ids) - torch.logsumexp(z, -1, keepdim=True)


def _chunk_head_logprobs(h: torch.Tensor, ids: torch.Tensor, weight: torch.Tensor,
                         temperature: float) -> torch.Tensor:
    """Logits h @ Wᵀ of one chunk of rows, then log-probs at ids: (n, H), (n, m), (V, H) → (n, m)."""
    return _chunk_logprobs(h @ weight.T, ids, temperature)


def _index_dtype(n: int) -> torch.dtype:
    """int32 for sort keys below n when they fit (its sort is about 1.7x faster than int64's), else int64."""
    return torch.int32 if n <= torch.iinfo(torch.int32).max else torch.int64


def _check_ids(ids: torch.Tensor, V: int) -> None:
    if ids.numel() and (ids.min() < 0 or ids.max() >= V):
        bad = ((ids < 0) | (ids >= V)).nonzero()[0].tolist()
        raise ScrlError(f"id outside the vocabulary [0, {V}) at index {bad}")


def _chunked(fn, rows: torch.Tensor, ids: torch.Tensor, chunk_size: int, *extra) -> torch.Tensor:
    """Apply fn(rows[chunk], ids[chunk], *extra) chunk by chunk. Under autograd each chunk is
    checkpointed: its (chunk × V) intermediates are freed after the forward and recomputed in the
    backward, so at most one chunk of (tokens × vocab) floats is alive at a time."""
    from torch.utils.checkpoint import checkpoint

    grad = torch.is_grad_enabled() and (rows.requires_grad or any(
        isinstance(e, torch.Tensor) and e.requires_grad for e in extra))
    out = []
    for s in range(0, rows.shape[0], chunk_size):
        args = (rows[s:s + chunk_size], ids[s:s + chunk_size], *extra)
        out.append(checkpoint(fn, *args, use_reentrant=False) if grad else fn(*args))
    return torch.cat(out) if out else rows.new_zeros((0, ids.shape[-1]), dtype=torch.float32)


def gather_logprobs(logits: torch.Tensor, ids: torch.Tensor, temperature: float = 1.0,
                    chunk_size: int = 4096) -> torch.Tensor:
    """Log-probs log softmax(logits / T) at `ids`, in float32, a chunk of rows at a time.

    logits: (..., V) any float dtype; ids: (...) or (..., k) long. Returns (...) or (..., k) float32.
    log p(v) = z_v − logsumexp(z), z = logits / T. Each chunk of `chunk_size` rows is upcast, reduced
    and (under autograd) checkpointed, so beyond the caller's logits no more than one chunk of
    (rows × V) float32 is ever alive, in the forward or the backward. When even the logits are too
    big, use `lm_head_logprobs`, which starts from hidden states. Ids of empty slots may be any
    valid id. Raises ScrlError if an id is outside [0, V) or T <= 0.
    """
    if temperature <= 0:
        raise ScrlError(f"temperature must be > 0, got {temperature}")
    V = logits.shape[-1]
    _check_ids(ids, V)
    squeeze = ids.dim() == logits.dim() - 1
    if squeeze:
        ids = ids.unsqueeze(-1)
    lead = ids.shape[:-1]
    logp = _chunked(_chunk_logprobs, logits.reshape(-1, V), ids.reshape(-1, ids.shape[-1]),
                    chunk_size, temperature)
    logp = logp.reshape(*lead, ids.shape[-1])
    return logp.squeeze(-1) if squeeze else logp


def lm_head_logprobs(hidden: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor,
                     temperature: float = 1.0, chunk_size: int = 1024) -> torch.Tensor:
    """Log-probs at `ids` straight from the last hidden states and the LM head, chunked.

    hidden: (..., H) final-norm hidden states; weight: (V, H) LM-head matrix; ids: (..., m) long.
    Returns (..., m) float32 log softmax(hidden @ Wᵀ / T) at ids, with gradients to hidden and weight.
    The (tokens × V) logits are never materialized: each chunk of `chunk_size` rows computes its
    logits, reduces them to m values and is checkpointed, so peak extra memory is about
    chunk_size × V floats (the trainer-side memory bound behind the top-k estimator at a vocab of
    150k). Raises ScrlError on an id outside [0, V), T <= 0 or mismatched hidden sizes.
    """
    if temperature <= 0:
        raise ScrlError(f"temperature must be > 0, got {temperature}")
    if hidden.shape[-1] != weight.shape[-1] or weight.dim() != 2:
        raise ScrlError(f"hidden (..., {hidden.shape[-1]}) does not match LM head weight "
                        f"{tuple(weight.shape)}, expected (V, {hidden.shape[-1]})")
    _check_ids(ids, weight.shape[0])
    if ids.shape[:-1] != hidden.shape[:-1]:
        raise ScrlError(f"ids {tuple(ids.shape)} do not match hidden {tuple(hidden.shape)} (..., m)")
    lead = ids.shape[:-1]
    logp = _chunked(_chunk_head_logprobs, hidden.reshape(-1, hidden.shape[-1]),
                    ids.reshape(-1, ids.shape[-1]), chunk_size, weight, temperature)
    return logp.reshape(*lead, ids.shape[-1])


def completion_logits(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
                      completion_mask: torch.Tensor) -> torch.Tensor:
    """The policy's logits over a completion: (B, T, V), row t scores completion token t.

    prompt_ids, prompt_mask (B, P), left-padded; completion_ids, completion_mask (B, T). Position
    alignment: the logits at row (P − 1 + t) of prompt+completion score completion token t. The G rows
    of a GRPO group share their prompt, so each distinct prompt is run once and its KV cache (keys and
    values, with their autograd graph) is copied to its rows before the completions run: the same
    numbers as one forward over prompt + completion, up to float round-off (tested), with the prompt's
    share of the work divided by G.
    """
    P, T = prompt_ids.shape[1], completion_ids.shape[1]
    attn = torch.cat([prompt_mask, completion_mask], dim=1).long()  # (B, P + T)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    uniq, row_of = _distinct_rows(prompt_ids, prompt_mask)  # (U,), (B,)
    # the prompts, once each: logits of the last prompt position only (it scores completion token 0)
    out = model(input_ids=prompt_ids[uniq], attention_mask=attn[uniq, :P], position_ids=pos[uniq, :P],
                use_cache=True, logits_to_keep=1)
    logits = out.logits[row_of]  # (B, 1, V)
    if T > 1:  # completion tokens 0..T-2 score tokens 1..T-1, reading the prompt from the copied cache
        cache = out.past_key_values
        cache.reorder_cache(row_of)  # (U, ...) → (B, ...)
        rest = model(input_ids=completion_ids[:, :T - 1], attention_mask=attn[:, :P + T - 1],
                     position_ids=pos[:, P:P + T - 1], past_key_values=cache, use_cache=True).logits
        logits = torch.cat([logits, rest], dim=1)  # (B, T, V): row t predicts completion token t
    return logits


def _distinct_rows(ids: torch.Tensor, mask: torch.Tensor):
    """Rows of a left-padded batch that hold the same prompt: ids, mask (B, P) → (uniq (U,) long, the
    first row of each distinct prompt; row_of (B,) long, the index into uniq of each row's prompt)."""
    key = ids.masked_fill(~mask, -1)  # padding never matches a real token
    _, row_of = torch.unique(key, dim=0, return_inverse=True)  # (B,) in 0..U-1, sorted order
    uniq = torch.full((int(row_of.max()) + 1,), -1, dtype=torch.long, device=row_of.device)
    uniq.scatter_reduce_(0, row_of, torch.arange(len(row_of), device=row_of.device), reduce="amin",
                         include_self=False)
    return uniq, row_of
