"""Preference pairs: NeMo-RL's two JSONL formats in, token ids out; pairs built from rollouts.

Accepted rows (NeMo-RL docs/guides/dpo.md "Datasets"; the format is detected per row):

* ``PreferenceDataset``: ``{"context": [messages], "completions": [{"rank": 0, "completion":
  [message]}, {"rank": 1, "completion": [message]}]}`` — exactly two completions, the lower rank
  is chosen, equal ranks are an error (NeMo-RL raises on ties too); each completion is one
  assistant message (NeMo-RL: "each completion being a single response").
* ``BinaryPreferenceDataset``: ``{prompt_key: str | [messages], chosen_key: str, rejected_key: str}``
  (keys ``prompt``/``chosen``/``rejected`` unless ``data.train.prompt_key`` etc. say otherwise).

verigym adds one optional key, ``tools`` (the row's function tools, Responses or chat format),
passed to the chat template so tool-use pairs are rendered with their tool list. NeMo-RL's
preference preprocessor renders without tools; a pairs file written here stays readable there.

Tokens: the prompt is the context rendered with the generation prompt; a completion's tokens are
what rendering context + completion adds after it (the whole final message, end-of-turn marker
included — NeMo-RL's loss mask covers the final message). A pair longer than
``policy.max_total_sequence_length`` is left out and counted (NeMo-RL masks it instead).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servers.wire import ROLLOUT_INDEX_KEY, TASK_INDEX_KEY
from trainer.responses import chat_tools, to_chat_messages
from trainer.tool_use import CLEAN, classify_record

PAIR_INFO_KEY = "_verigym_pair"  # provenance of a pair built from rollouts (ignored by readers)


class PreferenceDataError(ValueError):
    pass


@dataclass
class PreferencePair:
    context: list[dict[str, Any]]
    chosen: dict[str, Any]       # one assistant message
    rejected: dict[str, Any]
    tools: list[dict[str, Any]] = field(default_factory=list)  # chat-format tools


@dataclass
class TokenizedPair:
    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + max(len(self.chosen_ids), len(self.rejected_ids))

    @property
    def digest(self) -> str:
        """Identity of the pair's tokens (the reference-logprob cache is keyed by it)."""
        h = hashlib.sha1(json.dumps([self.prompt_ids, self.chosen_ids, self.rejected_ids]).encode())
        return h.hexdigest()[:20]


def _message(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, str):
        return {"role": "assistant", "content": value}
    if isinstance(value, dict) and value.get("role") == "assistant":
        return value
    raise PreferenceDataError(f"{where}: expected an assistant message or a string, got {str(value)[:120]}")


def parse_pair(row: dict[str, Any], *, prompt_key: str = "prompt", chosen_key: str = "chosen",
               rejected_key: str = "rejected", where: str = "row") -> PreferencePair:
    """One JSONL row (either NeMo-RL format) -> :class:`PreferencePair`; errors name the field."""
    tools = chat_tools(row.get("tools"))
    if "completions" in row:
        comps, context = row["completions"], row.get("context")
        if not isinstance(context, list):
            raise PreferenceDataError(f"{where}: 'context' must be a list of messages")
        if not isinstance(comps, list) or len(comps) != 2:
            raise PreferenceDataError(f"{where}: 'completions' must hold exactly two completions (DPO is pairwise)")
        try:
            ranks = [int(c["rank"]) for c in comps]
        except (KeyError, TypeError, ValueError):
            raise PreferenceDataError(f"{where}: each completion needs an integer 'rank'") from None
        if ranks[0] == ranks[1]:
            raise PreferenceDataError(f"{where}: both completions have rank {ranks[0]}; ties are not supported")
        best, worst = (comps[0], comps[1]) if ranks[0] < ranks[1] else (comps[1], comps[0])
        msgs = []
        for c, name in ((best, "chosen"), (worst, "rejected")):
            body = c.get("completion")
            if not isinstance(body, list) or len(body) != 1:
                raise PreferenceDataError(f"{where}: the {name} completion must be a list of exactly one message")
            msgs.append(_message(body[0], f"{where}: {name} completion"))
        return PreferencePair(context=context, chosen=msgs[0], rejected=msgs[1], tools=tools)
    missing = [k for k in (prompt_key, chosen_key, rejected_key) if k not in row]
    if missing:
        raise PreferenceDataError(f"{where}: missing {', '.join(repr(k) for k in missing)} (a pair is either "
                                  f"context + completions, or {prompt_key}/{chosen_key}/{rejected_key})")
    prompt = row[prompt_key]
    context = prompt if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
    return PreferencePair(context=context, chosen=_message(row[chosen_key], f"{where}: {chosen_key!r}"),
                          rejected=_message(row[rejected_key], f"{where}: {rejected_key!r}"), tools=tools)


