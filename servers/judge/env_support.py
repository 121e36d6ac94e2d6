"""What every judged environment shares: its judges' life cycle (open at setup, health,
metrics, close). A mixin, so an environment stays one class with one config::

    class RubricConfig(JudgedConfig, EnvConfig): ...
    class RubricEnv(JudgedEnvironment, Environment):   # mixin first: its setup/close/health win
        Config = RubricConfig
        judge_names = ("judge",)
"""

from __future__ import annotations

from typing import Any, ClassVar

from servers.judge.client import Judge, JudgeError, JudgeSet
from servers.judge.protocol import Message, strip_think
from servers.wire import ResponseObject


def judge_messages(prompt: str, system: str | None = None) -> list[Message]:
    """The chat messages of a one-question judge call: an optional system message, then the prompt."""
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]


def last_user_text(row: Any) -> str:
    """The text of the prompt's last user message (rows that lack an explicit prompt field)."""
    messages = row.responses_create_params.input
    if isinstance(messages, str):
        return messages
    for message in reversed(messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"]
    return ""


def final_answer(response: ResponseObject) -> str:
    """What a judge should read of the policy's response: its final assistant message, with
    ``<think>`` reasoning removed (a reply whose reasoning never closed has no answer: "")."""
    return strip_think(response.last_message_text)


class JudgedEnvironment:
    """Opens a :class:`JudgeSet` from ``config.judges`` at setup; ``self.judge(name)`` gets one.

    ``judge_names`` are the judges the environment asks; a config lacking one fails at server
    start with a message naming it (not at the first sample).
    """

    judge_names: ClassVar[tuple[str, ...]] = ("judge",)
    config: Any  # a JudgedConfig; set by servers.environment.Environment.__init__
    name: ClassVar[str]
    judges: JudgeSet | None = None

    def required_judges(self) -> tuple[str, ...]:
        """The judges this instance will ask (override when it depends on the config)."""
        return self.judge_names

    async def setup(self) -> None:
        required = self.required_judges()
        missing = [n for n in required if n not in self.config.judges]
        if missing:
            raise JudgeError(missing[0], "config",
                             f"environment {self.name!r} needs judges {list(required)}; config 'judges' "
                             f"lacks {missing} (set judges.{missing[0]}.base_url and judges.{missing[0]}.model)")
        self.judges = JudgeSet(self.config.judges, env_name=self.name)

    def judge(self, name: str = "judge") -> Judge:
        if self.judges is None:
            raise RuntimeError(f"environment {self.name!r}: judges are opened by setup(); call it first")
        return self.judges[name]

    def metrics_text(self) -> str:
        return self.judges.metrics_text() if self.judges is not None else ""

    async def close(self) -> None:
        if self.judges is not None:
            await self.judges.close()

    async def health(self) -> dict[str, Any]:
        if self.judges is None:
            return {"ok": False, "error": "judges not opened (setup() not run)"}
        report = await self.judges.health()
        errors = [j["error"] for j in report.values() if not j["ok"]]
        ok = not errors or self.config.judge_health == "report"
        # One line: what is wrong with the first judge that cannot answer (every one is in "judges").
        return {"ok": ok, "judges": report,
                **({} if not errors else {"error": f"{errors[0]}: samples will fail with judge_error"})}
