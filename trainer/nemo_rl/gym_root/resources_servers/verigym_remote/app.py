"""NeMo-Gym's process for a verigym environment server that runs outside Gym.

Gym starts one process per server instance and polls the instance's host:port. For a
``verigym_remote`` instance that address is the verigym server the job's fleet started (it
answers Gym's poll itself); this process only watches that server's ``/health`` and exits
non-zero when it stops answering, so Gym reports the environment as gone instead of
silently routing rollouts to a dead address. Runs in Gym's per-server venv: stdlib + PyYAML.
"""

import os
import sys
import time
import urllib.error
import urllib.request

import yaml

DEFAULT_POLL_S = 5.0
DEFAULT_FAILURES = 6  # 30 s without an answer


def main() -> int:
    name = os.environ["NEMO_GYM_CONFIG_PATH"]
    config = yaml.safe_load(os.environ["NEMO_GYM_CONFIG_DICT"])
    inner = config[name]["resources_servers"]["verigym_remote"]
    url = f"http://{inner['host']}:{inner['port']}/health"
    poll_s = float(inner.get("health_poll_s") or DEFAULT_POLL_S)
    allowed = int(inner.get("health_failures_to_exit") or DEFAULT_FAILURES)
    print(f"verigym_remote {name}: watching {url}", flush=True)
    failures = 0
    while True:
        try:
            with urllib.request.urlopen(url, timeout=poll_s) as reply:
                failures = 0 if reply.status == 200 else failures + 1
        except (urllib.error.URLError, OSError):
            failures += 1
        if failures >= allowed:
            print(f"verigym_remote {name}: {url} failed {allowed} health checks in a row", file=sys.stderr)
            return 1
        time.sleep(poll_s)


if __name__ == "__main__":
    sys.exit(main())
