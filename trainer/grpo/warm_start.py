"""Supervised warm start: a few steps of next-token cross-entropy on gold answers before RL.

A randomly initialised tiny policy would almost never produce a parseable ``\\boxed{}`` answer, so
GRPO would see zero-variance groups only. A short warm start (config ``policy.warm_start``) teaches
the format and part of the task (``target_accuracy`` / ``target_loss`` stop it at the same partial
point for every seed); RL then has signal to climb from (the run reports step-0
validation reward *after* the warm start, so all improvement it reports is RL's).

With ``conversations`` (a JSONL file of gold chat conversations) it teaches a multi-turn format
instead: each conversation is rendered by the policy's chat template one segment at a time, as a
rollout builds its tokens (trainer/rollout/episode.py: prompt, then each model turn up to its
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
from trainer.rollout.episode import prompt_ids


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


def warm_start_examples(policy: Any, rows: list[dict[str, Any]], cfg: WarmStartConfig) -> list[tuple[list[int], list[int]]]:
    """The warm start's ``(token ids, loss mask)`` examples: the gold conversations of
    ``cfg.conversations`` when set, else each row's prompt with its gold answer (``answer_template``)."""
    from trainer.policy import IM_END

    if cfg.conversations:
        examples = []
        for n, conversation in enumerate(load_conversations(cfg.conversations), 1):
            try:
                examples.append(conversation_tokens(policy, conversation))
            except (ValueError, AttributeError, TypeError) as exc:
                raise ValueError(f"{cfg.conversations}:{n}: {exc}") from None
        return examples
    end_id = policy.tokenizer.convert_tokens_to_ids(IM_END)
    examples = []
    for r in rows:
        ans = gold_answer(r)
        if ans is not None:
            examples.append(answer_example(prompt_ids(policy, r),
                                           policy.encode(cfg.answer_template.format(answer=ans)) + [end_id]))
    return examples


def answer_example(prompt: list[int], answer: list[int]) -> tuple[list[int], list[int]]:
    """``(token ids, loss mask)`` of a prompt and its target: loss on the target only."""
    return prompt + answer, [0] * len(prompt) + [1] * len(answer)


def warm_start_loop(policy: Any, rows: list[dict[str, Any]], cfg: WarmStartConfig, seed: int = 0) -> "SupervisedLoop":
    """The configured warm start, ready to run (``SupervisedLoop.run``) in as many pieces as the caller likes."""
    t0 = time.perf_counter()
    return SupervisedLoop(policy, warm_start_examples(policy, rows, cfg), num_steps=cfg.num_steps,
                          batch_size=cfg.batch_size, lr=cfg.lr, target_loss=cfg.target_loss,
                          target_accuracy=cfg.target_accuracy, seed=seed, t0=t0)


def supervised_warm_start(policy: Any, rows: list[dict[str, Any]], cfg: WarmStartConfig, seed: int = 0) -> dict[str, Any]:
    loop = warm_start_loop(policy, rows, cfg, seed)
    loop.run()
    return loop.summary()


def train_supervised(policy: Any, pairs: list[tuple[list[int], list[int]]], *, num_steps: int, batch_size: int,
                     lr: float, target_loss: float | None = None, target_accuracy: float | None = None, seed: int = 0,
                     t0: float | None = None) -> dict[str, Any]:
    """Next-token cross-entropy on ``(prompt ids, target ids)`` pairs, loss on the targets only
    (also the DPO demo's warm start on tool calls, trainer/dpo/synthetic_tools.py)."""
    examples = [answer_example(p, a) for p, a in pairs]
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
    """Next-token cross-entropy on ``(token ids, loss mask)`` examples in one go (``SupervisedLoop``)."""
    loop = SupervisedLoop(policy, examples, num_steps=num_steps, batch_size=batch_size, lr=lr, target_loss=target_loss,
                          target_accuracy=target_accuracy, seed=seed, t0=t0)
    loop.run()
    return loop.summary()


