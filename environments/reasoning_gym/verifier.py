"""reasoning_gym: 100+ procedural tasks scored by reasoning-gym's own per-task scorer.

Rows as NeMo-Gym's ``reasoning_gym`` server takes them (``question``, ``answer``,
``metadata.source_dataset``); the library is imported once at setup (it takes seconds)
and the scorer runs in the CPU pool with a deadline. ``generate`` writes new rows offline.
"""

from __future__ import annotations

import asyncio
from typing import Any, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from environments.reasoning_gym.generate import generate_rows
from environments.reasoning_gym.scoring import extract_answer, known_tasks, score_entry
from servers.answer_text import strip_think
from servers.cpu_pool import CpuTimeout
from servers.environment import DeadlineCostConfig, EnvConfig, Environment, Verdict
from servers.wire import FailureClass, ResponseObject, RowModel

Rule = Literal["answer_tag", "boxed", "answer_line", "full_text"]


class RGMetadata(BaseModel):
    model_config = ConfigDict(extra="allow")
    source_dataset: str = Field(..., description="reasoning-gym task name, e.g. knights_knaves")

    @field_validator("source_dataset")
    @classmethod
    def _registered(cls, task: str) -> str:
        if task not in known_tasks():
            import difflib

            close = difflib.get_close_matches(task, known_tasks(), n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise ValueError(f"unknown reasoning-gym task {task!r}.{hint}")
        return task


class RGRow(RowModel):
    question: str = Field("", description="The task text as reasoning-gym generated it.")
    answer: str | None = Field(None, description="Reference answer (some tasks verify from metadata instead).")
    metadata: RGMetadata


class RGConfig(DeadlineCostConfig, EnvConfig):
    extraction: list[Rule] = Field(
        default_factory=lambda: ["answer_tag", "boxed", "answer_line", "full_text"],
        description="Answer extraction rules tried in order (NeMo-Gym: answer_tag, boxed, full_text).")



class ReasoningGymEnvironment(Environment):
    name = "reasoning_gym"
    agent_names = ("reasoning_gym_simple_agent",)  # NeMo-Gym agent_ref.name values routed here
    domain = "knowledge"
    summary = "reasoning-gym procedural tasks scored by the library's own per-task scorer; generates rows offline"
    Row = RGRow
    Config = RGConfig
    uses_cpu_pool = True
    cpu_pool_preload = ("reasoning_gym", "environments.reasoning_gym.scoring")

    async def setup(self) -> None:
        # Importing reasoning-gym takes seconds; do it off the event loop before the first row.
        await asyncio.get_running_loop().run_in_executor(None, known_tasks)

    async def verify(self, row: RGRow, response: ResponseObject, session: Any | None) -> Verdict:
        cfg: RGConfig = self.config  # type: ignore[assignment]
        task = row.metadata.source_dataset
        # The shared reading: reasoning removed, and a block that never closed is no answer.
        extracted, rule = extract_answer(strip_think(response.output_text), cfg.extraction)
        extras: dict[str, Any] = {"task_name": task, "extracted_answer": extracted, "extraction_rule": rule}
        entry = {"question": row.question, "answer": row.answer, "metadata": row.metadata.model_dump()}
        try:
            score = await self.cpu(score_entry, task, extracted, entry, timeout=cfg.cpu_task_timeout_s)
        except CpuTimeout as exc:
            if not exc.worked_for(cfg.deadline_cpu_share * cfg.cpu_task_timeout_s):  # the worker waited for a CPU: infrastructure
                return Verdict.failure(FailureClass.TIMEOUT, f"{task} scorer passed its deadline: {exc}", **extras)
            if not await self._reference_scores_in_time(task, row, entry):
                return Verdict.failure(FailureClass.VERIFIER_ERROR, f"the {task} scorer cannot score the row's own "
                                       f"answer within {cfg.cpu_task_timeout_s:g}s", **extras)
            # A cost the answer causes is the answer's: the deadline scores it 0, not a masked sample.
            return Verdict(0.0, extras={**extras, "score": 0.0, "scored_by": "deadline",
                                        "deadline_cpu_s": round(exc.cpu_s or 0.0, 3)})
        return Verdict(score, extras={**extras, "score": score})

    async def _reference_scores_in_time(self, task: str, row: RGRow, entry: dict[str, Any]) -> bool:
        """The control after a costly deadline: the reference answer under the same deadline (rows
        verified from metadata alone have none: the answer's cost stands)."""
        if row.answer is None:
            return True
        try:
            await self.cpu(score_entry, task, row.answer, entry, timeout=self.config.cpu_task_timeout_s)
        except CpuTimeout:
            return False
        return True

    @classmethod
    def generate(cls, *, tasks: list[str] | None, size: int, seed: int, **options: Any) -> Iterator[dict[str, Any]]:
        """NeMo-Gym-format rows from ``reasoning_gym.create_dataset``; deterministic for a seed.

        ``options``: ``answer_format`` (``answer_tag`` | ``boxed``), ``system_prompt`` (bool),
        and dataset config keys: flat for one task, ``{task: {...}}`` for several.
        """
        return generate_rows(tasks=tasks, size=size, seed=seed, **options)
