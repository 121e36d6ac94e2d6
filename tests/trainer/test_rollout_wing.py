"""The rollout wing's records and seams (trainer/rollout/, docs/trainer-rollout.md): one task record
routed once from data prep's manifest, one sample record whose group keeps its prompt, the generator
interface a backend implements, one retry policy for the calls to environment servers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
import yaml
from aiohttp import web

from trainer.config import load_config
from trainer.data_prep import PrepOptions, prepare
from trainer.blends import load_blend
from trainer.policy import Policy, PolicyConfig, TinyModelConfig, load_policy
from trainer.rollout import generator as generator_module
from trainer.rollout.batch import BatchSettings, run_batch
from trainer.rollout.episode import prompt_ids
from trainer.rollout.generator import Generation, Generator, SamplingParams, make_generator
from trainer.rollout.local_generator import LocalGenerator
from trainer.rollout.scoring import EnvCalls, EnvInfo, RetryPolicy
from trainer.rollout.task import Routes, TaskError, make_task, make_tasks, routes_of

FIXTURES = Path(__file__).parent / "fixture_envs"
SMALL = TinyModelConfig(num_hidden_layers=1, hidden_size=64, intermediate_size=128)


def _row(text: str, agent: str | None = None, **extra) -> dict:
    row = {"responses_create_params": {"input": [{"role": "user", "content": text}]}, **extra}
    if agent:
        row["agent_ref"] = {"type": "responses_api_agents", "name": agent}
    return row


# ---- row -> task ---------------------------------------------------------------------------------
def test_one_routing_rule():
    routes = Routes({"math_simple_agent": "math"}, default_env="reasoning_gym")
    assert routes.env_for(_row("q", "math_simple_agent")) == "math"
    assert routes.env_for(_row("q", "code")) == "code"  # a name no route declares is the environment's own
    assert routes.env_for(_row("q")) == "reasoning_gym"  # no agent_ref: the blend's default_env
    assert routes.env_for(_row("q", env="mcqa")) == "mcqa"  # no agent_ref: an env field may name it
    assert routes.env_for(_row("q", "math_simple_agent", env="mcqa")) == "math"  # agent_ref first, as data prep
    assert Routes().env_for(_row("q")) is None
    with pytest.raises(TaskError, match="row 3 routes to no environment"):
        make_tasks([_row("a", "x"), _row("b", "x"), _row("c")], Routes())


def test_a_task_keeps_the_row_as_the_server_gets_it():
    task = make_task(_row("q", "math_simple_agent", _ng_task_index=7, _verigym_reasoning={"mode": "off"},
                          expected_answer="4"), 0, Routes({"math_simple_agent": "math"}))
    assert (task.id, task.env) == ("7", "math")
    assert task.tags == {"_verigym_reasoning": {"mode": "off"}}
    assert not any(k.startswith("_verigym_") for k in task.row) and task.row["_ng_task_index"] == 7
    assert make_task(_row("q", "m"), 4, Routes()).id == "4"  # no _ng_task_index: the row's position


def test_tasks_are_routed_by_the_routes_data_prep_wrote(tmp_path, monkeypatch):
    """Data prep routes once and writes its routes (agent_map, default_env) into manifest.json; the
    trainer's tasks are built from them, and agree with data prep's own counts per environment."""
    monkeypatch.setenv("VERIGYM_ENV_PATH", str(FIXTURES))
    rows = [_row(f"say {i}", "answer_match_simple_agent", expected_answer=str(i)) for i in range(4)]
    rows += [_row(f"say {i}", expected_answer=str(i)) for i in range(4, 6)]  # no agent_ref: default_env
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {"sources": [{"path": str(tmp_path / "rows.jsonl")}], "split": {"val_holdout": 2},
            "agent_map": {"answer_match_simple_agent": "answer_match"}, "default_env": "answer_match"}
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    result = prepare(load_blend(str(tmp_path / "b.yaml")), PrepOptions(output=out, progress=False))
    assert result.manifest["default_env"] == "answer_match"
    routes = routes_of(out)
    assert routes is not None and routes_of(tmp_path) is None
    def rows(name: str) -> list[dict]:
        return [json.loads(line) for line in (out / name).read_text().splitlines() if line.strip()]

    train, val = make_tasks(rows("train.jsonl"), routes), make_tasks(rows("val.jsonl"), routes)
    assert {t.env for t in train + val} == {"answer_match"}
    assert len(train) == result.manifest["counts"]["train_per_env"]["answer_match"]
    assert len(val) == result.manifest["counts"]["val_per_env"]["answer_match"]


# ---- episode -> sample -> group --------------------------------------------------------------------
def test_every_sample_of_a_group_has_its_prompt():
    """NeMo-RL groups by prompt tokens: a group is K episodes of one task, so its samples share the
    task's first prompt by construction (and the group says which it is)."""
    cfg = load_config("tiny", ["policy.generation.max_new_tokens=4"])
    policy = load_policy(cfg, 1)
    tasks = make_tasks([_row(f"{a}+{a}=", "math") for a in range(3)], Routes())
    per_task = run_batch(make_generator(policy), EnvInfo({}), tasks, 3, SamplingParams.from_config(cfg.policy.generation),
                         BatchSettings.from_config(cfg), seed=0)
    assert [len(g) for g in per_task] == [3, 3, 3]
    for task, samples in zip(tasks, per_task):
        assert all(s.prompt_ids == prompt_ids(policy, task.row) for s in samples)
        assert all(s.env == task.env and s.response is not None and not s.scored for s in samples)


