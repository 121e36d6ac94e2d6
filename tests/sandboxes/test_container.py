"""The container backend for real against Podman's Docker-compatible API.

The module fixture runs ``scripts/ci_podman.sh`` (idempotent) and
``sandboxes/images/build_test_image.sh`` (skips when the image exists), and stops the
Podman service afterwards if it started it. Skips when podman is not installed, or not as
root (tests/podman_access.py).
"""

from __future__ import annotations

import http.client
import socket
import subprocess
import time
from pathlib import Path

import pytest

from sandboxes import Limits, LostOutputError, ResourceVerdict, SandboxError, SandboxSpec, exec_stream, open_backend
from tests.podman_access import skip_unless_root_podman

pytestmark = pytest.mark.podman
ROOT = Path(__file__).resolve().parents[2]
IMAGE = "verigym-test:latest"
SOCK = "/run/verigym-podman.sock"


def _api_up() -> bool:
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(1)
        s.connect(SOCK)
        s.close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def podman_api():
    skip_unless_root_podman("the container-backend tests")
    started = not _api_up()
    subprocess.run([str(ROOT / "scripts/ci_podman.sh")], check=True, capture_output=True, timeout=60)
    subprocess.run([str(ROOT / "sandboxes/images/build_test_image.sh")], check=True, timeout=600)
    yield f"unix://{SOCK}"
    if started:
        subprocess.run([str(ROOT / "scripts/ci_podman.sh"), "--stop"], check=False, timeout=30)


@pytest.fixture
async def backend(podman_api):
    b = open_backend("container", base_url=podman_api, image=IMAGE)
    yield b
    await b.close()
    # Podman may finish a forced removal a moment after the API call returns.
    for _ in range(50):
        leftovers = subprocess.run(["podman", "ps", "-aq", "--filter", "label=verigym.sandbox=1"],
                                   capture_output=True, text=True).stdout.split()
        if not leftovers:
            break
        time.sleep(0.2)
    assert leftovers == [], "containers leaked"


async def test_health(backend):
    h = await backend.health()
    assert h["ok"] is True and h["engine"]


async def test_exec_stdin_files_roundtrip(backend):
    async with await backend.create(SandboxSpec(files={"a.py": "import sys; print(sys.stdin.read()[::-1])"})) as sb:
        r = await sb.exec(["python3", "a.py"], stdin="abc")
        assert r.ok and r.text() == "cba\n" and r.stderr == b""
        r = await sb.exec("echo err >&2; exit 4")
        assert r.exit_code == 4 and r.stderr == b"err\n" and r.verdict is ResourceVerdict.OK
        await sb.upload({"d/x.txt": "hello"})
        r = await sb.exec("cat d/x.txt > y.txt; pwd")
        assert r.text() == "/workspace\n"
        assert await sb.download("y.txt") == b"hello"
        with pytest.raises(FileNotFoundError):
            await sb.download("nope")


async def test_output_that_arrives_with_the_reply_headers_is_kept(backend, monkeypatch):
    # On a busy machine the client reads an exec's reply headers late: by then the engine has sent
    # the program's output (and the end of the stream), and http.client's header read buffers it.
    # docker-py's own stream then starts past that buffer: exit code right, output empty.
    real_begin = http.client.HTTPResponse.begin

    def late_begin(self):  # type: ignore[no-untyped-def]
        time.sleep(0.3)  # the client, slowed down
        return real_begin(self)

    async with await backend.create(SandboxSpec()) as sb:
        monkeypatch.setattr(http.client.HTTPResponse, "begin", late_begin)
        r = await sb.exec("echo out; echo err >&2; exit 3")
        proc = await sb.start_process(["/bin/sh", "-c", "echo ready; sleep 30"])
        monkeypatch.undo()
        assert r.exit_code == 3 and r.stdout == b"out\n" and r.stderr == b"err\n", r
        assert (await proc.read_until(b"ready\n", timeout=30)).found
        await proc.kill()


