"""``envs verify``: score a JSONL file of rows (+ responses) and summarise.

In-process through :class:`servers.service.EnvService` — the same code path a server runs —
or against a running server (``--url``) through :class:`servers.client.EnvClient`. A bad
line never stops the run: it is reported with its line number and the reason.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import orjson
from tqdm import tqdm

from servers.wire import FAILURE_CLASS_KEY, response_from_text

LINE_KEY = "_line"
STATUS_KEY = "_status"


@dataclass
class Rejected:
    line: int
    reason: str


@dataclass
class VerifySummary:
    count: int = 0
    scored: int = 0
    reward_sum: float = 0.0
    failures: Counter[str] = field(default_factory=Counter)
    rejected: list[Rejected] = field(default_factory=list)

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.scored if self.scored else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "scored": self.scored,
            "mean_reward": self.mean_reward,
            "failures_by_class": dict(self.failures),
            "rejected": [{"line": r.line, "reason": r.reason} for r in self.rejected],
        }


def iter_jsonl(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """``(line number, value, error)`` per non-blank line; ``error`` set when not valid JSON."""
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                yield number, orjson.loads(raw), None
            except orjson.JSONDecodeError as exc:
                yield number, None, f"malformed JSON: {exc}"


def as_response(value: Any) -> dict[str, Any] | None:
    """A ``--responses`` line: a Responses object, ``{"response": {...}}``, or a bare string of text."""
    if isinstance(value, str):
        return response_from_text(value)
    if isinstance(value, dict):
        if isinstance(value.get("response"), dict):
            return value["response"]
        if "output" in value:
            return value
    return None


def load_work(data: Path, responses: Path | None) -> tuple[list[tuple[int, dict[str, Any]]], list[Rejected]]:
    """Rows to score (with their line numbers) and the lines rejected before scoring."""
    work: list[tuple[int, dict[str, Any]]] = []
    rejected: list[Rejected] = []
    answers: dict[int, Any] = {}
    if responses is not None:
        # Joined by position: the n-th non-blank response line goes with the n-th non-blank row line.
        answers = {i: (value, err) for i, (_, value, err) in enumerate(iter_jsonl(responses))}
    for i, (line, row, err) in enumerate(iter_jsonl(data)):
        if err:
            rejected.append(Rejected(line, err))
            continue
        if not isinstance(row, dict):
            rejected.append(Rejected(line, f"a row must be a JSON object, got {type(row).__name__}"))
            continue
        if responses is not None:
            if i not in answers:
                rejected.append(Rejected(line, f"no response: {responses} has fewer lines than {data}"))
                continue
            value, err = answers[i]
            response = as_response(value) if not err else None
            if response is None:
                rejected.append(Rejected(line, f"response line {i + 1}: " +
                                         (err or "not a Responses object, {'response': ...} or a string")))
                continue
            row = {**row, "response": response}
        elif "response" not in row:
            rejected.append(Rejected(line, "row has no 'response' (give one per row or use --responses FILE)"))
            continue
        work.append((line, row))
    return work, rejected


async def _score_inprocess(name: str, rows: list[tuple[int, dict[str, Any]]], config_file: str | None,
                           overrides: dict[str, Any], concurrency: int, bar: tqdm) -> list[tuple[int, int, Any]]:
    from servers import registry
    from servers.examples import run_script_inprocess
    from servers.service import REJECT, EnvService

    service = EnvService(registry.instantiate(name, config_file=config_file, overrides=overrides))
    await service.start()
    limit = asyncio.Semaphore(concurrency)

    async def one(line: int, row: dict[str, Any]) -> tuple[int, int, Any]:
        async with limit:
            session_id, problems = await run_script_inprocess(service, row)
            bar.update(1)
            if problems:
                return line, 0, {"error": "session script failed", "detail": problems}
            status, reply = await service.verify(row, session_id, unscorable=REJECT)
            return line, status, reply

    try:
        return await asyncio.gather(*(one(line, row) for line, row in rows))
    finally:
        await service.stop()


async def _score_http(name: str, url: str, rows: list[tuple[int, dict[str, Any]]], concurrency: int,
                      bar: tqdm) -> list[tuple[int, int, Any]]:
    from servers.client import EnvClient, EnvClientError
    from servers.examples import run_script_http

    async with EnvClient({name: url}, max_concurrency_per_server=concurrency) as client:
        _, info = await client.get(name, "/info")
        stateful = bool(isinstance(info, dict) and info.get("stateful"))

        async def one(line: int, row: dict[str, Any]) -> tuple[int, int, Any]:
            # Same steps as in-process: a stateful server gets seed_session + the row's _script first.
            session, problems = await run_script_http(client, name, row, stateful)
            if problems:
                bar.update(1)
                return line, 0, {"error": "session script failed", "detail": problems}
            try:
                reply = await client.verify(name, row, session=session, raise_on_failure=True)
                status = 200
            except EnvClientError as exc:
                status, reply = exc.status or 0, exc.body if exc.body is not None else {"error": str(exc)}
            bar.update(1)
            return line, status, reply

        return await asyncio.gather(*(one(line, row) for line, row in rows))


def summarise(results: list[tuple[int, int, Any]], summary: VerifySummary) -> None:
    for line, status, reply in results:
        if status != 200 or not isinstance(reply, dict):
            detail = reply.get("detail") if isinstance(reply, dict) else None
            reason = reply.get("error") if isinstance(reply, dict) else str(reply)
            if detail:
                reason = f"{reason}: {json.dumps(detail)[:300]}"
            summary.rejected.append(Rejected(line, f"HTTP {status}: {reason}"))
        elif reply.get(FAILURE_CLASS_KEY):
            summary.failures[str(reply[FAILURE_CLASS_KEY])] += 1
        else:
            summary.scored += 1
            summary.reward_sum += float(reply.get("reward", 0.0))
    summary.rejected.sort(key=lambda r: r.line)


def run_verify(name: str, data: Path, *, responses: Path | None = None, url: str | None = None,
               output: Path | None = None, config_file: str | None = None, overrides: dict[str, Any] | None = None,
               concurrency: int = 16) -> VerifySummary:
    work, rejected = load_work(data, responses)
    summary = VerifySummary(count=len(work) + len(rejected), rejected=list(rejected))
    with tqdm(total=len(work), desc=f"verify {name}", unit="row", disable=len(work) < 50) as bar:
        if url:
            results = asyncio.run(_score_http(name, url, work, concurrency, bar))
        else:
            results = asyncio.run(_score_inprocess(name, work, config_file, overrides or {}, concurrency, bar))
    summarise(results, summary)
    if output is not None:
        with output.open("wb") as fh:
            for line, status, reply in results:
                record = reply if isinstance(reply, dict) else {"error": str(reply)}
                fh.write(orjson.dumps({**record, LINE_KEY: line, STATUS_KEY: status}) + b"\n")
    return summary


def print_summary(summary: VerifySummary) -> None:
    mean = "n/a" if summary.mean_reward is None else f"{summary.mean_reward:.4f}"
    print(f"rows: {summary.count}  scored: {summary.scored}  mean reward: {mean}")
    failed = sum(summary.failures.values())
    print(f"failures (not scored): {failed}" + (f"  {dict(summary.failures)}" if failed else ""))
    print(f"rejected: {len(summary.rejected)}")
    for item in summary.rejected[:50]:
        print(f"  line {item.line}: {item.reason}")
    if len(summary.rejected) > 50:
        print(f"  ... and {len(summary.rejected) - 50} more (see --output)")
