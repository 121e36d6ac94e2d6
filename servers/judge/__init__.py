"""The judge client: how an environment asks an LLM judge, and what happens when it cannot.

One shared piece for every judge-scored environment. A judge is any OpenAI-compatible
endpoint (``vllm serve``, NIM, a hosted API, ``envs model serve``) speaking Chat Completions
or the Responses API. Per endpoint: one pooled aiohttp session, a concurrency bound, a
deadline per call, retries with jittered backoff on connection errors / timeouts / 429 /
5xx, and a circuit breaker that fails calls fast while the endpoint is down. Per judge: an
LRU cache of replies (GRPO groups repeat responses) plus coalescing of identical calls in
flight, ``<think>`` stripping, and Prometheus metrics (``verigym_judge_*`` on /metrics).

A judge that is down, times out, or keeps answering without a verdict raises
:class:`JudgeError`; the server turns it into failure class ``judge_error`` (masked), never
a default score. See docs/judges.md.

Usage in an environment (the response goes through the prompt layer, ``untrusted.py``: fenced,
verdict-like text removed, the verdict read outside any echo of it)::

    from servers.environment import EnvConfig, Environment, Verdict
    from servers.judge import JudgedConfig, JudgedEnvironment, judge_prompt, label_verdict

    class RubricConfig(JudgedConfig, EnvConfig):
        pass                                   # + your keys; config.yaml sets judges.judge.{base_url, model}

    class RubricEnv(JudgedEnvironment, Environment):
        name = "rubric"; needs = ("judge",); Config = RubricConfig
        judge_names = ("judge",)               # checked at server start

        async def verify(self, row, response, session):
            prompt = judge_prompt("... {answer} ... [[YES]] or [[NO]]", label_verdict({"[[YES]]": True, "[[NO]]": False}),
                                  untrusted={"answer": response.output_text}, guard=self.config.response_guard)
            answer = await self.judge("judge").ask(prompt.messages, prompt.read)
            return Verdict(1.0 if answer.verdict else 0.0, extras={"judge_cached": answer.cached})

``parse`` returns the verdict or None ("no verdict in this reply": asked again up to
``parse_retries`` times, then ``JudgeError(kind="unparseable")``). Standalone use (outside
an environment)::

    judges = JudgeSet({"judge": JudgeConfig(base_url="http://127.0.0.1:8000/v1", model="m")})
    answer = await judges["judge"].ask(messages, parse)
    await judges.close()
"""

from servers.judge.client import Judge, JudgeAnswer, JudgeError, JudgeSet
from servers.judge.config import JudgeConfig, JudgedConfig
from servers.judge.env_support import JudgedEnvironment, final_answer, judge_messages, last_user_text
from servers.judge.protocol import Message, check_prompt_template, find_label, find_regex, strip_think
from servers.judge.untrusted import (JudgePrompt, ResponseGuard, VerdictFormat, guard_message, judge_prompt,
                                     label_verdict, regex_verdict, spaced)

__all__ = ["Judge", "JudgeAnswer", "JudgeConfig", "JudgeError", "JudgePrompt", "JudgeSet", "JudgedConfig",
           "JudgedEnvironment", "Message", "ResponseGuard", "VerdictFormat", "check_prompt_template", "final_answer",
           "find_label", "find_regex", "guard_message", "judge_messages", "judge_prompt", "label_verdict",
           "last_user_text", "regex_verdict", "spaced", "strip_think"]