async def test_output_lost_on_the_way_is_an_infrastructure_failure_not_an_empty_result(backend, monkeypatch):
    # Should output go missing between the program and us some other way (stand-in: the real exec
    # runs, its frames are read and dropped), the wrapper's end marks tell it from an empty output.
    real_frames = exec_stream.AttachedExec.frames

    def losing_frames(self):  # type: ignore[no-untyped-def]
        for _ in real_frames(self):
            pass
        return iter(())

    async with await backend.create(SandboxSpec()) as sb:
        monkeypatch.setattr(exec_stream.AttachedExec, "frames", losing_frames)
        with pytest.raises(LostOutputError, match="output of an exec was lost"):
            await sb.exec("echo done > f; echo printed")
        monkeypatch.undo()
        assert (await sb.exec("cat f")).text() == "done\n"  # it did run
        # A program that kills the shell around it is its own result, not a lost output.
        r = await sb.exec("echo before; kill -9 $PPID")
        assert r.exit_code is None and r.verdict is not ResourceVerdict.OK and r.text() == "before\n", r
        # Output that ends like the marks, or none at all, comes back as it is.
        r = await sb.exec(["printf", "%s", "\n__verigym_end__\n"])
        assert r.ok and r.stdout == b"\n__verigym_end__\n"
        assert (await sb.exec("true")).stdout == b""


async def test_missing_image_is_sandbox_error(podman_api):
    b = open_backend("container", base_url=podman_api)
    with pytest.raises(SandboxError):
        await b.create(SandboxSpec(image="localhost/verigym-does-not-exist:1"))
    await b.close()


async def test_timeout_kills_and_nothing_survives(backend):
    async with await backend.create(SandboxSpec()) as sb:
        r = await sb.exec("sleep 100 & sleep 100", timeout=1)
        assert r.verdict is ResourceVerdict.TIMEOUT
        ps = await sb.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
        assert ps.ok and "sleep 100" not in ps.text()


async def test_cpu_memory_output_limits(backend):
    async with await backend.create(SandboxSpec(limits=Limits(memory_mb=256))) as sb:
        r = await sb.exec(["python3", "-c", "while True: pass"], limits=Limits(cpu_s=1, memory_mb=256))
        assert r.verdict is ResourceVerdict.CPU_LIMIT
        r = await sb.exec(["python3", "-c", "x = bytearray(1 << 30)"], limits=Limits(memory_mb=256))
        assert r.verdict is ResourceVerdict.MEMORY_LIMIT
        r = await sb.exec(["python3", "-c", "import sys\nwhile True: sys.stdout.write('y'*65536)"],
                          limits=Limits(max_output_bytes=100_000, memory_mb=256))
        assert r.verdict is ResourceVerdict.OUTPUT_LIMIT and r.stdout_truncated and len(r.stdout) == 100_000


async def test_no_network(backend):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    try:
        async with await backend.create(SandboxSpec()) as sb:
            r = await sb.exec(["python3", "-c",
                               f"import socket\ntry:\n socket.create_connection(('127.0.0.1',{port}),timeout=2); print('CONNECTED')\n"
                               "except OSError as e: print('blocked')\n"
                               "try:\n socket.create_connection(('1.1.1.1',80),timeout=2); print('EGRESS')\n"
                               "except OSError as e: print('blocked')"])
            assert r.text() == "blocked\nblocked\n"
    finally:
        srv.close()


async def test_fork_bomb_contained_by_pids_limit(backend):
    async with await backend.create(SandboxSpec(limits=Limits(max_processes=32))) as sb:
        r = await sb.exec(["python3", "-c",
                           "import os\nwhile True:\n try: os.fork()\n except OSError: print('fork failed', flush=True); break"],
                          timeout=10)
        assert b"fork failed" in r.stdout
        await sb.reset()
        assert (await sb.exec("echo alive")).text() == "alive\n"


async def test_reset_gives_a_fresh_container(backend):
    async with await backend.create(SandboxSpec(files={"keep.txt": "k"})) as sb:
        first = sb.container_id
        await sb.exec("echo x > junk.txt; echo y > /tmp/junk; rm keep.txt; (sleep 300 &)")
        await sb.reset()
        assert sb.container_id != first
        r = await sb.exec("ls -A /workspace; ls -A /tmp")
        assert r.text().split() == ["keep.txt"]


