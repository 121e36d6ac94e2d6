#!/usr/bin/env bash
# Build the environment-fleet image (deploy/Containerfile) with Podman, without any container
# registry:
#   1. base: a Debian rootfs made by mmdebstrap from the Debian mirror with python3,
#      python3-venv, bubblewrap and ca-certificates; cached as a tarball in
#      $VERIGYM_IMAGE_CACHE (default /var/cache/verigym) and imported as
#      verigym-fleet-base:<suite>. Built once; later builds reuse it.
#   2. the image: deploy/Containerfile on that base; pip fetches verigym's dependencies from
#      PyPI in one layer that is rebuilt only when pyproject.toml changes.
# The build context is the tracked files verigym needs (git ls-files), not the whole checkout.
#
#   bash scripts/build_fleet_image.sh                 # -> verigym-fleet:latest
#   bash scripts/build_fleet_image.sh --tag my/fleet:1 --base-only --rebuild-base
# Env: VERIGYM_FLEET_IMAGE (tag), VERIGYM_DEBIAN_SUITE (bookworm), VERIGYM_DEBIAN_MIRROR,
#      VERIGYM_IMAGE_CACHE. Prints the image tag on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${VERIGYM_FLEET_IMAGE:-verigym-fleet:latest}
SUITE=${VERIGYM_DEBIAN_SUITE:-bookworm}
MIRROR=${VERIGYM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${VERIGYM_IMAGE_CACHE:-/var/cache/verigym}
BASE=verigym-fleet-base:$SUITE
PACKAGES=python3,python3-venv,bubblewrap,ca-certificates
BASE_ONLY=0
REBUILD_BASE=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --tag) IMAGE=$2; shift 2 ;;
    --base-only) BASE_ONLY=1; shift ;;
    --rebuild-base) REBUILD_BASE=1; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
command -v podman >/dev/null || { echo "podman not installed (apt-get install podman runc)" >&2; exit 2; }

# The package list is part of the cache key: changing it makes a new tarball.
TAR="$CACHE/rootfs-$SUITE-fleet-$(echo "$PACKAGES" | sha256sum | cut -c1-12).tar"
if [[ $REBUILD_BASE == 1 ]]; then
  rm -f "$TAR"
  podman image rm -f "$BASE" >/dev/null 2>&1 || true
fi
if ! podman image exists "$BASE"; then
  mkdir -p "$CACHE"
  if [[ ! -s $TAR ]]; then
    command -v mmdebstrap >/dev/null || { echo "need mmdebstrap (apt-get install mmdebstrap)" >&2; exit 2; }
    echo "fleet image: building the $SUITE base rootfs with mmdebstrap (once; cached in $TAR)" >&2
    rm -f "$TAR.part"
    # --variant=essential: Essential packages + ours, no apt; docs/locales/man pages dropped.
    mmdebstrap --quiet --variant=essential --format=tar --include="$PACKAGES" \
      --dpkgopt='path-exclude=/usr/share/{doc,man,locale,info}/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      "$SUITE" "$TAR.part" "$MIRROR"
    mv "$TAR.part" "$TAR"
  fi
  podman import --change 'CMD ["/bin/sh"]' "$TAR" "$BASE" >/dev/null
  echo "fleet image: imported $BASE from $TAR" >&2
fi
[[ $BASE_ONLY == 1 ]] && { echo "$BASE"; exit 0; }

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
# Tracked files only (an untracked experiment is not shipped); the working-tree content of each.
git ls-files -z -- pyproject.toml README.md servers sandboxes environments trainer blends deploy \
  | tar --null -T - -cf - | tar -xf - -C "$ctx"
# --format docker: OCI images cannot carry HEALTHCHECK. --network host: pip reaches PyPI
# without depending on the host's container-network setup.
podman build --format docker --pull=never --network host --build-arg "BASE=$BASE" \
  --layers -t "$IMAGE" -f "$ctx/deploy/Containerfile" "$ctx" >&2
echo "$IMAGE"
