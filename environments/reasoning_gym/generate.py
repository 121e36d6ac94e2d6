"""Offline generation of NeMo-Gym-format reasoning-gym rows (``envs generate reasoning_gym``).

Deterministic for a seed: reasoning-gym datasets are seeded procedural generators, and a
multi-task set is reasoning-gym's own ``composite`` dataset (equal weights), so the same
``(tasks, size, seed, options)`` always gives the same rows.
"""

from __future__ import annotations

from typing import Any, Iterator

DEFAULT_TASKS = ("basic_arithmetic", "chain_sum", "leg_counting", "gcd", "lcm")
AGENT_REF = {"type": "responses_api_agents", "name": "reasoning_gym_simple_agent"}
INSTRUCTIONS = {
    "answer_tag": ("Think step by step, then give only the final answer inside <answer></answer> tags, "
                   "for example <answer>42</answer>."),
    "boxed": "Think step by step, then put only the final answer inside \\boxed{}.",
}


def _jsonable(value: Any) -> Any:
    """Metadata as JSON will carry it (tuples -> lists, sets -> sorted lists), so a row scores
    the same whether it comes from memory or from a JSONL file."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_jsonable(v) for v in value), key=repr)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _split_options(tasks: list[str], options: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Per-task dataset configs (``{task: {...}}`` or, for one task, flat keys) and our own options."""
    ours = {k: options.pop(k) for k in ("answer_format", "system_prompt") if k in options}
    per_task: dict[str, dict[str, Any]] = {t: {} for t in tasks}
    for key, value in options.items():
        if key in per_task and isinstance(value, dict):
            per_task[key].update(value)
        elif len(tasks) == 1:
            per_task[tasks[0]][key] = value
        else:
            raise ValueError(f"option {key!r}: with several tasks, give dataset options per task "
                             f"({tasks[0]}.{key}=...)")
    return per_task, ours


def generate_rows(*, tasks: list[str] | None, size: int, seed: int, **options: Any) -> Iterator[dict[str, Any]]:
    import reasoning_gym
    from reasoning_gym.composite import DatasetSpec

    from environments.reasoning_gym.scoring import known_tasks

    tasks = list(tasks or DEFAULT_TASKS)
    unknown = [t for t in tasks if t not in known_tasks()]
    if unknown:
        raise ValueError(f"unknown reasoning-gym task(s) {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(known_tasks()))}")
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    per_task, ours = _split_options(tasks, dict(options))
    answer_format = ours.get("answer_format", "answer_tag")
    if answer_format not in INSTRUCTIONS:
        raise ValueError(f"answer_format must be one of {', '.join(INSTRUCTIONS)}, got {answer_format!r}")
    if len(tasks) == 1:
        dataset = reasoning_gym.create_dataset(tasks[0], size=size, seed=seed, **per_task[tasks[0]])
    else:
        specs = [DatasetSpec(name=t, weight=1.0, config=per_task[t]) for t in tasks]
        dataset = reasoning_gym.create_dataset("composite", size=size, seed=seed, datasets=specs)

    system = None
    if ours.get("system_prompt"):
        from reasoning_gym.utils import SYSTEM_PROMPTS

        system = SYSTEM_PROMPTS["default"]
    for index in range(size):
        entry = dataset[index]
        content = f"{entry['question']}\n\n{INSTRUCTIONS[answer_format]}"
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
        yield {
            "responses_create_params": {"input": messages},
            "question": entry["question"],
            "answer": None if entry.get("answer") is None else str(entry["answer"]),
            "metadata": _jsonable(entry["metadata"]),
            "agent_ref": dict(AGENT_REF),
        }
