"""Fake vLLM outputs for the row-builder tests: the fields of a completion that VLLMSampler reads."""
import math
from types import SimpleNamespace

from scrl_min import EMPTY_LOGP, RolloutError
from scrl_min.engines import _check_lengths, _empty_dense, _short_head_error


class _Flat(SimpleNamespace):
    """The fields of vLLM's FlatLogprobs that the sampler reads."""

    def __len__(self):
        return len(self.start_indices)


def fake_completion(tokens, rows):
    """One completion as vLLM returns it, flat and as dicts, from rows [[(id, log q), ...], ...]."""
    flat = _Flat(start_indices=[], end_indices=[], token_ids=[], logprobs=[])
    for row in rows:
        flat.start_indices.append(len(flat.token_ids))
        flat.token_ids += [i for i, _ in row]
        flat.logprobs += [v for _, v in row]
        flat.end_indices.append(len(flat.token_ids))
    dicts = [{i: SimpleNamespace(logprob=v) for i, v in row} for row in rows]
    return (SimpleNamespace(token_ids=tokens, logprobs=flat),
            SimpleNamespace(token_ids=tokens, logprobs=dicts))


def dense_from_dicts(seqs: list, B: int, T: int, k: int, pad_id: int):
    """The test oracle of `scrl_min.dense_from_flat` (once VLLMSampler's reference path): vLLM's
    per-position {id: Logprob} dicts, read one entry at a time.

    Same result as `dense_from_flat` to the last bit (tests check it): the head is the k best
    distinct ids sorted by (−log q, id), and log q(y_t) is the dict's entry for y_t. Raises the same
    RolloutErrors (a dict holds each id once, so there is no repeated id to compare).
    """
    ids, cmask, logq, head_ids, head_logp = _empty_dense(B, T, k, pad_id)
    _check_lengths(seqs, T)
    for b, s in enumerate(seqs):
        for t, (y, row) in enumerate(zip(s.token_ids, s.logprobs)):
            entries = [(v.logprob, tid) for tid, v in row.items()]
            if any(math.isnan(v) for v, _ in entries):
                raise RolloutError(f"rollout: NaN log-prob from the engine at sequence {b}, "
                                   f"completion position {t}")
            if y not in row:
                raise RolloutError(f"rollout: the engine returned no log-prob for the sampled token "
                                   f"at sequence {b}, completion position {t}")
            if sum(v > EMPTY_LOGP for v, _ in entries) < k:
                raise _short_head_error(b, t, k, [(i, v) for v, i in entries])
            ids[b, t], cmask[b, t], logq[b, t] = y, True, row[y].logprob
            best = sorted(entries, key=lambda e: (-e[0], e[1]))[:k]
            for j, (v, tid) in enumerate(best):
                head_logp[b, t, j] = v
                head_ids[b, t, j] = tid if v != float("-inf") else 0
    return ids, cmask, logq, head_ids, head_logp
