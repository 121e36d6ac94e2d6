#!/usr/bin/env bash
# Build the local test image `verigym-test:latest` without any registry: a Debian minbase
# rootfs (mmdebstrap, else debootstrap) with python3, pytest, git, patch, bash, coreutils,
# imported into Podman. Used by the container-backend tests and the SWE env's test repo.
# Idempotent: skips when the image exists. The rootfs tarball is cached outside the repo
# (VERIGYM_IMAGE_CACHE, default /var/cache/verigym) so rebuilding the image is seconds.
set -euo pipefail

IMAGE=${VERIGYM_TEST_IMAGE:-verigym-test:latest}
CACHE=${VERIGYM_IMAGE_CACHE:-/var/cache/verigym}
SUITE=${VERIGYM_DEBIAN_SUITE:-bookworm}
MIRROR=${VERIGYM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
TAR="$CACHE/rootfs-$SUITE-verigym-test.tar"
PACKAGES=python3,python3-pytest,git,patch,bash,coreutils,ca-certificates

if podman image exists "$IMAGE"; then
  echo "image $IMAGE exists"; exit 0
fi
mkdir -p "$CACHE"
if [[ ! -f $TAR || ! -s $TAR ]]; then
  rm -rf "$TAR.part"; [[ -f $TAR ]] || rm -rf "$TAR"
  if command -v mmdebstrap >/dev/null; then
    # --variant=apt: essential + apt only; docs/locales dropped to keep the image small.
    mmdebstrap --variant=apt --format=tar --include="$PACKAGES" \
      --dpkgopt='path-exclude=/usr/share/{doc,man,locale,info}/*' \
      "$SUITE" "$TAR.part" "$MIRROR"
  elif command -v debootstrap >/dev/null; then
    root=$(mktemp -d)
    trap 'rm -rf "$root"' EXIT
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root" "$MIRROR"
    tar -C "$root" -cf "$TAR.part" .
  else
    echo "need mmdebstrap or debootstrap (apt-get install mmdebstrap)" >&2; exit 2
  fi
  mv "$TAR.part" "$TAR"
fi
podman import --change 'CMD ["/bin/bash"]' --change 'WORKDIR /' "$TAR" "$IMAGE" >/dev/null
echo "built $IMAGE from $TAR"