# ---- the generator seam ----------------------------------------------------------------------------
class CountingGenerator(Generator):
    """A second backend, for this test only: 'decodes' by counting up from the prompt's last token.
    It implements the interface and nothing else, so a batch, its episodes and its samples run on it
    unchanged: what adding a backend takes (one class, one line in BACKENDS)."""

    def __init__(self, policy: Policy, *, in_flight: bool = False, step: int = 1):
        self.policy, self.step = policy, step  # loads weights between batches only (in_flight ignored)
        self.stats = {"generated_tokens": 0, "weight_updates": 0, "in_flight_updates": 0, "weight_load_seconds": 0.0}
        self._received = None

    @property
    def version(self) -> int:
        return self.policy.version

    def receive_weights(self, version, load):
        self._received = (version, load)

    def load_received_weights(self):
        if self._received:
            self.policy.model.load_state_dict(self._received[1]())
            self.policy.version, self._received = self._received[0], None
            self.stats["weight_updates"] += 1

    def episodes(self, count, seed, max_batch=None):
        outer = self

        class Turns:
            policy = outer.policy

            def for_episode(self, index):
                return self

            def finished(self):
                pass

            async def generate(self, prompt_ids, params):
                return await outer.generate(prompt_ids, params)

        return Turns()

    async def generate(self, prompt_ids, params):
        ids = [(prompt_ids[-1] + self.step * (i + 1)) % 200 + 10 for i in range(params.max_new_tokens)]
        self.stats["generated_tokens"] += len(ids)
        return Generation(list(prompt_ids), ids, [-1.0] * len(ids), [self.version] * len(ids),
                          self.policy.decode(ids, skip_special_tokens=True), "length")


def test_a_backend_is_one_class_and_one_registration_line(monkeypatch):
    monkeypatch.setitem(generator_module.BACKENDS, "counting", f"{__name__}:CountingGenerator")
    cfg = load_config("tiny", ["policy.generation.max_new_tokens=3"])
    policy = Policy.load(PolicyConfig(tiny=SMALL))
    gen = make_generator(policy, "counting", step=2)
    assert isinstance(gen, CountingGenerator) and gen.step == 2
    new = {k: v + 1.0 for k, v in policy.model.state_dict().items()}
    gen.receive_weights(5, lambda: new)
    gen.load_received_weights()
    [[sample]] = run_batch(gen, EnvInfo({}), [make_task(_row("x", "math"), 0, Routes())], 1,
                           SamplingParams.from_config(cfg.policy.generation), BatchSettings.from_config(cfg), seed=0)
    last = sample.prompt_ids[-1]
    assert sample.gen_ids == [(last + 2 * i) % 200 + 10 for i in (1, 2, 3)] and sample.versions == [5, 5, 5]
    with pytest.raises(ValueError, match="registered: counting, local"):
        make_generator(policy, "vllm")


def test_the_local_backend_loads_the_newest_weights_between_batches_or_in_flight():
    policy = Policy.load(PolicyConfig(tiny=SMALL))
    states = {v: {k: t + v for k, t in policy.model.state_dict().items()} for v in (1, 2, 3)}
    gen = LocalGenerator(policy)
    gen.receive_weights(2, lambda: states[2])
    gen.receive_weights(1, lambda: states[1])  # older than what waits: ignored
    assert gen.version == 0
    gen.load_received_weights()
    assert gen.version == 2 and torch.equal(next(iter(policy.model.state_dict().values())), next(iter(states[2].values())))
    assert gen.stats["weight_updates"] == 1 and gen.stats["in_flight_updates"] == 0
    in_flight = LocalGenerator(policy, in_flight=True, on_step=lambda step: step == 2 and in_flight.receive_weights(
        3, lambda: states[3]))
    [g] = in_flight.decode([[5, 6, 7]], [SamplingParams(max_new_tokens=5)], policy.make_rng(0))
    assert g.versions == [2, 2, 3, 3, 3] and in_flight.stats["in_flight_updates"] == 1


