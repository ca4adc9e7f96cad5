#!/usr/bin/env bash
# Makes the local base image (default local/debian:bookworm) with debootstrap + docker import, because
# these machines cannot pull from Docker Hub. Usage: scripts/make-base-image.sh [IMAGE] [SUITE] [ARCH]
# ARCH (a Debian architecture: amd64, arm64) other than the host's runs debootstrap's second stage under emulation
# (qemu-user-static + binfmt, which setup.sh installs) and imports the image for linux/ARCH.
set -euo pipefail

IMAGE="${1:-local/debian:bookworm}"
SUITE="${2:-bookworm}"
ARCH="${3:-$(dpkg --print-architecture)}"
case "$ARCH" in
amd64 | arm64) ;;
*)
    echo "make-base-image: architecture ${ARCH} is not one of amd64, arm64" >&2
    exit 2
    ;;
esac
DOCKER=/usr/bin/docker
SOURCES=/etc/apt/sources.list.d/debian.sources

# The mirror this machine already uses (first URIs line naming a plain Debian archive), else deb.debian.org.
MIRROR="$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' "$SOURCES" 2>/dev/null || true)"
MIRROR="${IMAGEBUILD_DEBIAN_MIRROR:-${MIRROR:-http://deb.debian.org/debian}}"

ROOTFS="$(mktemp -d /var/tmp/imagebuild-rootfs.XXXXXX)"
trap 'rm -rf "$ROOTFS"' EXIT

echo "make-base-image: debootstrap --arch=${ARCH} --variant=minbase ${SUITE} from ${MIRROR}" >&2
debootstrap --arch="$ARCH" --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 || {
    tail -n 20 "$ROOTFS.log" >&2
    exit 1
}
rm -f "$ROOTFS.log"
# Drop apt lists and caches: images run apt-get update themselves.
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/cache/apt/archives/*.deb
tar --numeric-owner -C "$ROOTFS" -c . | "$DOCKER" import --platform "linux/${ARCH}" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
# An engine without experimental features ignores `import --platform` and records the host's architecture:
# set the config's architecture in a saved copy (the image ID follows the config) and load it back.
if [[ "$("$DOCKER" image inspect --format '{{.Architecture}}' "$IMAGE")" != "$ARCH" ]]; then
    "$DOCKER" save "$IMAGE" | python3 -c '
import io, json, sys, tarfile
arch = sys.argv[1]
src = tarfile.open(fileobj=io.BytesIO(sys.stdin.buffer.read()))
config = json.load(src.extractfile("manifest.json"))[0]["Config"]
out = tarfile.open(fileobj=sys.stdout.buffer, mode="w|")
for member in src.getmembers():
    data = src.extractfile(member) if member.isfile() else None
    if member.name == config:
        doc = json.load(data)
        doc["architecture"] = arch
        doc.update({"variant": "v8"} if arch == "arm64" else {})
        raw = json.dumps(doc).encode()
        member.size, data = len(raw), io.BytesIO(raw)
    out.addfile(member, data)
out.close()
' "$ARCH" | "$DOCKER" load -q >/dev/null
fi
echo "make-base-image: ${IMAGE} (linux/${ARCH}) ready" >&2
