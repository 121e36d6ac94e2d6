"""Two local jobs' Ray heads on one machine at once (trainer/launch/ray_node.py, what the job script
runs): each binds its own Ray Client and dashboard-agent ports (Ray's fixed 10001 and 52365 put
both clusters behind one port), and each stops with every process it started, on SIGTERM and when
its leader is killed outright."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.thread_budget import skip_if_short_of_threads

pytest.importorskip("ray")
REPO = Path(__file__).resolve().parents[2]


def _listening(proc: psutil.Process) -> set[int]:
    try:
        return {c.laddr.port for c in proc.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}
    except psutil.Error:
        return set()


def _named(procs: list[psutil.Process], words: str) -> psutil.Process:
    return next(p for p in procs if words in " ".join(p.cmdline()))


def test_two_heads_on_one_machine_bind_their_own_ports_and_stop_whole(tmp_path):
    skip_if_short_of_threads("two Ray heads")
    token = tmp_path / "token"
    token.write_text(os.urandom(32).hex() + "\n")
    token.chmod(0o600)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    env.pop("RAY_ADDRESS", None)
    heads, logs = [], []
    try:
        for name in ("a", "b"):
            logs.append(open(tmp_path / f"{name}.log", "wb"))
            heads.append(subprocess.Popen(
                [sys.executable, "-m", "trainer.launch.ray_node", "head", "--temp-dir", f"/tmp/vg-rp-{os.getpid()}-{name}",
                 "--address-file", str(tmp_path / f"{name}.address"), "--num-cpus", "1"],
                env=env, cwd=REPO, stdout=logs[-1], stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 240
        for name, head in zip("ab", heads):
            while not (tmp_path / f"{name}.address").exists():
                assert head.poll() is None and time.monotonic() < deadline, (tmp_path / f"{name}.log").read_text()[-3000:]
                time.sleep(0.2)
        trees = [psutil.Process(h.pid).children(recursive=True) for h in heads]
        client_ports, agent_ports = [], []
        for tree in trees:
            client = _named(tree, "ray.util.client.server")
            port = int(next(a for a in client.cmdline() if a.startswith("--port=")).split("=")[1])
            assert port != 10001
            client_ports.append(port)
            start = _named(tree, "ray.scripts.scripts start")
            agent_ports.append(int(next(a for a in start.cmdline() if a.startswith("--dashboard-agent-listen-port="))
                                   .split("=")[1]))
        assert client_ports[0] != client_ports[1] and agent_ports[0] != agent_ports[1]
        # each port has one listener, of its own head: the client servers (Ray's 10001 had both, through
        # SO_REUSEPORT) and the dashboard agents (the second one gave up on 52365)
        deadline = time.monotonic() + 60
        while True:
            trees = [psutil.Process(h.pid).children(recursive=True) for h in heads]  # the agents start late
            listeners = {port: [i for i, tree in enumerate(trees) for p in tree if port in _listening(p)]
                         for port in (*client_ports, *agent_ports)}
            if all(len(owners) == 1 for owners in listeners.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert [listeners[p] for p in (*client_ports, *agent_ports)] == [[0], [1], [0], [1]], listeners
        addresses = [(tmp_path / f"{n}.address").read_text().strip() for n in "ab"]
        assert addresses[0] != addresses[1]
        # a: stopped as the job script stops it; b: its leader killed outright (the OOM killer), and
        # `ray start --block` gets SIGTERM from the kernel and drains the node all the same
        heads[0].send_signal(signal.SIGTERM)
        heads[1].kill()
        assert heads[0].wait(timeout=90) == 0  # a stop we asked for is a clean exit
        heads[1].wait(timeout=10)
        _, alive = psutil.wait_procs([p for tree in trees for p in tree], timeout=60)
        assert not alive, [(p.pid, p.cmdline()) for p in alive]
    finally:
        for head in heads:
            if head.poll() is None:
                head.kill()
                head.wait()
        for f in logs:
            f.close()
