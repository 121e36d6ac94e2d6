"""Container HEALTHCHECK of the verigym fleet image: exit 0 when every served environment is usable.

``envs serve --ready-file FILE`` writes ``{"urls": {name: url}}`` once all environments
answered 200 on /health; this script then asks each one's /health again (a server that lost
its CPU pool or sandbox, or is draining, answers 503). Before the file exists the fleet is
still starting (unhealthy; the image's --start-period absorbs it). Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request

READY_FILE = os.environ.get("VERIGYM_READY_FILE", "/tmp/verigym-ready.json")


def local(url: str) -> str:
    # Servers bind 0.0.0.0 in the image; ask them on loopback.
    return url.replace("://0.0.0.0:", "://127.0.0.1:").replace("://[::]:", "://[::1]:")


def main() -> int:
    try:
        with open(READY_FILE) as f:
            urls = json.load(f)["urls"]
    except (OSError, ValueError, KeyError) as exc:
        print(f"not ready: {READY_FILE}: {exc}")
        return 1
    failed = []
    for name, url in urls.items():
        try:
            with urllib.request.urlopen(local(url) + "/health", timeout=5) as reply:
                status, body = reply.status, reply.read(2000).decode(errors="replace")
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read(2000).decode(errors="replace")
        except OSError as exc:
            status, body = 0, str(exc)
        if status != 200:
            failed.append(f"{name} ({url}): {status} {body}")
    for line in failed:
        print("unhealthy:", line)
    if not failed:
        print("healthy:", ", ".join(urls))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
