"""NeMo-Gym's process for a verigym environment server that runs outside Gym.

Gym starts one process per server instance and polls the instance's host:port. For a
``verigym_remote`` instance that address is the verigym server the job's fleet started (it
answers Gym's poll itself); this process only watches that server's ``/health`` and exits
non-zero when it stops answering, so Gym reports the environment as gone instead of
silently routing rollouts to a dead address.

Standard library only: the job gives this process a venv made with ``python -m venv`` (no
package index at job time; trainer/nemo_rl/gym_install.py), so it reads its own instance out
of the YAML Gym hands every server (``NEMO_GYM_CONFIG_DICT``, OmegaConf's block-style dump)
with :func:`instance_settings` instead of a YAML library.
"""

import os
import sys
import time
import urllib.error
import urllib.request

DEFAULT_POLL_S = 5.0
DEFAULT_FAILURES = 6  # 30 s without an answer
IMPL = "verigym_remote"


def _scalar(text: str) -> str:
    """A YAML scalar as OmegaConf writes one: plain, 'single' or "double" quoted."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return bytes(text[1:-1], "utf-8").decode("unicode_escape")
    return text


def instance_settings(config_yaml: str, name: str) -> dict[str, str]:
    """The scalar keys of ``<name>: resources_servers: verigym_remote:`` in Gym's config dump.

    Reads block mappings by indentation from the instance's top-level line to the next one;
    a block scalar or list elsewhere in the dump never starts a line at column 0, so it cannot
    be mistaken for either end."""
    lines = config_yaml.splitlines()
    heads = {f"{name}:", f"'{name}':", f'"{name}":'}
    try:
        start = next(i for i, line in enumerate(lines) if line.rstrip() in heads)
    except StopIteration:
        raise KeyError(f"instance {name!r} is not in the config Gym passed") from None
    path: list[tuple[int, str]] = [(0, name)]
    settings: dict[str, str] = {}
    for line in lines[start + 1:]:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:
            break
        key, sep, value = line.strip().partition(":")
        if not sep or key.startswith("- "):
            continue
        while path and path[-1][0] >= indent:
            path.pop()
        keys = [k for _, k in path[1:]]
        if value.strip():
            if keys == ["resources_servers", IMPL]:
                settings[_scalar(key)] = _scalar(value)
        else:
            path.append((indent, _scalar(key)))
    return settings


def health_url(settings: dict[str, str]) -> str:
    host = settings.get("host", "")
    if not host or host == "null" or not settings.get("port", "").isdigit():
        raise ValueError(f"no host:port for this instance (got host={host!r}, port={settings.get('port')!r}): "
                         "fill the fleet's addresses in first (python -m trainer.nemo_rl.gym_config)")
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{settings['port']}/health"


def main() -> int:
    name = os.environ["NEMO_GYM_CONFIG_PATH"]
    settings = instance_settings(os.environ["NEMO_GYM_CONFIG_DICT"], name)
    url = health_url(settings)
    poll_s = float(settings.get("health_poll_s") or DEFAULT_POLL_S)
    allowed = int(settings.get("health_failures_to_exit") or DEFAULT_FAILURES)
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
