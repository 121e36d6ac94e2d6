"""The environment server's own HTTP/1.1 transport (servers/http_server.py), byte by byte over
real loopback sockets: keep-alive, pipelining, chunked bodies, 100-continue, limits, errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from servers import registry
from servers.app import start_server
from servers.wire import response_from_text

ENV_DIR = Path(__file__).parent / "server_envs"
ROW = json.dumps({"responses_create_params": {"input": "q"}, "response": response_from_text("right")}).encode()


@pytest.fixture
async def server(monkeypatch):
    monkeypatch.setenv("VERIGYM_ENV_PATH", str(ENV_DIR))
    running = await start_server(registry.instantiate("probe", overrides={"cpu_workers": 1, "max_body_mb": 0.01}))
    yield running
    await running.stop()


async def _connect(server):
    host, port = server.url.split("//")[1].rsplit(":", 1)
    return await asyncio.open_connection(host, int(port))


async def _response(reader) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(lines[0].split()[1]), headers, body


def _post(body: bytes, extra: bytes = b"") -> bytes:
    return (b"POST /verify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra +
            b"Content-Length: %d\r\n\r\n" % len(body) + body)


async def test_keep_alive_and_pipelined_requests_answer_in_order(server):
    reader, writer = await _connect(server)
    writer.write(_post(ROW) + b"GET /info HTTP/1.1\r\nHost: x\r\n\r\n" + _post(b"{not json"))
    statuses = [(await _response(reader))[0] for _ in range(3)]
    assert statuses == [200, 200, 400]
    writer.write(_post(ROW))  # the same connection still serves
    status, headers, body = await _response(reader)
    assert status == 200 and json.loads(body)["reward"] == 1.0 and headers["content-type"] == "application/json"
    writer.close()


async def test_chunked_body_and_expect_100_continue(server):
    reader, writer = await _connect(server)
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (ROW[:10], ROW[10:])) + b"0\r\n\r\n"
    writer.write(b"POST /verify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n" + chunked)
    status, _, body = await _response(reader)
    assert status == 200 and json.loads(body)["reward"] == 1.0
    writer.write(b"POST /verify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(ROW))
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30) == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(ROW)
    status, _, body = await _response(reader)
    assert status == 200 and json.loads(body)["reward"] == 1.0
    writer.close()


async def test_connection_close_http10_and_head(server):
    reader, writer = await _connect(server)
    writer.write(_post(ROW, b"Connection: close\r\n"))
    status, headers, _ = await _response(reader)
    assert status == 200 and headers["connection"] == "close" and await reader.read() == b""
    reader, writer = await _connect(server)
    writer.write(b"GET / HTTP/1.0\r\n\r\n")  # HTTP/1.0 without keep-alive: closed after the reply
    status, _, body = await _response(reader)
    assert status == 200 and json.loads(body) == {"status": "ok"} and await reader.read() == b""
    reader, writer = await _connect(server)
    writer.write(b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n" + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    status, headers, _ = await asyncio.wait_for(_head_only(reader), 30)
    assert status == 405 and headers["allow"] == "GET"  # a HEAD reply has no body: the next reply follows
    assert (await _response(reader))[0] == 200
    writer.close()


async def _head_only(reader) -> tuple[int, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    return int(lines[0].split()[1]), {k.strip().lower(): v.strip() for k, _, v in
                                      (line.partition(":") for line in lines[1:] if line)}, b""


@pytest.mark.parametrize("request_bytes, status", [
    (b"POST /verify HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 999999\r\n\r\n", 413),
    (b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n", 431),
    (b"NONSENSE\r\n\r\n", 400),
    (b"POST /verify HTTP/1.1\r\nContent-Length: -3\r\n\r\n", 400),
])
async def test_bad_requests_get_an_error_and_the_connection_is_closed(server, request_bytes, status):
    reader, writer = await _connect(server)
    writer.write(request_bytes)
    got, headers, body = await _response(reader)
    assert got == status and "error" in json.loads(body) and headers["connection"] == "close"
    assert await reader.read() == b""
    # the server is fine afterwards
    reader, writer = await _connect(server)
    writer.write(_post(ROW))
    assert (await _response(reader))[0] == 200
    writer.close()