def read_pairs(path: str | Path, **keys: str) -> list[PreferencePair]:
    p = Path(path)
    if not p.is_file():
        raise PreferenceDataError(f"{p}: no such pairs file (write one with `driver rollout ... --pairs {p}`)")
    out = []
    for number, line in enumerate(p.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PreferenceDataError(f"{p}:{number}: not JSON ({exc.msg})") from None
        out.append(parse_pair(row, where=f"{p}:{number}", **keys))
    if not out:
        raise PreferenceDataError(f"{p}: no pairs")
    return out


def tokenize_pair(policy: Any, pair: PreferencePair) -> TokenizedPair:
    prompt_text = policy.render(pair.context, pair.tools, add_generation_prompt=True)
    ids = []
    for message in (pair.chosen, pair.rejected):
        full = policy.render(pair.context + [message], pair.tools, add_generation_prompt=False)
        if not full.startswith(prompt_text):
            raise PreferenceDataError("the chat template renders the context differently with a completion after it; "
                                      "cannot split prompt and completion tokens")
        ids.append(policy.encode(full[len(prompt_text):]))
    return TokenizedPair(policy.encode(prompt_text), ids[0], ids[1])


# ---- pairs from tool-use rollouts --------------------------------------------------------------

def assistant_message(response: dict[str, Any]) -> dict[str, Any]:
    """A Responses-API response -> one chat assistant message (visible text + tool calls)."""
    text, calls = [], []
    for item in response.get("output") or []:
        if item.get("type") == "message":
            text += [c.get("text") or "" for c in item.get("content") or [] if isinstance(c, dict)]
        elif item.get("type") == "function_call":
            args = item.get("arguments", "{}")
            try:
                args = json.loads(args) if isinstance(args, str) else args
            except json.JSONDecodeError:
                pass  # kept as the string the model wrote
            calls.append({"type": "function", "function": {"name": item.get("name"), "arguments": args}})
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if calls:
        message["tool_calls"] = calls
    return message


def pairs_from_rollouts(records: list[dict[str, Any]], max_pairs_per_prompt: int = 4) -> list[dict[str, Any]]:
    """Chosen = a clean response, rejected = a hallucinated one (unknown tool or arguments outside
    the schema), both from the same prompt; NeMo-RL PreferenceDataset rows plus ``tools``.

    Per prompt, each hallucinated response (up to ``max_pairs_per_prompt``) is paired with a clean
    one, cycling through the clean responses; prompts without both kinds give no pair."""
    by_task: dict[int, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: {"clean": [], "bad": []})
    verdicts = {}
    for rec in sorted(records, key=lambda r: (r[TASK_INDEX_KEY], r[ROLLOUT_INDEX_KEY])):
        try:
            verdict = classify_record(rec)
        except ValueError:  # the row's tool schema is invalid: no verdict, no pair
            continue
        if verdict is None:
            continue
        key = (rec[TASK_INDEX_KEY], rec[ROLLOUT_INDEX_KEY])
        verdicts[key] = verdict
        if verdict.kind == CLEAN:
            by_task[rec[TASK_INDEX_KEY]]["clean"].append(rec)
        elif verdict.hallucinated:
            by_task[rec[TASK_INDEX_KEY]]["bad"].append(rec)
    pairs = []
    for task, group in sorted(by_task.items()):
        clean, bad = group["clean"], group["bad"][:max_pairs_per_prompt]
        if not clean:
            continue
        for i, rejected in enumerate(bad):
            chosen = clean[i % len(clean)]
            params = chosen.get("responses_create_params") or {}
            verdict = verdicts[(task, rejected[ROLLOUT_INDEX_KEY])]
            pairs.append({
                "context": to_chat_messages(params), "tools": chat_tools(params.get("tools")),
                "completions": [{"rank": 0, "completion": [assistant_message(chosen["response"])]},
                                {"rank": 1, "completion": [assistant_message(rejected["response"])]}],
                PAIR_INFO_KEY: {"task_index": task, "chosen_rollout": chosen[ROLLOUT_INDEX_KEY],
                                "rejected_rollout": rejected[ROLLOUT_INDEX_KEY], "rejected_kind": verdict.kind,
                                "rejected_problems": list(verdict.problems)},
            })
    return pairs


def write_pairs(path: str | Path, pairs: list[dict[str, Any]]) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text("".join(json.dumps(x) + "\n" for x in pairs))
    tmp.replace(p)
