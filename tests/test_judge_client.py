"""The judge client (servers/judge) against the scripted OpenAI-compatible judge over real HTTP:
both APIs, verdict parsing, retries, deadlines, the circuit breaker, the cache, metrics."""

from __future__ import annotations

import asyncio
import re

import pytest

from servers.judge import JudgeConfig, JudgeError, JudgeSet, find_label, find_regex, strip_think
from servers.judge.endpoint import CircuitBreaker
from servers.scripted_judge import Rule, ScriptedJudge

YES_NO = {"[[YES]]": True, "[[NO]]": False}


def yes_no(text: str) -> bool | None:
    return find_label(text, YES_NO)


@pytest.fixture
async def scripted():
    judge = ScriptedJudge([Rule(("is the sky blue",), "<think>Maybe [[NO]]?</think>Clearly. [[YES]]"),
                           Rule(("is grass red",), "No, it is green.\n[[NO]]")], "no verdict here",
                          models=("judge-model",))
    await judge.start()
    yield judge
    await judge.stop()


def judges_for(judge: ScriptedJudge, **cfg) -> JudgeSet:
    settings = {"model": "judge-model", "max_retries": 2, "backoff_s": 0.01, "backoff_max_s": 0.05, **cfg}
    return JudgeSet({"j": JudgeConfig(base_url=judge.url, **settings)}, env_name="test")


def ask(judges: JudgeSet, question: str, parse=yes_no):
    return judges["j"].ask([{"role": "user", "content": question}], parse)


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_verdicts_over_both_apis(scripted, api):
    judges = judges_for(scripted, api=api, max_output_tokens=64, temperature=0.0)
    try:
        answer = await ask(judges, "is the sky blue?")
        assert answer.verdict is True and answer.text == "Clearly. [[YES]]" and not answer.cached
        assert (await ask(judges, "is grass red?")).verdict is False
    finally:
        await judges.close()
    body = scripted.bodies[-1]
    assert body["model"] == "judge-model" and body["temperature"] == 0.0
    if api == "chat":
        assert body["messages"] == [{"role": "user", "content": "is grass red?"}] and body["max_tokens"] == 64
    else:
        assert body["input"] == [{"role": "user", "content": "is grass red?"}] and body["max_output_tokens"] == 64


async def test_retries_on_5xx_and_429_then_succeeds(scripted):
    judges = judges_for(scripted)
    scripted.fail_next.extend([503, 429])
    try:
        assert (await ask(judges, "is the sky blue?")).verdict is True
        metrics = judges["j"].metrics
        assert (metrics.retries, metrics.calls) == (2, 3)
        assert metrics.errors == {"http_5xx": 1, "rate_limited": 1}
    finally:
        await judges.close()


async def test_retries_exhausted_is_an_error_of_that_kind(scripted):
    judges = judges_for(scripted, max_retries=1)
    scripted.fail_next.extend([500, 502, 500])
    try:
        with pytest.raises(JudgeError) as err:
            await ask(judges, "is the sky blue?")
        assert err.value.kind == "http_5xx" and scripted.requests == 2
    finally:
        await judges.close()


async def test_client_errors_are_not_retried(scripted):
    judges = judges_for(scripted)
    scripted.fail_next.append(400)
    try:
        with pytest.raises(JudgeError) as err:
            await ask(judges, "is the sky blue?")
        assert err.value.kind == "http_4xx" and scripted.requests == 1
    finally:
        await judges.close()


async def test_unparseable_reply_is_asked_again_then_an_error_and_never_cached(scripted):
    judges = judges_for(scripted, parse_retries=2)
    try:
        with pytest.raises(JudgeError) as err:
            await ask(judges, "what is love?")
        assert err.value.kind == "unparseable" and "no verdict here" in err.value.detail
        assert scripted.requests == 3
        with pytest.raises(JudgeError):
            await ask(judges, "what is love?")
        assert scripted.requests == 6  # a reply without a verdict is not cached
    finally:
        await judges.close()


async def test_reply_that_is_all_reasoning_has_no_verdict(scripted):
    scripted.rules.insert(0, Rule(("truncated",), "<think>The answer is [[YES]] because"))
    judges = judges_for(scripted, parse_retries=0)
    try:
        with pytest.raises(JudgeError) as err:
            await ask(judges, "truncated?")
        assert err.value.kind == "unparseable" and "empty after removing reasoning" in err.value.detail
    finally:
        await judges.close()


async def test_slow_judge_past_its_deadline_is_a_timeout(scripted):
    scripted.stall_s = 5.0
    judges = judges_for(scripted, timeout_s=0.2, max_retries=1)
    try:
        with pytest.raises(JudgeError) as err:
            await ask(judges, "is the sky blue?")
        assert err.value.kind == "timeout" and judges["j"].metrics.errors["timeout"] == 2
    finally:
        await judges.close()


async def test_cache_answers_identical_requests_and_coalesces_concurrent_ones(scripted):
    scripted.latency_s = 0.05
    judges = judges_for(scripted)
    try:
        answers = await asyncio.gather(*(ask(judges, "is the sky blue?") for _ in range(20)))
        assert all(a.verdict is True for a in answers)
        assert scripted.requests == 1 and sum(a.cached for a in answers) == 19
        again = await ask(judges, "is the sky blue?")
        assert again.cached and scripted.requests == 1
        different = await ask(judges, "is grass red?")
        assert not different.cached and scripted.requests == 2
        metrics = judges["j"].metrics
        assert (metrics.cache_hits, metrics.cache_misses) == (20, 2)
    finally:
        await judges.close()


