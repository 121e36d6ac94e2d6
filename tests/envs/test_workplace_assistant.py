"""workplace_assistant: seed data, every tool, the state comparison, both state sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from environments.workplace_assistant.seed import fresh_copy, generate, largest_seed_ids
from environments.workplace_assistant.state import TOOLS, Workplace, diff_states, run_call
from servers import registry
from servers.environment import ToolError
from servers.service import EnvService
from servers.wire import response_from_text

REAL_ROWS = [json.loads(line) for line in
             Path("/work/shared/data/nemo_gym/workplace_assistant/example.jsonl").read_text().splitlines()] \
    if Path("/work/shared/data/nemo_gym/workplace_assistant/example.jsonl").exists() else []
EXAMPLES = [json.loads(line) for line in (Path(__file__).parents[2] / "environments" / "workplace_assistant" /
                                          "data" / "example.jsonl").read_text().splitlines()]
ROW_TOOLS = EXAMPLES[0]["responses_create_params"]["tools"]


@pytest.fixture
def wp():
    workplace = Workplace(fresh_copy(0))
    yield workplace
    workplace.close()


def test_tools_match_the_row_schemas():
    assert len(TOOLS) == 27
    for schema in ROW_TOOLS:
        ours = TOOLS[schema["name"]].args_model.model_json_schema()
        params = schema["parameters"]
        assert set(ours["properties"]) == set(params["properties"]), schema["name"]
        assert set(ours.get("required", [])) == set(params["required"]), schema["name"]
    env_cls = registry.get("workplace_assistant").load_class()
    assert set(env_cls.tools()) == {t["name"] for t in ROW_TOOLS}


def test_seed_is_deterministic_and_seed_dependent():
    assert generate(0) == generate(0)
    assert generate(0)["customers"] != generate(1)["customers"]
    # pinned records are the same under every seed
    for seed in (0, 1):
        customers = {c["customer_id"]: c for c in generate(seed)["customers"]}
        assert customers["00000095"]["assigned_to_email"] == "akira.tanaka@atlas.com"


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_example_tasks_have_exactly_the_pinned_answers(seed):
    w = Workplace(fresh_copy(seed))
    search = "customer_relationship_manager_search_customers"
    ids = lambda out: sorted(c["customer_id"] for c in out)  # noqa: E731
    assert ids(run_call(w, search, {"assigned_to_email": "akira.tanaka@atlas.com", "status": "Lead",
                                    "product_interest": "Software", "page_size": 100})) == ["00000035", "00000080", "00000095"]
    assert ids(run_call(w, search, {"assigned_to_email": "lena.schmidt@atlas.com", "status": "Won",
                                    "product_interest": "Services", "page_size": 100})) == \
        ["00000009", "00000039", "00000047", "00000112"]
    assert ids(run_call(w, search, {"status": "Proposal", "product_interest": "Hardware",
                                    "last_contact_date_max": "2023-11-02", "page_size": 100})) == \
        ["00000037", "00000058", "00000088", "00000132", "00000195"]
    day = run_call(w, "calendar_search_events", {"time_min": "2023-12-01 00:00:00",
                                                 "time_max": "2023-12-01 23:59:59", "page_size": 100})
    assert day[-1]["event_id"] == "00000252"
    mails = run_call(w, "email_search_emails", {"query": "carlos report generation", "page_size": 100})
    assert mails[0]["email_id"] == "00000057"  # newest first: carlos's *last* email on it
    w.close()


def test_real_rows_ground_truth_replays_on_the_seed(wp):
    assert REAL_ROWS, "shared NeMo-Gym rows missing"
    for row in REAL_ROWS:
        for call in row["ground_truth"]:
            run_call(wp, call["name"], call["arguments"])  # raises ToolError if the seed lacks a record


@pytest.mark.parametrize("name,args,expect", [
    ("company_directory_find_email_address", {"name": "lena"}, ["lena.schmidt@atlas.com"]),
    ("email_get_email_information_by_id", {"email_id": "00000057", "field": "sender/recipient"},
     {"sender/recipient": "carlos.rodriguez@atlas.com"}),
    ("calendar_get_event_information_by_id", {"event_id": "00000252", "field": "duration"}, {"duration": "30"}),
    ("project_management_get_task_information_by_id", {"task_id": "00000042", "field": "task_name"},
     {"task_name": "Develop prototype for report generation"}),
    ("analytics_create_plot", {"time_min": "2023-11-01", "time_max": "2023-11-07", "value_to_plot": "total_visits",
                               "plot_type": "bar"}, "plots/2023-11-01_2023-11-07_total_visits_bar.png"),
    ("calendar_create_event", {"event_name": "Sync", "participant_email": "raj.patel@atlas.com",
                               "event_start": "2023-12-04 10:00:00", "duration": "30"}, "00000300"),
    ("customer_relationship_manager_add_customer", {"customer_name": "New Co", "assigned_to_email":
                                                    "raj.patel@atlas.com", "status": "Lead"}, "00000200"),
])
def test_tool_outputs(wp, name, args, expect):
    assert run_call(wp, name, args) == expect


@pytest.mark.parametrize("name,args,message", [
    ("email_reply_email", {"email_id": "12345678", "body": "hi"}, "not found"),
    ("email_get_email_information_by_id", {"email_id": "00000057", "field": "cc"}, "field 'cc' not found"),
    ("email_search_emails", {"date_min": "30/11/2023"}, "not in format YYYY-MM-DD"),
    ("calendar_update_event", {"event_id": "00000252", "field": "duration", "new_value": "soon"}, "positive whole"),
    ("project_management_create_task", {"task_name": "x", "assigned_to_email": "nobody@atlas.com",
                                        "list_name": "Backlog", "due_date": "2023-12-01", "board": "Design"},
     "not in the company directory"),
    ("customer_relationship_manager_update_customer", {"customer_id": "00000001", "field": "status",
                                                       "new_value": "Maybe"}, "is not one of"),
    ("analytics_create_plot", {"time_min": "2023-11-01", "time_max": "2023-11-07", "value_to_plot": "x",
                               "plot_type": "bar"}, "value_to_plot"),
    ("email_send_email", {"recipient": "raj", "subject": "s"}, "body: Field required"),
    ("email_delete_email", {"email_id": "00000001", "force": True}, "force: Extra inputs"),
    ("no_such_tool", {}, "unknown tool"),
    ("email_delete_email", "{not json", "not valid JSON"),
])
def test_tool_errors_change_nothing(wp, name, args, message):
    with pytest.raises(ToolError, match=message):
        run_call(wp, name, args)
    assert wp.dirty == set()


def test_diff_rules():
    seeded = largest_seed_ids(0)
    a, b = Workplace(fresh_copy(0)), Workplace(fresh_copy(0))
    # case and surrounding whitespace do not matter
    run_call(a, "calendar_update_event", {"event_id": "00000252", "field": "event_name", "new_value": "RISK forum "})
    run_call(b, "calendar_update_event", {"event_id": "00000252", "field": "event_name", "new_value": "risk forum"})
    # created rows: same content in another order, different generated ids -> same state
    for w, order in ((a, ("A", "B")), (b, ("B", "A"))):
        for name in order:
            run_call(w, "project_management_create_task", {"task_name": name, "assigned_to_email": "raj.patel@atlas.com",
                                                           "list_name": "Backlog", "due_date": "2023-12-15",
                                                           "board": "Design"})
    assert diff_states(a, b, seeded) == []
    # the wrong seeded row is a difference, reported by id and column
    run_call(a, "customer_relationship_manager_update_customer", {"customer_id": "00000001", "field": "notes",
                                                                  "new_value": "vip"})
    run_call(b, "customer_relationship_manager_update_customer", {"customer_id": "00000002", "field": "notes",
                                                                  "new_value": "vip"})
    assert diff_states(a, b, seeded) == ["customers 00000001: notes is 'vip', expected ''",
                                         "customers 00000002: notes is '', expected 'vip'"]
    assert len(diff_states(a, b, seeded, limit=1)) == 2  # one line + "... and 1 more differences"
    a.close(), b.close()


def _response_with_calls(calls):
    response = response_from_text("Done.")
    response["output"] = [{"type": "function_call", "name": c["name"], "arguments": c["arguments"],
                           "call_id": f"c{i}"} for i, c in enumerate(calls)] + response["output"]
    return response


@pytest.mark.parametrize("state_source", ["auto", "response"])
async def test_stateless_verify_replays_the_response(state_source):
    service = EnvService(registry.instantiate("workplace_assistant", overrides={"state_source": state_source}))
    await service.start()
    try:
        for row in REAL_ROWS:
            good = {**row, "response": _response_with_calls(row["ground_truth"])}
            status, reply = await service.verify(good)
            assert status == 200 and reply["reward"] == 1.0 and reply["state_source"] == "response"
            bad_calls = row["ground_truth"][:-1] + [{"name": "email_delete_email", "arguments": "{\"email_id\": \"x\"}"}]
            status, reply = await service.verify({**row, "response": _response_with_calls(bad_calls)})
            assert reply["reward"] == 0.0 and reply["state_diff"]
    finally:
        await service.stop()


async def test_session_mode_without_session_is_a_failure_not_a_zero():
    service = EnvService(registry.instantiate("workplace_assistant", overrides={"state_source": "session"}))
    await service.start()
    try:
        status, reply = await service.verify({**REAL_ROWS[0], "response": response_from_text("ok")})
        assert status == 200 and reply["_ng_failure_class"] == "verifier_error"
        assert reply["instance_config"]["mask_sample"] is True
    finally:
        await service.stop()


async def test_invalid_tool_arguments_over_service_are_422_and_tool_errors_are_200():
    service = EnvService(registry.instantiate("workplace_assistant"))
    await service.start()
    try:
        _, _, sid = await service.seed_session(REAL_ROWS[0])
        status, body = await service.call_tool("calendar_delete_event", {"event_id": 252}, sid)
        assert status == 422 and body["detail"][0]["loc"] == "event_id"
        status, body = await service.call_tool("calendar_delete_event", {"event_id": "99999999"}, sid)
        assert (status, body) == (200, {"error": "event ID '99999999' not found"})
    finally:
        await service.stop()
