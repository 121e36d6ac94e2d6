"""The NeMo-Gym >= 0.7 resources contract beside the legacy one, over real HTTP (probe env):
seed/close with caller-assigned ids, the top-level failure fields, and what a row the server
cannot score gets (a masked sample inside a rollout, a 422 for a bare verify). The same
behaviour against the real, installed NeMo-Gym is in tests/gym/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from servers import registry
from servers.app import start_server
from servers.wire import (GYM_FAILURE_KINDS, SESSION_COOKIE, UNSCORABLE_HEADER, FailureClass, failure_fields,
                          gym_failure_kind, response_from_text)

ENV_DIR = Path(__file__).parent / "server_envs"
EPISODE = {"rollout_id": "7-0", "attempt": 0}
TASK = {"taskset": "probe", "task_id": "7"}


@pytest.fixture
async def server(monkeypatch):
    monkeypatch.setenv("VERIGYM_ENV_PATH", str(ENV_DIR))
    running = await start_server(registry.instantiate("probe", overrides={"cpu_workers": 1}))
    yield running
    await running.stop(drain_timeout=5)


@pytest.fixture
async def http():
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session:
        yield session


def task_row(**fields: Any) -> dict[str, Any]:
    return {"responses_create_params": {"input": [{"role": "user", "content": "q"}]}, **fields}


async def post(http, url: str, body: Any, *, cookie: str | None = None, headers: dict[str, str] | None = None):
    cookies = {SESSION_COOKIE: cookie} if cookie else None
    async with http.post(url, json=body, cookies=cookies, headers=headers) as r:
        return r.status, await r.json(), r.cookies.get(SESSION_COOKIE)


def seed_body(rsid: str, episode: dict[str, Any] = EPISODE, **row: Any) -> dict[str, Any]:
    return {"resources_session_id": rsid, "episode_id": episode, "task_id": TASK,
            "task_data": task_row(mode="session", target=3, **row)}


async def test_seed_and_close_in_gym_07s_contract(server, http):
    url = server.url
    status, reply, cookie = await post(http, url + "/seed_session", seed_body("rs-1", tag="from-task-data"))
    assert status == 200 and reply == {"resources_session_id": "rs-1"} and cookie is not None
    cookie = cookie.value
    # the row came from task_data: the session state was built from it
    status, out, _ = await post(http, url + "/bump", {"by": 2}, cookie=cookie)
    assert (status, out) == (200, {"count": 2, "tag": "from-task-data"})
    # the same id and episode again: the same session (a retried seed whose reply was lost)
    status, reply, again = await post(http, url + "/seed_session", seed_body("rs-1", tag="from-task-data"))
    assert status == 200 and reply == {"resources_session_id": "rs-1"} and again.value == cookie
    # the same id for another episode is refused
    status, reply, _ = await post(http, url + "/seed_session", seed_body("rs-1", {"rollout_id": "8-0", "attempt": 0}))
    assert status == 409 and "another episode" in reply["error"]
    await post(http, url + "/bump", {"by": 1}, cookie=cookie)
    # verify reads the session the 0.7 seed built, like a legacy one
    status, reply, _ = await post(http, url + "/verify", task_row(mode="session", target=3,
                                                                  response=response_from_text("x")), cookie=cookie)
    assert status == 200 and reply["reward"] == 1.0 and reply["count"] == 3
    close = {"resources_session_id": "rs-1", "episode_id": EPISODE}
    for _ in range(2):  # idempotent
        status, reply, _ = await post(http, url + "/close_session", close, cookie=cookie)
        assert (status, reply) == (200, {"resources_session_id": "rs-1"})
    status, reply, _ = await post(http, url + "/seed_session", seed_body("rs-1"))
    assert status == 409 and "was closed" in reply["error"]  # a late seed cannot recreate a closed session
    # a close for an id never seeded keeps a later seed of it out
    status, _, _ = await post(http, url + "/close_session", {"resources_session_id": "rs-2", "episode_id": EPISODE})
    assert status == 200
    status, _, _ = await post(http, url + "/seed_session", seed_body("rs-2"))
    assert status == 409
    status, reply, _ = await post(http, url + "/close_session", {"resources_session_id": "rs-3"})
    assert status == 422 and reply["detail"][0]["loc"] == "episode_id"
    assert len(server.server.service.sessions) == 0


async def test_close_frees_the_sessions_state(server, http):
    from verigym_external_probe.verifier import CLOSED  # imported by the registry under this name

    status, _, cookie = await post(http, server.url + "/seed_session", seed_body("rs-free", tag="freed"))
    assert status == 200 and len(server.server.service.sessions) == 1
    status, _, _ = await post(http, server.url + "/close_session", {"resources_session_id": "rs-free",
                                                                    "episode_id": EPISODE})
    assert status == 200 and len(server.server.service.sessions) == 0
    assert CLOSED and CLOSED[-1]["tag"] == "freed"
    status, body, _ = await post(http, server.url + "/bump", {"by": 1}, cookie=cookie.value)
    assert status == 410, body


def test_failure_kinds_map_every_class_to_gyms_vocabulary():
    assert set(GYM_FAILURE_KINDS) == set(FailureClass)
    registered = {"verifier_error", "judge_failed", "judge_unparseable", "provider_unavailable",
                  "transport_unreachable"}  # names from nemo_gym.failure_kinds (0.7)
    for cls in FailureClass:
        kind = gym_failure_kind(cls)
        assert kind in registered or kind.startswith("verigym:"), kind
    assert gym_failure_kind(FailureClass.JUDGE_ERROR, "unparseable") == "judge_unparseable"
    assert gym_failure_kind("prompt_too_long") == "verigym:prompt_too_long"
    fields = failure_fields(FailureClass.INVALID_ROW, "bad")
    assert fields["_ng_failure_terminal"] is True and fields["mask_sample"] is True
    assert set(failure_fields(FailureClass.TIMEOUT, "slow", legacy=False)) == {"mask_sample", "failure_kind",
                                                                                "failure_reason"}


async def test_failure_replies_carry_gyms_fields_beside_the_legacy_ones(server, http):
    status, reply, _ = await post(http, server.url + "/verify", task_row(mode="raise", response=response_from_text("x")))
    assert status == 200 and reply["reward"] == 0.0
    assert (reply["mask_sample"], reply["failure_kind"], reply["_ng_failure_class"]) == (True, "verifier_error",
                                                                                         "verifier_error")
    assert "exploded on purpose" in reply["failure_reason"] and reply["instance_config"] == {"mask_sample": True}
    assert "_ng_failure_terminal" not in reply  # a verifier bug may pass on a retry
    # in a session seeded through Gym 0.7's contract the _ng_* keys stay out: its collector
    # refuses an environment-server result carrying keys reserved for it
    _, _, cookie = await post(http, server.url + "/seed_session", seed_body("rs-raise"))
    status, reply, _ = await post(http, server.url + "/verify", task_row(mode="raise", response=response_from_text("x")),
                                  cookie=cookie.value)
    assert status == 200 and reply["mask_sample"] is True and reply["failure_kind"] == "verifier_error"
    assert not [k for k in reply if k.startswith("_ng_")] and reply["instance_config"]["mask_sample"] is True


async def test_an_unscorable_row_is_a_422_for_a_bare_verify_and_masked_inside_a_rollout(server, http):
    bad = task_row(mode="no-such-mode", response=response_from_text("x"))
    status, reply, _ = await post(http, server.url + "/verify", bad)
    assert status == 422 and reply["detail"][0]["loc"] == "mode"
    # the caller asks for the mask
    status, reply, _ = await post(http, server.url + "/verify", bad, headers={UNSCORABLE_HEADER: "mask"})
    assert status == 200 and reply["reward"] == 0.0 and reply["mask_sample"] is True
    assert reply["failure_kind"] == "verigym:invalid_row" and reply["_ng_failure_class"] == "invalid_row"
    assert reply["_ng_failure_terminal"] is True and "mode" in reply["failure_reason"]
    assert reply["mode"] == "no-such-mode"  # the request is echoed as always
    # inside a rollout (Gym's agents seed first): masked without asking; the seed itself is a 200
    seed = {k: v for k, v in bad.items() if k != "response"}
    status, _, cookie = await post(http, server.url + "/seed_session", seed)
    assert status == 200 and cookie is not None
    status, out, _ = await post(http, server.url + "/bump", {"by": 1}, cookie=cookie.value)
    assert status == 200 and "cannot be run" in out["error"]  # the model sees why; no state was built
    status, reply, _ = await post(http, server.url + "/verify", bad, cookie=cookie.value)
    assert status == 200 and reply["failure_kind"] == "verigym:invalid_row" and "mode" in reply["failure_reason"]
    assert len(server.server.service.sessions) == 0
    # the caller asks for the 422, in a session too
    status, _, _ = await post(http, server.url + "/seed_session", seed, headers={UNSCORABLE_HEADER: "reject"})
    assert status == 200  # the probe's seed does not read `mode`: only the verify refuses it
    status, reply, _ = await post(http, server.url + "/verify", bad, headers={UNSCORABLE_HEADER: "Reject"})
    assert status == 422
    status, reply, _ = await post(http, server.url + "/verify", bad, headers={UNSCORABLE_HEADER: "sometimes"})
    assert status == 400 and UNSCORABLE_HEADER in reply["error"]
    async with http.get(server.url + "/metrics") as r:
        metrics = await r.text()
    assert 'verigym_failures_total{env="probe",class="invalid_row"} 2' in metrics  # the two masked answers


async def test_an_unscorable_row_through_gym_07s_seed_is_masked_without_legacy_keys(server, http):
    body = seed_body("rs-bad")
    body["task_data"]["mode"] = "no-such-mode"
    status, _, cookie = await post(http, server.url + "/seed_session", body)
    assert status == 200
    status, reply, _ = await post(http, server.url + "/verify", {**body["task_data"], "response": response_from_text("x")},
                                  cookie=cookie.value)
    assert status == 200 and reply["mask_sample"] is True and reply["failure_kind"] == "verigym:invalid_row"
    assert not [k for k in reply if k.startswith("_ng_")]


ODD_ROWS = {  # the three rows NeMo-Gym's own servers score (each env's README has the decision)
    "instruction_following": ({"instruction_id_list": ["words:start_verb"], "kwargs": [None],
                               "prompt": "Start with a verb."}, "refused"),
    "code": ({"verifier_metadata": {"unit_tests": {"inputs": ["1\n"], "outputs": []}}}, "refused"),
    "mcqa": ({"options": [{"A": "Venus", "B": "Mars"}, {"CC": "x"}], "expected_answer": "B"}, "scored"),
}


@pytest.mark.parametrize("env", sorted(ODD_ROWS))
async def test_the_odd_rows_gym_scores_are_decided_per_environment(env, http):
    from trainer.env_catalog import validate_rows

    fields, decision = ODD_ROWS[env]
    row = {"responses_create_params": {"input": [{"role": "user", "content": "q"}]}, **fields}
    reason = validate_rows([(env, row)])[0]
    assert (reason is None) is (decision == "scored")  # driver data prep rejects a refused row up front
    running = await start_server(registry.instantiate(env))
    try:
        body = {**row, "response": response_from_text("\\boxed{B}")}
        status, reply, _ = await post(http, running.url + "/verify", body)
        if decision == "scored":
            assert status == 200 and reply["reward"] == 1.0 and "mask_sample" not in reply
            return
        assert status == 422
        status, reply, _ = await post(http, running.url + "/verify", body, headers={UNSCORABLE_HEADER: "mask"})
        assert status == 200 and reply["mask_sample"] is True and reply["failure_kind"] == "verigym:invalid_row"
        assert reply["reward"] == 0.0 and reply["failure_reason"].startswith("the row does not match")
    finally:
        await running.stop(drain_timeout=5)


async def test_a_tool_reply_carries_the_session_cookie_again(server, http):
    """Gym's simple_agent (<= 0.6) calls the next tool, and verifies, with the cookies of the last
    resources reply: every tool reply in a session must set the session cookie again."""
    status, _, cookie = await post(http, server.url + "/seed_session", task_row(mode="session", target=2))
    assert status == 200
    for expected in (1, 2):
        status, out, again = await post(http, server.url + "/bump", {"by": 1}, cookie=cookie.value)
        assert (status, out["count"]) == (200, expected) and again is not None and again.value == cookie.value
        cookie = again
    status, reply, _ = await post(http, server.url + "/verify", task_row(mode="session", target=2,
                                                                        response=response_from_text("x")),
                                  cookie=cookie.value)
    assert reply["reward"] == 1.0 and reply["count"] == 2