async def test_a_cancelled_caller_does_not_fail_those_waiting_on_its_call(scripted):
    scripted.latency_s = 0.2
    judges = judges_for(scripted)
    try:
        leader = asyncio.ensure_future(ask(judges, "is the sky blue?"))
        while scripted.requests == 0:
            await asyncio.sleep(0.01)
        followers = [asyncio.ensure_future(ask(judges, "is the sky blue?")) for _ in range(3)]
        await asyncio.sleep(0.01)  # the followers join the call in flight
        leader.cancel()
        answers = await asyncio.gather(*followers)
        assert all(a.verdict is True for a in answers)
        assert scripted.requests == 2  # the cancelled call, then one follower's; the others joined it
        assert leader.cancelled()
    finally:
        await judges.close()


async def test_cache_off_calls_every_time(scripted):
    scripted.latency_s = 0.05
    judges = judges_for(scripted, cache_size=0)
    try:
        await ask(judges, "is the sky blue?")
        await ask(judges, "is the sky blue?")
        assert scripted.requests == 2
        await asyncio.gather(*(ask(judges, "is the sky blue?") for _ in range(3)))  # no joining in flight either
        assert scripted.requests == 5
    finally:
        await judges.close()


async def test_circuit_breaker_fails_fast_while_down_and_closes_after_a_probe(scripted):
    port = scripted.port
    judges = judges_for(scripted, max_retries=0, breaker_failures=2, breaker_reset_s=0.3)
    try:
        await scripted.stop()
        for _ in range(2):
            with pytest.raises(JudgeError) as err:
                await ask(judges, "is the sky blue?")
            assert err.value.kind == "connection"
        breaker = judges["j"].endpoint.breaker
        assert breaker.state == "open"
        with pytest.raises(JudgeError) as err:
            await ask(judges, "is grass red?")
        assert err.value.kind == "circuit_open"
        assert judges["j"].metrics.calls == 2  # the open breaker made no call
        health = await judges.health(max_age_s=0)
        assert health["j"]["ok"] is False and health["j"]["breaker"] == "open"
        await scripted.start(port=port)
        while breaker.state == "open":
            await asyncio.sleep(0.05)
        assert (await ask(judges, "is the sky blue?")).verdict is True  # the probe
        assert breaker.state == "closed"
        assert (await judges.health(max_age_s=0))["j"]["ok"] is True
    finally:
        await judges.close()


def test_breaker_half_open_lets_one_probe_and_reopens_on_its_failure():
    now = [0.0]
    breaker = CircuitBreaker(failures=3, reset_s=10, clock=lambda: now[0])
    for _ in range(2):
        breaker.record_failure()
    assert breaker.allow() and breaker.state == "closed"
    breaker.record_failure()
    assert breaker.state == "open" and not breaker.allow()
    now[0] = 10.0
    assert breaker.allow() and not breaker.allow()  # one probe at a time
    breaker.record_failure()
    assert breaker.state == "open"
    now[0] = 20.0
    assert breaker.allow()
    breaker.record_success()
    assert breaker.state == "closed" and breaker.allow()


async def test_api_key_from_the_named_environment_variable(scripted, monkeypatch):
    monkeypatch.setenv("VERIGYM_TEST_JUDGE_KEY", "sekrit")
    judges = judges_for(scripted, api_key_env="VERIGYM_TEST_JUDGE_KEY")
    try:
        await ask(judges, "is the sky blue?")
        assert scripted.last_authorization == "Bearer sekrit"
    finally:
        await judges.close()
    monkeypatch.delenv("VERIGYM_TEST_JUDGE_KEY")
    with pytest.raises(JudgeError) as err:
        judges_for(scripted, api_key_env="VERIGYM_TEST_JUDGE_KEY")
    assert err.value.kind == "config" and "VERIGYM_TEST_JUDGE_KEY" in err.value.detail


def test_config_is_strict():
    with pytest.raises(ValueError, match="(?s)timeuot_s.*Extra inputs are not permitted"):
        JudgeConfig(base_url="http://x/v1", model="m", timeuot_s=3)
    with pytest.raises(ValueError, match="http"):
        JudgeConfig(base_url="localhost:8000/v1", model="m")
    assert JudgeConfig(base_url="http://x/v1/", model="m").base_url == "http://x/v1"


async def test_metrics_text_groups_families(scripted):
    judges = JudgeSet({"a": JudgeConfig(base_url=scripted.url, model="m"),
                       "b": JudgeConfig(base_url=scripted.url, model="m2")}, env_name="env")
    try:
        assert len(judges.endpoints) == 1  # same base_url: one pool, one breaker
        await judges["a"].ask([{"role": "user", "content": "is the sky blue?"}], yes_no)
        text = judges.metrics_text()
    finally:
        await judges.close()
    assert 'verigym_judge_calls_total{env="env",judge="a"} 1' in text
    assert 'verigym_judge_calls_total{env="env",judge="b"} 0' in text
    families = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(families) == len(set(families))  # each family declared once, samples grouped under it


def test_strip_think_and_label_finders():
    assert strip_think("<think>x [[NO]]</think>\n[[YES]]") == "[[YES]]"
    assert strip_think("reasoning whose opening tag was in the template</think> [[NO]]") == "[[NO]]"
    assert strip_think("<think>never closed [[YES]]") == ""
    assert strip_think("<thinking>a</thinking>b") == "b"
    assert find_label("either [[YES]] or [[NO]]... final: [[YES]]", YES_NO) is True
    assert find_label("Response harm: unharmful", {"harmful": 0, "unharmful": 1}) == 1
    assert find_label("nothing", YES_NO) is None
    harm = re.compile(r"Response harm:\s*(harmful|unharmful)", re.IGNORECASE)
    assert find_regex("Response harm: harmful\nResponse Harm: Unharmful", harm, {"unharmful": 1, "harmful": 0}) == 1
