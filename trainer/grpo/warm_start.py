"""Supervised warm start: a few steps of next-token cross-entropy on gold answers before RL.

A randomly initialised tiny policy would almost never produce a parseable ``\\boxed{}`` answer, so
GRPO would see zero-variance groups only. A short warm start (config ``policy.warm_start``) teaches
the format and part of the task (``target_accuracy`` / ``target_loss`` stop it at the same partial
point for every seed); RL then has signal to climb from (the run reports step-0
validation reward *after* the warm start, so all improvement it reports is RL's).

With ``conversations`` (a JSONL file of gold chat conversations) it teaches a multi-turn format
instead: each conversation is rendered by the policy's chat template one segment at a time, as a
rollout builds its tokens (trainer/agent_loop.py: prompt, then each model turn up to its
end-of-turn marker, then the tool messages and the next generation prompt), and the loss is on
the assistant turns' tokens only.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
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


def conversation_tokens(policy: Any, conversation: dict[str, Any]) -> tuple[list[int], list[int]]:
    """(token ids, loss mask) of one gold conversation: mask 1 on each assistant turn's tokens up to
    and including its end-of-turn marker (what the model generates in a rollout), 0 elsewhere."""
    from trainer.policy import IM_END
    from trainer.responses import chat_tools

    messages = conversation.get("messages")
    if not isinstance(messages, list) or not any(isinstance(m, dict) and m.get("role") == "assistant" for m in messages):
        raise ValueError("a conversation needs 'messages' with at least one assistant message")
    tools = chat_tools(conversation.get("tools"))
    ids: list[int] = []
    mask: list[int] = []
    done = ""  # the text already tokenised
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        prompt = policy.render(messages[:i], tools, add_generation_prompt=True)
        closed = policy.render(messages[:i + 1], tools, add_generation_prompt=False)
        if not prompt.startswith(done) or not closed.startswith(prompt):
            raise ValueError("the chat template is not prefix-stable on this conversation")
        turn = closed[len(prompt):]
        end = turn.find(IM_END)
        turn = turn[:end + len(IM_END)] if end >= 0 else turn
        context = policy.encode(prompt[len(done):])
        generated = policy.encode(turn)
        ids += context + generated
        mask += [0] * len(context) + [1] * len(generated)
        done = prompt + turn
    return ids, mask


def load_conversations(path: str) -> list[dict[str, Any]]:
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not JSON ({exc.msg})") from None
    return out


def supervised_warm_start(policy: Any, rows: list[dict[str, Any]], cfg: WarmStartConfig, seed: int = 0) -> dict[str, Any]:
    from trainer.policy import IM_END

    t0 = time.perf_counter()
    if cfg.conversations:
        examples = []
        for n, conversation in enumerate(load_conversations(cfg.conversations), 1):
            try:
                examples.append(conversation_tokens(policy, conversation))
            except (ValueError, AttributeError, TypeError) as exc:
                raise ValueError(f"{cfg.conversations}:{n}: {exc}") from None
        if not examples or cfg.num_steps == 0:
            return {"warm_start/steps": 0, "warm_start/examples": len(examples)}
        return train_masked(policy, examples, num_steps=cfg.num_steps, batch_size=cfg.batch_size, lr=cfg.lr,
                            target_loss=cfg.target_loss, target_accuracy=cfg.target_accuracy, seed=seed, t0=t0)
    end_id = policy.tokenizer.convert_tokens_to_ids(IM_END)
    pairs = []
    for r in rows:
        ans = gold_answer(r)
        if ans is not None:
            pairs.append((prompt_ids_for(policy, r), policy.encode(cfg.answer_template.format(answer=ans)) + [end_id]))
    if not pairs or cfg.num_steps == 0:
        return {"warm_start/steps": 0, "warm_start/examples": len(pairs)}
    return train_supervised(policy, pairs, num_steps=cfg.num_steps, batch_size=cfg.batch_size, lr=cfg.lr,
                            target_loss=cfg.target_loss, target_accuracy=cfg.target_accuracy, seed=seed, t0=t0)


def train_supervised(policy: Any, pairs: list[tuple[list[int], list[int]]], *, num_steps: int, batch_size: int,
                     lr: float, target_loss: float | None = None, target_accuracy: float | None = None, seed: int = 0,
                     t0: float | None = None) -> dict[str, Any]:
    """Next-token cross-entropy on ``(prompt ids, target ids)`` pairs, loss on the targets only
    (also the DPO demo's warm start on tool calls, trainer/dpo/synthetic_tools.py)."""
    examples = [(p + a, [0] * len(p) + [1] * len(a)) for p, a in pairs]
    return train_masked(policy, examples, num_steps=num_steps, batch_size=batch_size, lr=lr, target_loss=target_loss,
                        target_accuracy=target_accuracy, seed=seed, t0=t0)


def exact_match(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per example: 1.0 when every labelled next token is the argmax of the (teacher-forced) logits.
    ``logits`` [B, T, V] and ``labels`` [B, T] are already shifted (position t predicts labels[t]);
    -100 labels are ignored. All targets argmax <=> a greedy decode reproduces the target exactly."""
    hit = (logits.argmax(-1) == labels) | (labels == -100)
    return hit.all(-1).float()


def train_masked(policy: Any, examples: list[tuple[list[int], list[int]]], *, num_steps: int, batch_size: int,
                 lr: float, target_loss: float | None = None, target_accuracy: float | None = None, seed: int = 0,
                 t0: float | None = None) -> dict[str, Any]:
    """Next-token cross-entropy on ``(token ids, loss mask)`` examples, loss where the mask is 1; stops
    early at ``target_loss`` or ``target_accuracy`` (means of the last 10 batches)."""
    t0 = time.perf_counter() if t0 is None else t0
    rng = random.Random(seed)
    model = policy.model
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    pad = policy.tokenizer.pad_token_id
    model.train()
    losses: list[float] = []
    accuracies: list[float] = []
    for _ in range(num_steps):
        if len(losses) >= 10 and ((target_loss is not None and sum(losses[-10:]) / 10 <= target_loss)
                                  or (target_accuracy is not None and sum(accuracies[-10:]) / 10 >= target_accuracy)):
            break
        batch = [examples[rng.randrange(len(examples))] for _ in range(batch_size)]
        width = max(len(s) for s, _ in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        labels = torch.full_like(ids, -100)
        att = torch.zeros_like(ids)
        for i, (s, m) in enumerate(batch):
            seq = torch.tensor(s)
            ids[i, :len(s)] = seq
            att[i, :len(s)] = 1
            labels[i, :len(s)] = torch.where(torch.tensor(m, dtype=torch.bool), seq, -100)  # loss where mask is 1
        device = next(model.parameters()).device  # policy.device: the batch goes where the model is
        ids, labels, att = ids.to(device), labels.to(device), att.to(device)
        logits = model(input_ids=ids, attention_mask=att).logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)
        accuracies.append(float(exact_match(logits[:, :-1].detach(), labels[:, 1:]).mean()))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    return {"warm_start/steps": len(losses), "warm_start/examples": len(examples), "warm_start/first_loss": losses[0],
            "warm_start/final_loss": sum(losses[-10:]) / len(losses[-10:]),
            "warm_start/final_accuracy": sum(accuracies[-10:]) / len(accuracies[-10:]),
            "warm_start/seconds": time.perf_counter() - t0}
