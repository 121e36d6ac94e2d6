"""A tiny GenRM for CPU runs: the ``tiny`` preset taught only the GenRM's *output format*.

    python -m environments.genrm.tiny_genrm --out runs/tiny_genrm      # ~20 s on a CPU
    envs model serve runs/tiny_genrm --port 8000                       # served as "tiny_genrm"

A randomly initialised model never writes ``{"score_1": ..., "score_2": ..., "ranking": ...}``, so
every comparison would fail (judge_error) and no reward would flow. This trains the tiny preset
(servers/model/tiny.py, half width) for a few hundred supervised steps on GenRM-shaped prompts — a
conversation, then two answers under the roles ``response_1`` / ``response_2`` — whose targets are
that JSON with **random** scores. The result answers in the right format and judges nothing: its
scores are noise, independent of the answers. It exists to run the RLHF path end to end on one
machine (rewards flow, the KL penalty acts), not to say anything about quality; point
``judges.genrm`` at a real GenRM for that.

Needs the ``[train]`` extra (torch, transformers).
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
import time
from pathlib import Path
from typing import Any

from environments.genrm.aggregation import parse_genrm_reply

# The prompts of blends/data/tiny_rlhf.jsonl; half of the training conversations use random text
# instead, so the format holds for prompts it never saw.
PROMPTS = ["Say hi.", "Name a color.", "Count to three.", "Give me a fruit.", "What is 2+2?", "Describe the sky.",
           "Name a planet.", "Say something kind.", "Pick a number.", "Name an animal.", "Write one word.",
           "What day is it?", "Name a city.", "Say thanks.", "Give a tip.", "Name a tool.", "Tell a joke.",
           "Say goodbye.", "Name a song.", "Pick a shape."]
ALPHABET = string.ascii_letters + string.digits + string.punctuation + " \n\u00e9\u00fc\ufffd"


def random_answer(rng: random.Random) -> str:
    """Stand-in for a policy's answer: random characters (what a random-init tiny policy writes)."""
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 24)))


def random_verdict(rng: random.Random) -> str:
    s1, s2 = rng.randint(1, 5), rng.randint(1, 5)
    ranking = rng.randint(1, 3) if s1 > s2 else rng.randint(4, 6) if s1 < s2 else rng.randint(1, 6)
    return json.dumps({"score_1": s1, "score_2": s2, "ranking": ranking})


def genrm_messages(rng: random.Random) -> list[dict[str, str]]:
    prompt = rng.choice(PROMPTS) if rng.random() < 0.5 else random_answer(rng) or "?"
    return [{"role": "user", "content": prompt}, {"role": "response_1", "content": random_answer(rng)},
            {"role": "response_2", "content": random_answer(rng)}]


def train(out: Path, *, steps: int = 200, batch_size: int = 16, lr: float = 5e-3, seed: int = 0) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from servers.model.tiny import IM_END, TinyModelConfig, build_tiny_model, build_tiny_tokenizer

    torch.manual_seed(seed)
    rng = random.Random(seed)
    tok = build_tiny_tokenizer()
    # Half the width of the policy preset: the format is all it has to learn, and CI trains it.
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=64, intermediate_size=192), seed)
    end_id = tok.convert_tokens_to_ids(IM_END)

    def example() -> tuple[list[int], list[int]]:
        prompt = tok.apply_chat_template(genrm_messages(rng), tokenize=False, add_generation_prompt=True)
        return (tok(prompt, add_special_tokens=False)["input_ids"],
                tok(random_verdict(rng), add_special_tokens=False)["input_ids"] + [end_id])

    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    t0, losses = time.perf_counter(), []
    for _ in range(steps):
        batch = [example() for _ in range(batch_size)]
        width = max(len(p) + len(a) for p, a in batch)
        ids = torch.full((batch_size, width), tok.pad_token_id, dtype=torch.long)
        labels = torch.full_like(ids, -100)
        mask = torch.zeros_like(ids)
        for i, (p, a) in enumerate(batch):
            ids[i, :len(p) + len(a)] = torch.tensor(p + a)
            mask[i, :len(p) + len(a)] = 1
            labels[i, len(p):len(p) + len(a)] = torch.tensor(a)  # loss on the verdict only
        logits = model(input_ids=ids, attention_mask=mask).logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config.eos_token_id = [tok.eos_token_id, end_id]
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    parsed = format_rate(model, tok, rng, n=16)
    report = {"out": str(out), "steps": steps, "first_loss": losses[0], "final_loss": sum(losses[-10:]) / 10,
              "seconds": round(time.perf_counter() - t0, 1), "parseable_at_t0.6": parsed}
    (out / "tiny_genrm.json").write_text(json.dumps(report, indent=2))
    return report


def format_rate(model: Any, tok: Any, rng: random.Random, n: int) -> float:
    """Share of sampled replies (temperature 0.6, the GenRM config's) that hold a verdict."""
    import torch

    ok = 0
    for _ in range(n):
        prompt = tok.apply_chat_template(genrm_messages(rng), tokenize=False, add_generation_prompt=True)
        ids = torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            gen = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=60, do_sample=True,
                                 temperature=0.6, top_p=0.95, pad_token_id=tok.pad_token_id)
        ok += parse_genrm_reply(tok.decode(gen[0, ids.shape[1]:], skip_special_tokens=True)) is not None
    return ok / n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m environments.genrm.tiny_genrm", description=__doc__.split("\n\n")[0],
                                     epilog="Then: envs model serve OUT --port 8000 (served name: the folder's name)")
    parser.add_argument("--out", type=Path, default=Path("runs/tiny_genrm"), help="checkpoint folder to write")
    parser.add_argument("--steps", type=int, default=200, help="supervised steps (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("tiny_genrm needs the [train] extra (torch, transformers): pip install -e '.[train]'", file=sys.stderr)
        return 2
    print(json.dumps(train(args.out, steps=args.steps, seed=args.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
