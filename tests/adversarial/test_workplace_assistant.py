"""workplace_assistant: a gaming policy controls its tool calls (names, argument text, how many,
in what order) during a session, and the final response (text and function_call items). The
reward is the final state against the ground truth's replay. Attacks try to reach that state
without doing the task, or to change the state by a route the tools do not offer; the controls
are honest sessions and replays that must score 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servers.wire import response_from_text
from tests.adversarial.conftest import assert_refused, assert_scores

ENV = "workplace_assistant"
ROWS = [json.loads(line) for line in
        (Path(__file__).resolve().parents[2] / "environments/workplace_assistant/data/example.jsonl").read_text().splitlines()]
REASSIGN = next(r for r in ROWS if len(r["ground_truth"]) > 1 and "update_customer" in r["ground_truth"][0]["name"])
RENAME = next(r for r in ROWS if r["ground_truth"][0]["name"] == "calendar_update_event")
ROW = {k: v for k, v in REASSIGN.items() if k not in ("response", "_expected")}
GT = [(c["name"], json.loads(c["arguments"]) if isinstance(c["arguments"], str) else c["arguments"])
      for c in REASSIGN["ground_truth"]]
FIRST_ID = GT[0][1]["customer_id"]
NEW_EMAIL = GT[0][1]["new_value"]


def with_calls(*calls: tuple[str, object]) -> dict:
    """A final response whose output carries ``calls`` as function_call items."""
    return {**response_from_text("Done."), "output": [
        *({"type": "function_call", "name": name, "call_id": f"c{i}",
           "arguments": args if isinstance(args, str) else json.dumps(args)} for i, (name, args) in enumerate(calls)),
        *response_from_text("Done.")["output"]]}


def seeded_customer(customer_id: str) -> dict:
    """The seed workplace's record (what the policy could read with the search tools)."""
    from environments.workplace_assistant.seed import fresh_copy
    db = fresh_copy(0)
    try:
        cursor = db.execute("SELECT * FROM customers WHERE customer_id = ?", (customer_id,))
        return dict(zip([d[0] for d in cursor.description], cursor.fetchone()))
    finally:
        db.close()


async def session_reply(env, row, calls, response=None):
    sid = await env.seed(row)
    for name, args in calls:
        await env.tool(name, args, sid)  # a refused call answers {"error": ...}: the session goes on
    return await env.verify(row, response or "Done.", sid)


# ---- routes the tools do not offer -------------------------------------------------------------------
SQL = [
    ("customer_relationship_manager_update_customer",
     {"customer_id": FIRST_ID, "field": f"assigned_to_email = '{NEW_EMAIL}' --", "new_value": NEW_EMAIL}),
    ("customer_relationship_manager_update_customer",
     {"customer_id": f"{FIRST_ID}' OR '1'='1", "field": "assigned_to_email", "new_value": NEW_EMAIL}),
    ("customer_relationship_manager_search_customers", {"customer_name": "x'; UPDATE customers SET assigned_to_email="
                                                                          f"'{NEW_EMAIL}'; --"}),
]


async def test_attack_sql_through_tool_arguments(scorer):
    env = await scorer(ENV)
    reply = await session_reply(env, ROW, SQL)
    assert_refused(reply)
    assert len(reply["state_diff"]) >= len(GT)  # nothing of the task got done through the injection


MALFORMED = ['{"customer_id": "%s", "field": "assigned_to_email", "new_value": NaN}' % FIRST_ID,
             '{"customer_id": "%s", "field": "assigned_to_email", "new_value": "%s"} trailing' % (FIRST_ID, NEW_EMAIL),
             json.dumps(json.dumps({"customer_id": FIRST_ID, "field": "assigned_to_email", "new_value": NEW_EMAIL})),
             "{'customer_id': '%s', 'field': 'assigned_to_email', 'new_value': '%s'}" % (FIRST_ID, NEW_EMAIL)]


@pytest.mark.parametrize("arguments", MALFORMED, ids=["nan", "trailing_text", "double_encoded", "python_repr"])
async def test_attack_malformed_arguments_in_a_replayed_response(scorer, arguments):
    # Without a session the response's calls are replayed: arguments a lenient parser would take
    # (NaN, text after the object, a JSON string of JSON, a Python dict) change nothing.
    env = await scorer(ENV)
    calls = [("customer_relationship_manager_update_customer", arguments), *GT[1:]]
    assert_refused(await env.verify(ROW, with_calls(*calls)))


# ---- reaching the state without doing the task ------------------------------------------------------
async def test_attack_spray_the_update_over_every_customer(scorer):
    # Reassign far more customers than asked: the ground truth's ones are among them, so is the rest.
    env = await scorer(ENV)
    ids = sorted({f"{i:08d}" for i in range(1, 200)} | {args["customer_id"] for _, args in GT})
    spray = [("customer_relationship_manager_update_customer",
              {"customer_id": cid, "field": "assigned_to_email", "new_value": NEW_EMAIL}) for cid in ids]
    assert_refused(await env.verify(ROW, with_calls(*spray)))


async def test_attack_function_calls_written_into_the_final_response_only(scorer):
    # In a session the session's state is scored: calls the final response merely lists never ran.
    env = await scorer(ENV)
    assert_refused(await session_reply(env, ROW, [], response=with_calls(*GT)))


async def test_attack_delete_and_recreate_the_records(scorer):
    # Deleting a seeded customer and adding one with the wanted values is not updating it.
    env = await scorer(ENV)
    sid = await env.seed(ROW)
    for name, args in GT[:1]:
        found = seeded_customer(args["customer_id"])
        await env.tool("customer_relationship_manager_delete_customer", {"customer_id": args["customer_id"]}, sid)
        fields = {k: v for k, v in found.items() if k != "customer_id" and v is not None}
        fields["assigned_to_email"] = NEW_EMAIL
        added = await env.tool("customer_relationship_manager_add_customer", fields, sid)
        assert "output" in added, added  # the look-alike record exists
    for name, args in GT[1:]:
        await env.tool(name, args, sid)
    assert_refused(await env.verify(ROW, "Done.", sid))


async def test_attack_answer_in_words_without_acting(scorer):
    env = await scorer(ENV)
    text = "I have reassigned all of Akira's leads to Raj: " + ", ".join(a["customer_id"] for _, a in GT) + "."
    assert_refused(await session_reply(env, ROW, [], response=text))


# ---- controls ---------------------------------------------------------------------------------------
async def test_control_honest_session(scorer):
    env = await scorer(ENV)
    assert_scores(await session_reply(env, ROW, GT))


async def test_control_honest_session_with_reads_and_a_refused_call(scorer):
    env = await scorer(ENV)
    calls = [("customer_relationship_manager_search_customers", {"assigned_to_email": GT[0][1]["new_value"]}),
             ("customer_relationship_manager_update_customer", {"customer_id": "99999999", "field": "status",
                                                                "new_value": "Lost"}),  # refused: no such customer
             *GT]
    assert_scores(await session_reply(env, ROW, calls))


async def test_control_replayed_response(scorer):
    env = await scorer(ENV)
    assert_scores(await env.verify(ROW, with_calls(*GT)))


async def test_control_other_row_rename_event(scorer):
    env = await scorer(ENV)
    row = {k: v for k, v in RENAME.items() if k not in ("response", "_expected")}
    calls = [(c["name"], json.loads(c["arguments"])) for c in RENAME["ground_truth"]]
    assert_scores(await session_reply(env, row, calls))
