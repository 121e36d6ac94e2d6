#!/usr/bin/env bash
# Build the SWE test instance image `verigym-swe-tiny:latest`, offline: the sandbox layer's
# base test image (Debian + python3, pytest, git, patch) plus the tiny repository next to this
# script, committed at a fixed base commit in /testbed (SWE-bench layout).
# Idempotent; `--force` rebuilds. Takes seconds once the base image exists.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../../.." && pwd)
IMAGE=${VERIGYM_SWE_TINY_IMAGE:-verigym-swe-tiny:latest}
BASE=${VERIGYM_TEST_IMAGE:-verigym-test:latest}

if [[ "${1:-}" != "--force" ]] && podman image exists "$IMAGE"; then
  echo "image $IMAGE exists"; exit 0
fi
if ! podman image exists "$BASE"; then
  bash "$ROOT/sandboxes/images/build_test_image.sh"
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp -r "$HERE/repo" "$ctx/testbed"
# Fixed identity and dates: the base commit hash is the same on every build, so rows can name it.
export GIT_AUTHOR_NAME=verigym GIT_AUTHOR_EMAIL=verigym@example.invalid
export GIT_COMMITTER_NAME=verigym GIT_COMMITTER_EMAIL=verigym@example.invalid
export GIT_AUTHOR_DATE="2024-01-01T00:00:00Z" GIT_COMMITTER_DATE="2024-01-01T00:00:00Z"
git -C "$ctx/testbed" init -q -b main
git -C "$ctx/testbed" add -A
git -C "$ctx/testbed" -c core.fileMode=false commit -q -m "tinycalc base"
echo "base commit: $(git -C "$ctx/testbed" rev-parse HEAD)"
cat >"$ctx/Containerfile" <<CF
FROM $BASE
COPY testbed /testbed
WORKDIR /testbed
LABEL verigym.swe.instance=tinycalc
CF
# No RUN step: nothing executes during the build, so no network or runtime is needed.
podman build -q --pull=never -t "$IMAGE" -f "$ctx/Containerfile" "$ctx" >/dev/null
echo "built $IMAGE"
