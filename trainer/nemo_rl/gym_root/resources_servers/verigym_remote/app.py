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

POLL_S = 5.0
FAILURES_BEFORE_EXIT = 6  # 30 s without an answer


def main() -> int:
    name = os.environ["NEMO_GYM_CONFIG_PATH"]
    config = yaml.safe_load(os.environ["NEMO_GYM_CONFIG_DICT"])
    inner = config[name]["resources_servers"]["verigym_remote"]
    url = f"http://{inner['host']}:{inner['port']}/health"
    failures = 0
    while True:
        try:
            with urllib.request.urlopen(url, timeout=POLL_S) as reply:
                failures = 0 if reply.status == 200 else failures + 1
        except (urllib.error.URLError, OSError):
            failures += 1
        if failures >= FAILURES_BEFORE_EXIT:
            print(f"verigym_remote {name}: {url} did not answer for {FAILURES_BEFORE_EXIT * POLL_S:.0f}s", file=sys.stderr)
            return 1
        time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main())
