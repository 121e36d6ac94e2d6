#!/usr/bin/env bash
# Make Podman's Docker-compatible API available at unix:///run/verigym-podman.sock.
# Idempotent; run as root (CI does). Prints the DOCKER_HOST line to export.
#   eval "$(scripts/ci_podman.sh)"      # -> export DOCKER_HOST=unix:///run/verigym-podman.sock
#   scripts/ci_podman.sh --stop          # stop the service this script started
set -euo pipefail

SOCK=/run/verigym-podman.sock
PIDFILE=/run/verigym-podman.pid

if [[ "${1:-}" == "--stop" ]]; then
  if [[ -f $PIDFILE ]] && kill -0 "$(cat $PIDFILE)" 2>/dev/null; then
    kill "$(cat $PIDFILE)"
  fi
  rm -f "$PIDFILE" "$SOCK"
  exit 0
fi

command -v podman >/dev/null || { echo "podman not installed (apt-get install podman runc)" >&2; exit 2; }

# crun fails on this host's hybrid cgroup layout; runc works. Limits that rootful podman
# would otherwise inherit from the service can be too high for the kernel: pin them.
mkdir -p /etc/containers
CONF=/etc/containers/containers.conf
if ! grep -q 'verigym' "$CONF" 2>/dev/null; then
  cat >"$CONF" <<'CONF'
# written by verigym scripts/ci_podman.sh
[engine]
runtime = "runc"

[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
CONF
fi

ping_api() {
  python3 - "$SOCK" <<'PY' 2>/dev/null
import socket, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect(sys.argv[1])
s.sendall(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n"); print(s.recv(200).split(b"\r\n")[0].decode())
PY
}

if ! ping_api | grep -q " 200 "; then
  rm -f "$SOCK"
  # setsid + nohup: the service must outlive this script (CI steps run it once, then tests).
  setsid nohup podman system service --time=0 "unix://$SOCK" >/var/log/verigym-podman.log 2>&1 &
  echo $! >"$PIDFILE"
  for _ in $(seq 100); do
    ping_api | grep -q " 200 " && break
    sleep 0.1
  done
  ping_api | grep -q " 200 " || { echo "podman service did not come up; see /var/log/verigym-podman.log" >&2; exit 1; }
fi
echo "export DOCKER_HOST=unix://$SOCK"
