"""equivalence_llm_judge: an open-QA answer judged equivalent (or not) to the reference by an LLM
(NeMo-Gym ``equivalence_llm_judge``: same rows, prompt, labels and passes; the flow is the shared
library environments/llm_equivalence/)."""

from __future__ import annotations

from typing import ClassVar

from environments.llm_equivalence.environment import EquivalenceJudgeEnvironment


class EquivalenceLLMJudge(EquivalenceJudgeEnvironment):
    name = "equivalence_llm_judge"
    domain = "knowledge"
    summary = "Open-QA answer vs reference, judged equivalent by an LLM ([[A=B]]/[[A!=B]], optional swap check)"
    agent_names: ClassVar[tuple[str, ...]] = ("equivalence_llm_judge_simple_agent",)