async def test_host_files_and_server_env_invisible(backend, tmp_path, monkeypatch):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    monkeypatch.setenv("VERIGYM_TEST_SECRET", "hunter2")
    async with await backend.create(SandboxSpec()) as sb:
        r = await sb.exec(f"cat {secret} 2>&1; ls /work /root 2>&1; env; touch /escape-marker; echo done")
        assert b"TOPSECRET" not in r.stdout and b"hunter2" not in r.stdout
        assert r.text().rstrip().endswith("done")
    assert not Path("/escape-marker").exists()


async def test_kill_all_inside_keeps_sandbox_usable(backend):
    async with await backend.create(SandboxSpec()) as sb:
        await sb.exec("kill -9 -1; kill -9 1")
        r = await sb.exec("echo next")
        assert r.ok and r.text() == "next\n"


SHELL_LOOP = 'while IFS= read -r line; do eval "$line"; echo "@@END $?"; echo "@@END" >&2; done'


async def proc2_check(sb, count: str) -> None:
    """No `sleep 60` of the killed process group is left (counted from /proc, no ps needed)."""
    probe = await sb.start_process(["/bin/sh", "-c", "sleep 60 & echo started"])
    assert (await probe.read_until(b"started\n", timeout=30)).found
    assert (await sb.exec(count)).text().strip() == "1"  # the counter sees a live one
    await probe.kill()
    assert (await sb.exec(count)).text().strip() == "0"


async def test_long_lived_process_keeps_state_and_is_killed(backend):
    async with await backend.create(SandboxSpec()) as sb:
        assert sb.supports_processes
        proc = await sb.start_process(["/bin/sh", "-c", SHELL_LOOP], limits=Limits(max_output_bytes=4096))
        await proc.write_stdin(b"cd /tmp; X=41; echo warn >&2\n")
        assert (await proc.read_until(b"@@END 0\n", timeout=30)).data == b"@@END 0\n"
        assert (await proc.read_until(b"@@END\n", timeout=30, stream="stderr")).data == b"warn\n@@END\n"
        await proc.write_stdin(b"echo $((X + 1)) $(pwd)\n")
        assert (await proc.read_until(b"@@END 0\n", timeout=30)).data == b"42 /tmp\n@@END 0\n"
        await proc.write_stdin(b"sleep 60 & sleep 60\n")
        assert (await proc.read_until(b"@@END", timeout=1)).reason == "timeout"
        await proc.write_stdin(b"")
        await proc.kill()
        assert proc.returncode is not None
        count = ("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done "
                 "| grep -c '^sleep 60' || true")
        await proc2_check(sb, count)
        flood = await sb.start_process(["/bin/sh", "-c", "yes"], limits=Limits(max_output_bytes=4096))
        got = await flood.read_until(b"never", timeout=30, max_bytes=1000)
        assert got.reason == "max_bytes" and len(got.data) == 1000
        ended = await sb.start_process(["/bin/sh", "-c", "echo bye; exit 3"])
        assert (await ended.read_until(b"never", timeout=30)).data == b"bye\n"
        assert await ended.wait(30) == 3
    assert flood.returncode is not None  # destroy killed it


async def test_end_processes_and_workspace_archive(backend):
    async with await backend.create(SandboxSpec(files={"a.txt": "1"})) as sb:
        r = await sb.exec("mkdir -p d/e && echo 2 > d/e/b.txt && ln -s d/e/b.txt link && "
                          "(nohup sh -c 'while :; do echo x >> g; sleep 0.05; done' >/dev/null 2>&1 &)")
        assert r.ok, r.text("stderr")
        await sb.end_processes()
        r = await sb.exec("wc -c < g > n1; sleep 0.3; wc -c < g > n2; cmp -s n1 n2 && ps -eo comm= | grep -c sleep")
        assert r.text().strip() == "0", r.text() + r.text("stderr")  # nothing writes any more
        archive = await sb.archive_workspace(max_bytes=1 << 20)
        with pytest.raises(SandboxError):
            await sb.archive_workspace(max_bytes=10)
    async with await backend.create(SandboxSpec(files={"stale.txt": "x"})) as fresh:
        await fresh.extract_workspace(archive)
        r = await fresh.exec("ls -A | sort | tr '\\n' ' '; cat link; readlink link")
        assert r.text() == "a.txt d g link n1 n2 2\nd/e/b.txt\n", r.text()  # stale.txt is gone
