"""Fake vLLM outputs for the row-builder tests: the fields of a completion that VLLMSampler reads."""
import math
from types import SimpleNamespace

from scrl_min import EMPTY_LOGP, RolloutError
from scrl_min.vllm_engine import _check_lengths, _empty_dense, _short_head_error


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


class FakeTRLServer:
    """TRL's `VLLMClient` (server mode) with the HTTP hop replaced by calls into an in-process `vllm.LLM`.

    What a real `trl vllm-serve` / `vllm serve` would answer, built with vLLM's and TRL's own code: completions are
    serialized by vLLM's OpenAI server (`OpenAIServingCompletion._create_completion_logprobs`, tokens as
    "token_id:<id>", −inf as −9999) and parsed back by TRL's `parse_logprobs`; the probe's prompt log-probs go through
    TRL's `VLLMClient._format_sequence_logprobs`. Weight updates load the tensors into the engine's model
    (`reload_engine_weights`, as the trainer's colocate sync does) instead of TRL's NCCL broadcast, which needs CUDA
    (vllm_client.py:756-760). `max_logprobs` and `logprobs_mode` are what the server reports in /server_info.
    """

    def __init__(self, llm, max_logprobs: int = -1, logprobs_mode: str = "processed_logprobs"):
        self.llm, self.max_logprobs, self.logprobs_mode = llm, max_logprobs, logprobs_mode
        self.pushed = []  # names of the tensors of each update_named_params call

    def __call__(self, base_url=None, group_port=None, connection_timeout=None, **kw):  # VLLMClient(...) in TRL
        return self

    def init_communicator(self, device=None):
        pass

    def get_server_info(self) -> dict:
        return {"model_config": {"max_logprobs": self.max_logprobs, "logprobs_mode": self.logprobs_mode,
                                 "quantization": None},
                "cache_config": {"cache_dtype": "auto"}, "weight_transfer_config": {"backend": "nccl"}}

    def generate(self, prompts, features=None, n=1, repetition_penalty=1.0, temperature=1.0, top_p=1.0, top_k=0,
                 min_p=0.0, max_tokens=16, logprobs=0, structured_outputs_regex=None, generation_kwargs=None):
        from trl.generation.vllm_client import parse_logprobs
        from vllm import SamplingParams
        from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion

        params = SamplingParams(n=n, repetition_penalty=repetition_penalty, temperature=temperature, top_p=top_p,
                                top_k=top_k, min_p=min_p, max_tokens=max_tokens, logprobs=logprobs,
                                **(generation_kwargs or {}))
        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        server = SimpleNamespace(_get_decoded_token=OpenAIServingCompletion._get_decoded_token,
                                 return_tokens_as_token_ids=True)
        choices = [dict(prompt_token_ids=o.prompt_token_ids, token_ids=list(c.token_ids),
                        logprobs=OpenAIServingCompletion._create_completion_logprobs(
                            server, token_ids=c.token_ids, top_logprobs=c.logprobs, num_output_top_logprobs=logprobs,
                            tokenizer=None, return_as_token_id=True).model_dump(mode="json"))
                   for o in outs for c in o.outputs]  # prompt-major, as the server answers
        lps, ids = parse_logprobs([c["logprobs"] for c in choices])
        return dict(prompt_ids=[c["prompt_token_ids"] for c in choices[::n]],
                    completion_ids=[c["token_ids"] for c in choices], logprobs=lps, logprob_token_ids=ids)

    def get_sequence_logprobs(self, sequences, prompt_lengths, top_logprobs=100, temperature=1.0, **kw):
        from trl.generation.vllm_client import VLLMClient
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=1, temperature=temperature, prompt_logprobs=top_logprobs)
        outs = self.llm.generate([{"prompt_token_ids": s} for s in sequences], params, use_tqdm=False)
        res = []
        for o, s, pl in zip(outs, sequences, prompt_lengths):
            choice = {"prompt_logprobs": [None if row is None else {str(i): {"logprob": v.logprob, "rank": v.rank}
                                                                    for i, v in row.items()}
                                          for row in o.prompt_logprobs]}  # JSON: ids as strings
            res.append(VLLMClient._format_sequence_logprobs(choice, s, pl, top_logprobs))
        return {key: [r[key] for r in res] for key in res[0]}

    def update_named_params(self, metadata, named_params):
        from scrl_min.trl import reload_engine_weights

        names = []

        def recorded():
            for name, tensor in named_params:
                names.append(name)
                yield name, tensor

        tied = self.llm.llm_engine.model_config.hf_config.tie_word_embeddings
        reload_engine_weights(self.llm, recorded(), tied)
        self.pushed.append(names)

    def reset_prefix_cache(self):
        self.llm.reset_prefix_cache()