# ---- one retry policy --------------------------------------------------------------------------------
@pytest.fixture
async def flaky_server():
    """A real HTTP server: /verify answers 503 (Retry-After 0) once, then scores; /bad_tool always 422."""
    hits: dict[str, int] = {"verify": 0, "bad_tool": 0}

    async def verify(request: web.Request) -> web.Response:
        hits["verify"] += 1
        if hits["verify"] == 1:
            return web.json_response({"error": "busy"}, status=503, headers={"Retry-After": "0"})
        return web.json_response({**await request.json(), "reward": 1.0})

    async def bad_tool(request: web.Request) -> web.Response:
        hits["bad_tool"] += 1
        return web.json_response({"error": "no such argument"}, status=422)

    app = web.Application()
    app.add_routes([web.post("/verify", verify), web.post("/bad_tool", bad_tool)])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}", hits
    await runner.cleanup()


async def test_a_503_is_retried_by_the_one_policy_and_a_4xx_is_an_answer(flaky_server):
    from servers.client import SessionHandle

    url, hits = flaky_server
    async with EnvCalls({"e": url}, retry=RetryPolicy(2, backoff_s=0.01)) as env:
        reply, retried = await env.verify("e", {"x": 1}, {"output": []})
        assert reply["reward"] == 1.0 and retried == 1 and hits["verify"] == 2
        status, body = await env.call_tool(SessionHandle("e", url, "s1"), "bad_tool", {"a": 1})
    assert status == 422 and body == {"error": "no such argument"} and hits["bad_tool"] == 1


def test_the_retry_policy_waits_what_a_503_asks():
    policy = RetryPolicy(3, backoff_s=0.1, max_backoff_s=0.3)
    assert [policy._wait(n, None) for n in range(3)] == [0.1, 0.2, 0.3]
    assert policy._wait(0, 1.0) == 1.0  # Retry-After: 1 wins over a shorter backoff


def test_retry_policy_run_counts_retries_and_stops_when_the_result_stands():
    calls = []

    async def attempt():
        calls.append(1)
        return len(calls), (0.0 if len(calls) < 3 else None)

    assert asyncio.run(RetryPolicy(5, backoff_s=0.0).run(attempt)) == (3, 2)
    calls.clear()
    assert asyncio.run(RetryPolicy(1, backoff_s=0.0).run(attempt)) == (2, 1)  # out of retries: the failure stands


# ---- the map a newcomer reads ----------------------------------------------------------------------

def _doc_names_today(text: str) -> str:
    """The doc without the "was" column of its what-moved-where table (names that no longer exist)
    and without its ```python examples (a backend that does not exist)."""
    lines, example = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            example = line == "```python"
            continue
        if example:
            continue
        cells = line.split("|")
        lines.append(cells[2] if line.startswith("| `") and len(cells) > 3 else line)
    return "\n".join(lines)


def _config_key(name: str) -> bool:
    """Whether ``name`` is a key of the run config (``policy.generation.server.url``)."""
    from pydantic import BaseModel

    from trainer.config import MasterConfig

    model: type[BaseModel] | None = MasterConfig
    for part in name.split("."):
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            return False
        ann = field.annotation
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
    return True


def test_the_rollout_doc_names_only_files_and_functions_that_exist():
    import importlib
    import re

    root = Path(__file__).resolve().parents[2]
    text = _doc_names_today((root / "docs" / "trainer-rollout.md").read_text())
    paths = set(re.findall(r"(?<![\w/])((?:trainer|servers)/[\w/]+\.py)\b", text))
    assert paths and not [p for p in sorted(paths) if not (root / p).is_file()]
    # `module.Name` / `module.Name.attr` where module is a file of the rollout wing or the engine
    modules = {p.stem: f"trainer.{p.parent.name}.{p.stem}" for d in ("rollout", "grpo")
               for p in (root / "trainer" / d).glob("*.py") if p.stem != "__init__"}
    modules.update(policy="trainer.policy", logprobs="trainer.logprobs")
    dotted = {m for m in re.findall(r"`(\w+(?:\.\w+)+)", text) if m.split(".")[0] in modules and not m.endswith(".py")}
    missing = []
    for name in sorted(dotted):
        if _config_key(name):  # `policy.generation.backend`: a config key of the run config
            continue
        head, *attrs = name.split(".")
        obj = importlib.import_module(modules[head])
        for attr in attrs:
            obj = getattr(obj, attr, None)
        if obj is None:
            missing.append(name)
    assert len(dotted) >= 5 and not missing, missing
    # each step's file of the rollout diagram is one of the wing's files, and every wing file is named
    wing = {f"trainer/rollout/{p.name}" for p in (root / "trainer" / "rollout").glob("*.py") if p.stem != "__init__"}
    assert wing <= paths
