"""Build the embedded default policy: a small Qwen3 with its own BPE tokenizer, trained offline.

What it makes (into ``models/qwen3-tiny-code/`` unless ``--out`` says otherwise):
  * a byte-level BPE tokenizer (``tokenizers``) with Qwen-style special tokens
    ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` and a Qwen-style chat template;
  * a ``Qwen3ForCausalLM`` of about 3.7M parameters, pretrained for a few minutes on the Python
    standard library's own source (present on every machine, so nothing is downloaded), half of the
    samples wrapped in the chat template as "continue this code" turns (the SFT part), so that the
    task prompts of ``scrl_min.make_task_dataset`` are in-distribution;
  * ``model.safetensors`` in bf16 (under 10 MB), loadable with ``from_pretrained(path)``.

Why pretrain at all: a random model's next-token distributions are nearly flat, and FP8 rounding barely
moves a flat distribution; a model that has learned code puts most mass on a few tokens, where the
sampler/trainer mismatch is 3-10x larger (see docs/method.md and the README's development log).

Run:  python scripts/make_default_model.py            (about 8 minutes on 2 CPU cores)
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sysconfig
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from scrl_min import DEFAULT_MODEL_PATH, make_task_dataset, task_user_message

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen-style ChatML template (without Qwen3's <think> block: this model does not reason).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SKIP_DIRS = {"test", "tests", "idlelib", "site-packages", "lib2to3", "turtledemo", "__pycache__"}


def stdlib_sources(max_bytes: int) -> list[str]:
    """Python files of the running interpreter's standard library, sorted, ASCII only."""
    root = Path(sysconfig.get_paths()["stdlib"])
    texts, total = [], 0
    for f in sorted(root.rglob("*.py")):
        if SKIP_DIRS & set(f.relative_to(root).parts):
            continue
        text = f.read_text(encoding="utf-8", errors="ignore").encode("ascii", "ignore").decode()
        texts.append(text)
        total += len(text)
        if total >= max_bytes:
            break
    return texts


def build_tokenizer(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        bos_token=None, unk_token=None, chat_template=CHAT_TEMPLATE, model_max_length=512,
        additional_special_tokens=["<|im_start|>"],
    )


def chat_samples(texts: list[str], tok, n: int, rng: random.Random) -> list[list[int]]:
    """SFT turns: the task's user message around a code prefix, the assistant continues the code."""
    out = []
    blocks = [t.split("\n") for t in texts if t.count("\n") > 12]
    while len(out) < n:
        lines = rng.choice(blocks)
        i = rng.randrange(0, len(lines) - 10)
        prefix = "\n".join(lines[i:i + rng.randint(1, 3)]) + "\n"
        cont = "\n".join(lines[i + 3:i + 9])
        msgs = [{"role": "user", "content": task_user_message(prefix)},
                {"role": "assistant", "content": cont}]
        out.append(tok.apply_chat_template(msgs, tokenize=True, return_dict=False))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_MODEL_PATH)
    ap.add_argument("--vocab-size", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=400, help="optimizer steps")
    ap.add_argument("--batch", type=int, default=32, help="sequences per step")
    ap.add_argument("--seq-len", type=int, default=128, help="tokens per sequence")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    t0 = time.time()
    texts = stdlib_sources(max_bytes=6_000_000)
    tok = build_tokenizer(texts, args.vocab_size)
    print(f"tokenizer: {len(tok)} tokens from {len(texts)} files ({time.time() - t0:.0f}s)")

    # Raw code stream, cut into seq_len windows, plus chat-wrapped SFT turns (padded).
    eot = tok.convert_tokens_to_ids("<|endoftext|>")
    stream = []
    for t in texts:
        stream.extend(tok(t)["input_ids"] + [eot])
    stream = torch.tensor(stream)
    chats = chat_samples(texts, tok, n=args.steps * args.batch // 2, rng=rng)
    print(f"corpus: {len(stream):,} code tokens, {len(chats):,} chat turns")

    cfg = Qwen3Config(
        vocab_size=len(tok), hidden_size=256, intermediate_size=768, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=512,
        tie_word_embeddings=True, rope_theta=10_000.0, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, bos_token_id=None,
    )
    model = Qwen3ForCausalLM(cfg)
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 100) * 0.5 * (1 + math.cos(math.pi * s / args.steps)))

    half = args.batch // 2
    for step in range(args.steps):
        starts = torch.randint(0, len(stream) - args.seq_len - 1, (args.batch - half,))
        code = torch.stack([stream[s:s + args.seq_len] for s in starts])
        chat = torch.full((half, args.seq_len), tok.pad_token_id)
        chat_mask = torch.zeros(half, args.seq_len, dtype=torch.bool)
        for j, ids in enumerate(chats[step * half:(step + 1) * half]):
            ids = ids[:args.seq_len]
            chat[j, :len(ids)] = torch.tensor(ids)
            chat_mask[j, :len(ids)] = True
        ids = torch.cat([code, chat])
        labels = ids.clone()
        labels[args.batch - half:][~chat_mask] = -100  # no loss on chat padding
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 25 == 0 or step == args.steps - 1:
            print(f"step {step:5d}  loss {loss.item():.3f}  {time.time() - t0:.0f}s", flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    (args.out / "training_args.json").write_text(json.dumps(
        {k: str(v) for k, v in vars(args).items()} | {"seconds": round(time.time() - t0)}, indent=1))
    print(f"saved to {args.out} in {time.time() - t0:.0f}s")
    # Sanity: the task's starting reward should leave room to learn (aim 0.1-0.5).
    ds = make_task_dataset(8, seed=1)
    print("example prompt:", repr(ds[0]["prompt"]))


if __name__ == "__main__":
    main()
