#!/usr/bin/env bash
# Makes the local base image (default local/debian:bookworm) with debootstrap + docker import, because
# these machines cannot pull from Docker Hub. Usage: scripts/make-base-image.sh [IMAGE] [SUITE]
set -euo pipefail

IMAGE="${1:-local/debian:bookworm}"
SUITE="${2:-bookworm}"
DOCKER=/usr/bin/docker
SOURCES=/etc/apt/sources.list.d/debian.sources

# The mirror this machine already uses (first URIs line naming a plain Debian archive), else deb.debian.org.
MIRROR="$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' "$SOURCES" 2>/dev/null || true)"
MIRROR="${IMAGEBUILD_DEBIAN_MIRROR:-${MIRROR:-http://deb.debian.org/debian}}"

ROOTFS="$(mktemp -d /var/tmp/imagebuild-rootfs.XXXXXX)"
trap 'rm -rf "$ROOTFS"' EXIT

echo "make-base-image: debootstrap --variant=minbase ${SUITE} from ${MIRROR}" >&2
debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 || {
    tail -n 20 "$ROOTFS.log" >&2
    exit 1
}
rm -f "$ROOTFS.log"
# Drop apt lists and caches: images run apt-get update themselves.
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/cache/apt/archives/*.deb
tar --numeric-owner -C "$ROOTFS" -c . | "$DOCKER" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
echo "make-base-image: ${IMAGE} ready" >&2
