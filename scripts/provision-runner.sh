#!/usr/bin/env bash
# Provision a self-hosted runner for .github/workflows/images.yml (docs/ci.md "Setting up the runners"), as root,
# once per machine and again after every re-image (idempotent). Debian 12 or Ubuntu 24.04, with the distribution's
# own python3: the jobs make their virtual environments with it (actions/setup-python has no builds for Debian).
#
#   sudo bash scripts/provision-runner.sh --role builder|builder-pr|gpu|release [--user runner]
#   sudo bash scripts/provision-runner.sh --check [--user runner]   # only the checks of step 5
#
# 1. scripts/setup.sh from this (trusted, main) checkout: the engines, buildx, cosign, qemu binfmt, the base images.
# 2. python3 >= 3.11, python3-venv (ensurepip: without it `python3 -m venv` fails), git, ca-certificates.
# 3. The runner's user (non-root, default `runner`) in the group that owns the engine's socket.
# 4. Supervision: on a systemd machine, imagebuild-engines.timer runs setup.sh at boot and every 2 minutes (setup.sh
#    starts an engine that is not answering and leaves a running one alone), so a reboot or a dead engine is back
#    within minutes; and a job-started hook (the runner's ACTIONS_RUNNER_HOOK_JOB_STARTED) fails a job at once, with
#    the reason, when no engine answers, instead of a build failing later. Without systemd (a container) the units
#    are written but nothing starts them: the script says so.
# 5. Checks, as the runner's user: python3 >= 3.11; a venv made with it whose pip runs; docker answers; buildx;
#    cosign; git. Exit 1 naming the first that fails.
# Registering the runner needs a token from GitHub: the script prints the config.sh line with the role's labels
# (--ephemeral for builder-pr and gpu: docs/ci.md says why).
# --no-setup skips step 1 on a machine where setup.sh already ran (or whose engines someone else provides); --no-check
# skips step 5 where no engine can answer yet (scripts/ci_rehearse.py makes its runner image with both).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROLE=""
RUNNER_USER=runner
RUNNER_UID=""
RUN_SETUP=1
CHECK_ONLY=0
RUN_CHECK=1
ENGINE_SOCK="${IMAGEBUILD_ENGINE_SOCK:-/var/run/docker.sock}"
HOOK=/usr/local/lib/imagebuild-runner/job-started.sh
UNIT_DIR="${IMAGEBUILD_UNIT_DIR:-/etc/systemd/system}"

log() { printf 'provision-runner: %s\n' "$*" >&2; }
die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}

while (($#)); do
    case "$1" in
        --role) ROLE="${2:-}"; shift 2 ;;
        --user) RUNNER_USER="${2:-}"; shift 2 ;;
        --uid) RUNNER_UID="${2:-}"; shift 2 ;;
        --no-setup) RUN_SETUP=0; shift ;;
        --check) CHECK_ONLY=1; shift ;;
        --no-check) RUN_CHECK=0; shift ;;
        -h | --help) sed -n '2,26p' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) die "unknown argument '$1' (--help)" ;;
    esac
done
[[ "$RUNNER_USER" =~ ^[a-z_][a-z0-9_-]{0,31}$ ]] || die "--user '$RUNNER_USER': a lowercase user name"
[[ -z "$RUNNER_UID" || "$RUNNER_UID" =~ ^[1-9][0-9]{2,5}$ ]] || die "--uid '$RUNNER_UID': a number of 100 or more"

labels_of() {  # ROLE: the runner labels images.yml asks for (docs/ci.md)
    case "$1" in
        builder) echo "self-hosted,linux,x64,builder" ;;
        builder-pr) echo "self-hosted,linux,x64,builder-pr" ;;
        release) echo "self-hosted,linux,x64,release" ;;
        gpu) echo "self-hosted,linux,<rocm|cuda>,<mi300|mi250|mi100|h100|l40s|a10|a100>" ;;
        *) return 1 ;;
    esac
}

as_runner() {  # COMMAND...: run as the runner's user, with a login-like environment of its own
    local home
    home="$(getent passwd "$RUNNER_USER" | cut -d: -f6)"
    setpriv --reuid="$RUNNER_USER" --regid="$RUNNER_USER" --init-groups \
        env -i HOME="$home" USER="$RUNNER_USER" PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
        ${DOCKER_HOST:+DOCKER_HOST="$DOCKER_HOST"} "$@"
}

