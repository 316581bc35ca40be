"""The task: "distinct Python names", and the policy that learns it.

Prompt: the start of a Python function (a head built from fixed word lists, so the dataset is identical on
every machine), as the user turn of a chat. Completion: max_new_tokens tokens of code. Reward: the number of
*distinct* Python keywords and lowercase built-in names in the completion over a target (names_target, 12 for
a 24-token completion), capped at 1. The embedded model starts near 0.15 (code naturally uses `if`, `return`,
`None`...) and can learn to pack more distinct names in. The best policies are high-entropy (any order of many
names), so the sampler/trainer mismatch does not vanish as training sharpens the policy (core.py, deviation 3:
why not Countdown).

The policy: the embedded tiny Qwen3 (scripts/make_default_model.py) in the checkout's models/ folder, found
from this file, so it needs the package run from its checkout (`pip install -e .`, as the Makefile does). A
package installed elsewhere has no models/ beside it: set SCRL_MIN_MODEL to a checkpoint folder or an HF id.

Reading order: `DEFAULT_MODEL_PATH` · the word lists · `task_user_message` and `encode_prompt` (a prompt as the
policy sees it) · `make_task_dataset` · `distinct_names_reward` (the verifier) · `task_rewards` (the verifier
over a rollout's completions, step 2 of `core.rl_step`). A change of task is a change of this file alone; it
imports only errors.py.
"""
from __future__ import annotations

import builtins
import keyword
import os
import random
import re
from pathlib import Path

import torch

from .errors import ScrlError

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL_PATH = Path(os.environ.get("SCRL_MIN_MODEL") or REPO_ROOT / "models" / "qwen3-tiny-code")
# the names the verifier counts: Python's keywords and its lowercase built-ins (`if`, `None`, `len`, `zip`...)
PYTHON_NAMES = frozenset(keyword.kwlist) | frozenset(
    n for n in dir(builtins) if n.islower() and not n.startswith("_"))
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# a prompt's function head is def <verb>_<noun>(<args>): 20 × 16 × 10 = 3,200 distinct heads
_VERBS = ["get", "set", "parse", "load", "read", "write", "check", "make", "update", "find", "build",
          "format", "split", "merge", "count", "filter", "apply", "reset", "close", "open"]
_NOUNS = ["name", "path", "value", "items", "config", "data", "line", "header", "key", "node", "token",
          "buffer", "state", "record", "options", "result"]
_ARGS = ["self", "self, key", "self, value=None", "path, mode='r'", "data", "items, key=None",
         "self, *args, **kwargs", "text, sep=','", "obj", "self, name, default=None"]


def task_user_message(code_prefix: str) -> str:
    """The user turn of the task prompt around a code prefix (str → str)."""
    return ("Continue the code, using as many different Python keywords and built-in names as you "
            "can:\n" + code_prefix)


def encode_prompt(tok, user_message: str) -> list:
    """Token ids (list of int) of one user turn as the policy sees it: the tokenizer's chat template with
    the generation prompt, or the bare text when the tokenizer has no template."""
    if tok.chat_template:
        return tok.apply_chat_template([{"role": "user", "content": user_message}], add_generation_prompt=True,
                                       tokenize=True, return_dict=False)
    return tok(user_message)["input_ids"]


def make_task_dataset(n_prompts: int = 64, seed: int = 0, exclude=()):
    """The task as a ``datasets.Dataset`` with columns ``prompt`` (user message, str) and ``prefix``.

    Prompts are function heads built from fixed word lists, so the dataset is identical on every
    machine. `exclude`: prefixes never drawn (the held-out evaluation set). Raises ScrlError if
    n_prompts < 1.
    """
    import datasets

    if n_prompts < 1:
        raise ScrlError(f"n_prompts must be >= 1, got {n_prompts}")
    rng = random.Random(seed)
    rows, seen = [], set(exclude)
    while len(rows) < n_prompts:
        head = f"def {rng.choice(_VERBS)}_{rng.choice(_NOUNS)}({rng.choice(_ARGS)}):\n    "
        if head in seen and len(seen) < len(_VERBS) * len(_NOUNS) * len(_ARGS):
            continue
        seen.add(head)
        rows.append({"prompt": task_user_message(head), "prefix": head})
    return datasets.Dataset.from_list(rows)


def distinct_names_reward(completion: str, target: int) -> float:
    """Verifier: |distinct keywords and lowercase builtins in `completion`| / target, capped at 1.

    Names count as whole identifiers (`if` counts, `iff` and `bar_if` do not)."""
    names = {w for w in _IDENT.findall(completion) if w in PYTHON_NAMES}
    return min(1.0, len(names) / target)


def task_rewards(tok, ro, target: int) -> torch.Tensor:
    """The verifier's reward of each completion of a rollout, (B,) float32 (`distinct_names_reward`).

    ro: a `core.Rollout` (its completion_ids (B, T) and completion_mask (B, T) are read); the completion is
    decoded up to its mask, special tokens (EOS) dropped; target: names_target."""
    texts = tok.batch_decode(ro.completion_ids.masked_fill(~ro.completion_mask, tok.pad_token_id),
                             skip_special_tokens=True)
    return torch.tensor([distinct_names_reward(t, target) for t in texts])
