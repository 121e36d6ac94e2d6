"""Supervised warm start: a few steps of next-token cross-entropy on gold answers before RL.

A randomly initialised tiny policy would almost never produce a parseable ``\\boxed{}`` answer, so
GRPO would see zero-variance groups only. A short warm start (config ``policy.warm_start``) teaches
the format and a little arithmetic (``target_loss`` stops it at the same partial point for every
seed); RL then has signal to climb from (the run reports step-0
validation reward *after* the warm start, so all improvement it reports is RL's).
"""

from __future__ import annotations

import random
import time
from typing import Any

import torch
import torch.nn.functional as F

from trainer.config import WarmStartConfig
from trainer.grpo.decode import prompt_ids_for


def gold_answer(row: dict[str, Any]) -> str | None:
    for key in ("expected_answer", "answer", "ground_truth"):
        if row.get(key) not in (None, ""):
            return str(row[key])
    meta = row.get("metadata") or {}
    return str(meta["answer"]) if isinstance(meta, dict) and meta.get("answer") not in (None, "") else None


def supervised_warm_start(policy: Any, rows: list[dict[str, Any]], cfg: WarmStartConfig, seed: int = 0) -> dict[str, Any]:
    from trainer.policy import IM_END

    t0 = time.perf_counter()
    end_id = policy.tokenizer.convert_tokens_to_ids(IM_END)
    pairs = []
    for r in rows:
        ans = gold_answer(r)
        if ans is not None:
            pairs.append((prompt_ids_for(policy, r), policy.encode(cfg.answer_template.format(answer=ans)) + [end_id]))
    if not pairs or cfg.num_steps == 0:
        return {"warm_start/steps": 0, "warm_start/examples": len(pairs)}
    return train_supervised(policy, pairs, num_steps=cfg.num_steps, batch_size=cfg.batch_size, lr=cfg.lr,
                            target_loss=cfg.target_loss, seed=seed, t0=t0)


def train_supervised(policy: Any, pairs: list[tuple[list[int], list[int]]], *, num_steps: int, batch_size: int,
                     lr: float, target_loss: float | None = None, seed: int = 0, t0: float | None = None) -> dict[str, Any]:
    """Next-token cross-entropy on ``(prompt ids, target ids)`` pairs, loss on the targets only
    (also the DPO demo's warm start on tool calls, trainer/dpo/synthetic_tools.py)."""
    t0 = time.perf_counter() if t0 is None else t0
    rng = random.Random(seed)
    model = policy.model
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    pad = policy.tokenizer.pad_token_id
    model.train()
    losses: list[float] = []
    for _ in range(num_steps):
        if target_loss is not None and len(losses) >= 10 and sum(losses[-10:]) / 10 <= target_loss:
            break
        batch = [pairs[rng.randrange(len(pairs))] for _ in range(batch_size)]
        seqs = [p + a for p, a in batch]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        labels = torch.full_like(ids, -100)
        att = torch.zeros_like(ids)
        for i, ((p, a), s) in enumerate(zip(batch, seqs)):
            ids[i, :len(s)] = torch.tensor(s)
            att[i, :len(s)] = 1
            labels[i, len(p):len(s)] = torch.tensor(a)  # loss on the answer tokens only
        logits = model(input_ids=ids, attention_mask=att).logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    return {"warm_start/steps": len(losses), "warm_start/examples": len(pairs), "warm_start/first_loss": losses[0],
            "warm_start/final_loss": sum(losses[-10:]) / len(losses[-10:]), "warm_start/seconds": time.perf_counter() - t0}