check() {  # step 5
    getent passwd "$RUNNER_USER" >/dev/null || die "no user '$RUNNER_USER' (run without --check first)"
    as_runner python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null \
        || die "python3 >= 3.11 missing for $RUNNER_USER (Debian 12 and Ubuntu 24.04 have it: apt-get install python3)"
    local tmp
    tmp="$(as_runner mktemp -d)"
    if ! as_runner python3 -m venv "$tmp/venv" >"$tmp.log" 2>&1; then
        die "python3 -m venv fails for $RUNNER_USER ($(tr '\n' ' ' <"$tmp.log" | cut -c1-200)): apt-get install python3-venv"
    fi
    as_runner "$tmp/venv/bin/python" -m pip --version >/dev/null || die "pip does not run in a new venv"
    rm -rf "$tmp" "$tmp.log"
    as_runner docker version --format '{{.Server.Version}}' >/dev/null 2>&1 \
        || die "no engine answers for $RUNNER_USER on ${DOCKER_HOST:-unix://$ENGINE_SOCK} (setup.sh; is $RUNNER_USER in the socket's group?)"
    as_runner docker buildx version >/dev/null 2>&1 || die "docker buildx missing (setup.sh installs it)"
    as_runner cosign version >/dev/null 2>&1 || die "cosign missing (setup.sh installs it)"
    as_runner git --version >/dev/null || die "git missing"
    log "checked as $RUNNER_USER: python3 $(as_runner python3 -c 'import platform; print(platform.python_version())') with venv and pip, engine $(as_runner docker version --format '{{.Server.Version}}'), buildx, cosign, git"
}

if ((CHECK_ONLY)); then
    check
    exit 0
fi

labels="$(labels_of "$ROLE")" || die "--role: one of builder, builder-pr, gpu, release"
((EUID == 0)) || die "run as root (sudo bash scripts/provision-runner.sh ...)"
. /etc/os-release
case "${ID}:${VERSION_ID:-}" in
    debian:12 | ubuntu:24.04) ;;
    *) log "not Debian 12 or Ubuntu 24.04 (${PRETTY_NAME:-unknown}): the steps below may not hold" ;;
esac

# 1. the engines and tools
if ((RUN_SETUP)); then
    log "scripts/setup.sh"
    bash "$REPO_ROOT/scripts/setup.sh"
fi

# 2. the distribution's python3 with venv, and git
missing=()
for pkg in python3 python3-venv git ca-certificates; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if ((${#missing[@]})); then
    log "apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 3. the runner's user, in the group of the engine's socket (root-equivalent on this machine: docs/ci.md)
if ! getent passwd "$RUNNER_USER" >/dev/null; then
    log "useradd $RUNNER_USER"
    useradd -m -s /bin/bash ${RUNNER_UID:+-u "$RUNNER_UID"} "$RUNNER_USER"
fi
if [[ -S "$ENGINE_SOCK" ]]; then
    gid="$(stat -c %g "$ENGINE_SOCK")"
    if ((gid == 0)); then
        die "$ENGINE_SOCK belongs to group root: start the engine with a socket group (setup.sh does: docker)"
    fi
    group="$(getent group "$gid" | cut -d: -f1 || true)"
    if [[ -z "$group" ]]; then
        group=docker-host
        groupadd -o -g "$gid" "$group"
    fi
    usermod -aG "$group" "$RUNNER_USER"
else
    log "no engine socket at $ENGINE_SOCK yet: $RUNNER_USER is not in its group (run again once an engine runs)"
fi

# 4. supervision: a timer that runs setup.sh at boot and every 2 minutes, and the job-started hook
install -d -m 0755 "$(dirname "$HOOK")" "$UNIT_DIR"
cat >"$HOOK" <<'EOF'
#!/bin/sh
# ACTIONS_RUNNER_HOOK_JOB_STARTED (scripts/provision-runner.sh): no job starts on a runner whose engine is gone.
if ! docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
    echo "::error::no container engine answers on this runner (${DOCKER_HOST:-unix:///var/run/docker.sock}): see systemctl status imagebuild-engines.timer"
    exit 1
fi
EOF
chmod 0755 "$HOOK"
cat >"$UNIT_DIR/imagebuild-engines.service" <<EOF
[Unit]
Description=imagebuild engines, registry and tools (scripts/setup.sh: starts what does not answer)
After=network-online.target
Wants=network-online.target

[Service]
Type=oneshot
ExecStart=/bin/bash $REPO_ROOT/scripts/setup.sh
TimeoutStartSec=1800
EOF
cat >"$UNIT_DIR/imagebuild-engines.timer" <<'EOF'
[Unit]
Description=Run imagebuild's setup.sh at boot and every 2 minutes (a dead engine comes back)

[Timer]
OnBootSec=10s
OnUnitInactiveSec=2min

[Install]
WantedBy=timers.target
EOF
if [[ "$(cat /proc/1/comm 2>/dev/null)" == systemd ]]; then
    systemctl daemon-reload
    systemctl enable --now imagebuild-engines.timer
    log "imagebuild-engines.timer enabled: setup.sh at boot and every 2 minutes"
else
    log "no systemd here (PID 1 is $(cat /proc/1/comm 2>/dev/null || echo unknown)): $UNIT_DIR/imagebuild-engines.{service,timer} written, nothing restarts the engines after a reboot"
fi

if ((RUN_CHECK)); then check; fi

cat <<EOF
provisioned for role ${ROLE}. Register the runner as ${RUNNER_USER} (a token from Settings -> Actions -> Runners):
  ./config.sh --url https://github.com/OWNER/REPO --token TOKEN --labels ${labels}$([[ "$ROLE" == builder-pr || "$ROLE" == gpu ]] && echo " --ephemeral")
and in the runner's .env: ACTIONS_RUNNER_HOOK_JOB_STARTED=${HOOK}
EOF
