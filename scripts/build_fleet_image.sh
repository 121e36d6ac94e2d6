#!/usr/bin/env bash
# Build the environment-fleet image (deploy/Containerfile) with Podman, without any container
# registry:
#   1. bases: Debian rootfs tarballs made by mmdebstrap from the Debian mirror, cached in
#      $VERIGYM_IMAGE_CACHE (default /var/cache/verigym) and imported as
#      verigym-fleet-base:<suite> (python3, python3-venv, bubblewrap, ca-certificates) and
#      verigym-fleet-builder:<suite> (the same + gcc, python3-dev: only builds the venv).
#      Built once; later builds reuse them.
#   2. the image: deploy/Containerfile on those bases; pip fetches verigym's dependencies
#      from PyPI in a stage rebuilt only when pyproject.toml changes.
# The build context is the tracked files verigym needs (git ls-files), not the whole checkout
# (outside a git checkout: those folders as they are).
#
#   bash scripts/build_fleet_image.sh                 # -> verigym-fleet:latest
#   bash scripts/build_fleet_image.sh --tag my/fleet:1 --base-only --rebuild-base
# Env: VERIGYM_FLEET_IMAGE (tag), VERIGYM_DEBIAN_SUITE (bookworm), VERIGYM_DEBIAN_MIRROR,
#      VERIGYM_IMAGE_CACHE, VERIGYM_BUILD_CA_BUNDLE (CA file pip trusts during the build;
#      default the host's /etc/ssl/certs/ca-certificates.crt). Prints the image tag last.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${VERIGYM_FLEET_IMAGE:-verigym-fleet:latest}
SUITE=${VERIGYM_DEBIAN_SUITE:-bookworm}
MIRROR=${VERIGYM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${VERIGYM_IMAGE_CACHE:-/var/cache/verigym}
BASE=verigym-fleet-base:$SUITE
BUILDER=verigym-fleet-builder:$SUITE
PACKAGES=python3,python3-venv,bubblewrap,ca-certificates
BUILD_PACKAGES=$PACKAGES,python3-dev,gcc,libc6-dev
BASE_ONLY=0
REBUILD_BASE=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --tag) IMAGE=$2; shift 2 ;;
    --base-only) BASE_ONLY=1; shift ;;
    --rebuild-base) REBUILD_BASE=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
command -v podman >/dev/null || { echo "podman not installed (apt-get install podman runc)" >&2; exit 2; }

# make_base TAG PACKAGES: a Debian rootfs with PACKAGES, imported as TAG (cached tarball).
make_base() {
  local tag=$1 packages=$2 tar
  # The package list is part of the cache key: changing it makes a new tarball.
  tar="$CACHE/rootfs-$SUITE-fleet-$(echo "$packages" | sha256sum | cut -c1-12).tar"
  if [[ $REBUILD_BASE == 1 ]]; then
    rm -f "$tar"
    podman image rm -f "$tag" >/dev/null 2>&1 || true
  fi
  podman image exists "$tag" && return 0
  mkdir -p "$CACHE"
  if [[ ! -s $tar ]]; then
    command -v mmdebstrap >/dev/null || { echo "need mmdebstrap (apt-get install mmdebstrap)" >&2; exit 2; }
    echo "fleet image: building $tag's rootfs with mmdebstrap (once; cached in $tar)" >&2
    rm -f "$tar.part"
    # --variant=essential: Essential packages + ours, no apt; docs/locales/man pages dropped.
    mmdebstrap --quiet --variant=essential --format=tar --include="$packages" \
      --dpkgopt='path-exclude=/usr/share/{doc,man,locale,info}/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      "$SUITE" "$tar.part" "$MIRROR"
    mv "$tar.part" "$tar"
  fi
  podman import --change 'CMD ["/bin/sh"]' "$tar" "$tag" >/dev/null
  echo "fleet image: imported $tag from $tar" >&2
}
make_base "$BASE" "$PACKAGES"
make_base "$BUILDER" "$BUILD_PACKAGES"
[[ $BASE_ONLY == 1 ]] && { echo "$BASE"; exit 0; }

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
SOURCES=(pyproject.toml README.md servers sandboxes environments trainer blends deploy)
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # Tracked files only (an untracked experiment is not shipped); the working-tree content of each.
  git ls-files -z -- "${SOURCES[@]}" | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$ctx"
else
  tar --exclude=__pycache__ --exclude='*.egg-info' -cf - "${SOURCES[@]}" | tar -xf - -C "$ctx"
fi
# pip inside the build trusts what this host trusts (a TLS-intercepting proxy's CA included):
# the bundle is a build secret, mounted for the pip steps only, never stored in the image.
CA_BUNDLE=${VERIGYM_BUILD_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
secret=()
[[ -s $CA_BUNDLE ]] && secret=(--secret "id=pip_ca,src=$CA_BUNDLE")
# --format docker: OCI images cannot carry HEALTHCHECK. --network host: pip reaches PyPI
# without depending on the host's container-network setup.
podman build --format docker --pull=never --network host --build-arg "BASE=$BASE" \
  --build-arg "BUILDER=$BUILDER" "${secret[@]}" \
  --layers -t "$IMAGE" -f "$ctx/deploy/Containerfile" "$ctx" >&2
echo "$IMAGE"