class SupervisedLoop:
    """Next-token cross-entropy on ``(token ids, loss mask)`` examples, loss where the mask is 1, for
    ``num_steps`` steps or until ``target_loss`` / ``target_accuracy`` (means of the last 10 batches).

    Resumable: ``run(max_seconds=5)`` does a bounded piece and returns, so a driver can show progress
    and bound every call to the trainer while a long warm start runs; pieces give the same steps,
    batches and updates as one call."""

    def __init__(self, policy: Any, examples: list[tuple[list[int], list[int]]], *, num_steps: int, batch_size: int,
                 lr: float, target_loss: float | None = None, target_accuracy: float | None = None, seed: int = 0,
                 t0: float | None = None):
        self.policy, self.examples, self.num_steps, self.batch_size = policy, examples, num_steps, batch_size
        self.target_loss, self.target_accuracy = target_loss, target_accuracy
        self.t0 = time.perf_counter() if t0 is None else t0
        self.rng = random.Random(seed)
        self.opt = torch.optim.AdamW(policy.model.parameters(), lr=lr) if examples and num_steps > 0 else None
        self.losses: list[float] = []
        self.accuracies: list[float] = []
        self.seconds = 0.0

    @staticmethod
    def _recent(values: list[float]) -> float | None:
        """Mean of the last 10 batches' values (what the targets are compared with)."""
        return sum(values[-10:]) / len(values[-10:]) if values else None

    @property
    def done(self) -> bool:
        if self.opt is None or len(self.losses) >= self.num_steps:
            return True
        return len(self.losses) >= 10 and (
            (self.target_loss is not None and self._recent(self.losses) <= self.target_loss)
            or (self.target_accuracy is not None and self._recent(self.accuracies) >= self.target_accuracy))

    def run(self, max_seconds: float | None = None) -> None:
        """Steps until done, or until ``max_seconds`` have passed (at least one step)."""
        start = time.perf_counter()
        model = self.policy.model
        model.train()
        try:
            while not self.done:
                self._step(model)
                if max_seconds is not None and time.perf_counter() - start >= max_seconds:
                    break
        finally:
            model.eval()
            self.seconds = time.perf_counter() - self.t0

    def _step(self, model: Any) -> None:
        pad = self.policy.tokenizer.pad_token_id
        batch = [self.examples[self.rng.randrange(len(self.examples))] for _ in range(self.batch_size)]
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
        self.accuracies.append(float(exact_match(logits[:, :-1].detach(), labels[:, 1:]).mean()))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.losses.append(float(loss.detach()))

    def progress(self) -> dict[str, Any]:
        """Steps so far and the recent (last 10 batches) loss and exact-match accuracy."""
        return {"steps": len(self.losses), "num_steps": self.num_steps, "done": self.done,
                "loss": self._recent(self.losses), "accuracy": self._recent(self.accuracies)}

    def summary(self) -> dict[str, Any]:
        if not self.losses:
            return {"warm_start/steps": 0, "warm_start/examples": len(self.examples)}
        return {"warm_start/steps": len(self.losses), "warm_start/examples": len(self.examples),
                "warm_start/first_loss": self.losses[0],
                "warm_start/final_loss": self._recent(self.losses),
                "warm_start/final_accuracy": self._recent(self.accuracies),
                "warm_start/seconds": self.seconds}


def target_missed(ws_cfg: WarmStartConfig, ws: dict[str, Any]) -> str | None:
    """What to tell the user when the warm start used all its steps short of its target: RL then
    starts from a weaker policy than the recipe assumes (often with no reward signal at all)."""
    if not ws.get("warm_start/steps") or ws["warm_start/steps"] < ws_cfg.num_steps:
        return None  # stopped early: a target was reached
    short = []
    if ws_cfg.target_accuracy is not None and ws["warm_start/final_accuracy"] < ws_cfg.target_accuracy:
        short.append(f"exact-match accuracy {ws['warm_start/final_accuracy']:.2f} < target {ws_cfg.target_accuracy}")
    if ws_cfg.target_loss is not None and ws["warm_start/final_loss"] > ws_cfg.target_loss:
        short.append(f"loss {ws['warm_start/final_loss']:.3f} > target {ws_cfg.target_loss}")
    if not short:
        return None
    return (f"the warm start used all {ws_cfg.num_steps} steps short of its target ({'; '.join(short)}); "
            "RL starts from a weaker policy than the recipe assumes: raise policy.warm_start.num_steps, or "
            "lower policy.warm_start.lr if the loss fell and then spiked back up (blends/README.md: tiny_tools)")
