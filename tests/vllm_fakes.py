"""Fake vLLM outputs for the row-builder tests: the fields of a completion that VLLMSampler reads."""
from types import SimpleNamespace


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
