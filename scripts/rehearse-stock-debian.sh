#!/usr/bin/env bash
# The fresh-machine rehearsal (issue 29): README command 1 (scripts/quickstart.sh) and command 2 (scripts/test.sh)
# of the committed HEAD, run as root on a stock Debian 12 that has only what the distribution gives (its own
# python3 arrives through setup.sh's apt step; a minbase debootstrap has none), in a privileged container whose
# engines run inside it with their data on host folders (volumes), not on the container's overlay. Nothing of this
# machine's Python, pip configuration, wheels cache or engines is inside. Results (pass/fail and wall time of each
# command, the commit) go to bench/results/stock-debian-12.json (--out), the logs next to the work folder.
#
# Usage: scripts/rehearse-stock-debian.sh [--commands "1 2"] [--out FILE] [--work DIR] [--keep]
# --keep: leave the engines' volumes and the root filesystem image (a later --keep run starts from the same image)
# Needs root and an engine on this machine (DOCKER_HOST or /var/run/docker.sock) to run the container.
#
# What differs from a user's machine, and why (all recorded in the results file):
# - host network (the container must reach the Debian mirror and PyPI): its ports are this machine's, so the
#   rehearsal's registry listens on 127.0.0.1:$REHEARSE_REGISTRY_PORT (IMAGEBUILD_REGISTRY_ADDR and the registry
#   variables of quickstart.sh and the tests), not on the 127.0.0.1:5000 this machine's own registry holds. The
#   linux/arm64 base that matrix.yaml names, 127.0.0.1:5000/imagebuild-base/debian:bookworm-arm64, is therefore
#   read from this machine's registry by the builds inside (setup.sh inside pushes its own to the rehearsal's).
# - this machine's egress re-signs TLS: its CA bundle goes in as PIP_CERT (as on the host), read-only, and into the
#   system store (update-ca-certificates), as on the host.
# - the torch CPU wheel of the local wheelhouse (/opt/wheels, read-only): setup.sh would fetch it from
#   download.pytorch.org, which this machine cannot reach; it checks the file against matrix.lock.json either way.
# - the checkout is a git clone of HEAD (from a bundle: committed files only, like `git archive HEAD`, but with
#   .git, as a user's clone has: builds label their revision from it); git is installed first, as a user who
#   cloned has it.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
COMMANDS="1 2"
OUT="$REPO_ROOT/bench/results/stock-debian-12.json"
WORK="${IMAGEBUILD_REHEARSE_DIR:-/var/tmp/imagebuild-rehearse}"
KEEP=0
REHEARSE_REGISTRY_PORT="${IMAGEBUILD_REHEARSE_REGISTRY_PORT:-5055}"
IMAGE=imagebuild-rehearse/debian:bookworm
DOCKER=/usr/bin/docker
while (($#)); do
    case "$1" in
    --commands) COMMANDS="$2" && shift 2 ;;
    --out) OUT="$2" && shift 2 ;;
    --work) WORK="$2" && shift 2 ;;
    --keep) KEEP=1 && shift ;;
    *) echo "error: unknown argument $1 (see the header of $0)" >&2 && exit 2 ;;
    esac
done
for c in $COMMANDS; do [[ "$c" == 1 || "$c" == 2 ]] || { echo "error: --commands takes 1 and/or 2" >&2; exit 2; }; done
log() { printf 'rehearse: %s\n' "$*" >&2; }

commit="$(git -C "$REPO_ROOT" rev-parse HEAD)"
if timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/${REHEARSE_REGISTRY_PORT}" 2>/dev/null; then
    echo "error: something listens on 127.0.0.1:${REHEARSE_REGISTRY_PORT}; set IMAGEBUILD_REHEARSE_REGISTRY_PORT" >&2
    exit 2
fi
name="imagebuild-rehearse-$$"
rm -rf "$WORK" && mkdir -p "$WORK/out" "$WORK/vol"
cleanup() {
    "$DOCKER" rm -f "$name" >/dev/null 2>&1 || true
    ((KEEP)) || rm -rf "$WORK/vol"
}
trap cleanup EXIT

# A stock Debian 12: debootstrap minbase, as scripts/make-base-image.sh makes the local base (one implementation).
start=$SECONDS
if ((KEEP)) && "$DOCKER" image inspect "$IMAGE" >/dev/null 2>&1; then
    log "root filesystem ${IMAGE}: kept from an earlier --keep run"
else
    "$REPO_ROOT/scripts/make-base-image.sh" "$IMAGE" bookworm
    log "root filesystem ${IMAGE}: $((SECONDS - start)) s"
fi
git -C "$REPO_ROOT" bundle create -q "$WORK/repo.bundle" HEAD

cat >"$WORK/inside.sh" <<'INSIDE'
#!/bin/bash
set -uo pipefail
export DEBIAN_FRONTEND=noninteractive
out=/rehearse/out
facts() { printf '%s=%s\n' "$1" "$2" >>"$out/facts.env"; }
facts python3_before "$(command -v python3 || echo none)"
apt-get update -qq && apt-get install -y -qq --no-install-recommends git ca-certificates >/dev/null
# this machine's egress CA in the system store too: pip --isolated (tests/test_cuda_coverage.py) ignores PIP_CERT,
# and Debian's pip reads the system bundle
cp /rehearse/ca.crt /usr/local/share/ca-certificates/rehearse-egress.crt && update-ca-certificates >/dev/null 2>&1
git clone -q /rehearse/repo.bundle /root/imagebuild && cd /root/imagebuild || exit 90
final=0
for c in $COMMANDS; do
    script=scripts/quickstart.sh
    [[ "$c" == 2 ]] && script=scripts/test.sh
    args=()
    [[ "$c" == 2 ]] && args=(--durations=25)
    t0=$(date +%s)
    facts "command${c}_started" "$t0"
    # each line stamped with the seconds since the command started: what costs the time (issue 29, item 5)
    bash "$script" "${args[@]}" 2>&1 | while IFS= read -r line; do
        printf -v now '%(%s)T' -1
        printf '%5d %s\n' "$((now - t0))" "$line"
    done >"$out/command$c.log"
    rc=${PIPESTATUS[0]}
    facts "command${c}_rc" "$rc"
    facts "command${c}_s" "$(($(date +%s) - t0))"
    [[ "$rc" == 0 ]] || { final=1; break; }
done
facts python3_after "$(readlink -f "$(command -v python3)") $(/usr/bin/python3 --version 2>&1)"
# the system interpreter holds nothing of ours, and refuses pip (PEP 668) where pip exists at all
facts system_python_has_imagebuild "$(cd / && /usr/bin/python3 -c 'import imagebuild' 2>/dev/null && echo yes || echo no)"
facts system_pip "$(cd / && /usr/bin/python3 -m pip install --dry-run click 2>&1 | tail -n1 | tr -d '\n=' | cut -c1-160)"
facts imagebuild_on_path "$(command -v imagebuild || echo none) -> $(readlink -f "$(command -v imagebuild)" 2>/dev/null)"
facts engine "$(docker version --format '{{.Server.Version}}' 2>/dev/null || echo none)"
exit "$final"
INSIDE

log "README commands ${COMMANDS} of ${commit:0:12} in ${IMAGE} (work ${WORK})"
vols=()
for d in imagebuild-docker imagebuild-docker26 imagebuild-docker28 imagebuild-registry; do
    mkdir -p "$WORK/vol/$d" && vols+=(-v "$WORK/vol/$d:/var/lib/$d")
done
registry="127.0.0.1:${REHEARSE_REGISTRY_PORT}"
start=$SECONDS
set +e
"$DOCKER" run --name "$name" --privileged --network host "${vols[@]}" \
    -v "$WORK/repo.bundle:/rehearse/repo.bundle:ro" -v "$WORK/inside.sh:/rehearse/inside.sh:ro" \
    -v "$WORK/out:/rehearse/out" -v "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}:/rehearse/ca.crt:ro" \
    -v /opt/wheels:/opt/wheels:ro \
    -e COMMANDS="$COMMANDS" -e PIP_CERT=/rehearse/ca.crt -e PIP_DEFAULT_TIMEOUT=180 \
    -e IMAGEBUILD_REGISTRY_ADDR="$registry" -e IMAGEBUILD_QUICKSTART_REGISTRY="$registry/imagebuild" \
    -e IMAGEBUILD_TEST_REGISTRY="$registry" \
    "$IMAGE" bash /rehearse/inside.sh
rc=$?
set -e
total=$((SECONDS - start))
log "container exited ${rc} after ${total} s; logs: ${WORK}/out/"

python3 - "$WORK/out/facts.env" "$OUT" "$commit" "$total" "$registry" "$COMMANDS" "$(date +%s)" <<'PY'
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

facts = dict(
    line.split("=", 1) for line in Path(sys.argv[1]).read_text().splitlines() if "=" in line
) if Path(sys.argv[1]).exists() else {}
asked = sys.argv[6].split()
commands = {}
for c, script in (("1", "bash scripts/quickstart.sh"), ("2", "bash scripts/test.sh --durations=25")):
    if c not in asked:
        commands[f"command{c}"] = {"run": script, "result": "not run"}
        continue
    rc, started = facts.get(f"command{c}_rc"), facts.get(f"command{c}_started")
    result = "passed" if rc == "0" else f"failed (exit {rc})" if rc else "not reached"
    if rc is None and started:  # stopped from outside (the container was removed) while it ran
        result = f"stopped unfinished after {int(float(sys.argv[7])) - int(started)} s"
    commands[f"command{c}"] = {
        "run": script,
        "result": result,
        "wall_s": int(facts[f"command{c}_s"]) if f"command{c}_s" in facts else None,
    }
doc = {
    "what": "README commands 1 and 2 on a stock Debian 12 (debootstrap minbase), as root, in a privileged container "
    "with the engines inside (data on volumes), only the distribution's python3 (scripts/rehearse-stock-debian.sh)",
    "commit": sys.argv[3],
    "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "distribution": "Debian 12 (bookworm), debootstrap --variant=minbase",
    **commands,
    "container_wall_s": int(sys.argv[4]),
    "inside": {k: v for k, v in facts.items() if not k.startswith("command")},
    "logs": "not committed: the work folder's out/command1.log, command2.log (each line: seconds in)",
    "differences_from_a_user_machine": [
        f"host network: the rehearsal's registry is {sys.argv[5]} (IMAGEBUILD_REGISTRY_ADDR and the quickstart/test "
        "registry variables), the host's own holds 127.0.0.1:5000, from which the builds read matrix.yaml's arm64 base",
        "PIP_CERT: this machine's CA bundle (its egress re-signs TLS)",
        "/opt/wheels read-only: the torch CPU wheel setup.sh would fetch from download.pytorch.org (unreachable here)",
        "the checkout: a git clone of HEAD from a bundle, git installed first",
    ],
}
Path(sys.argv[2]).write_text(json.dumps(doc, indent=2) + "\n")
print(json.dumps(doc, indent=2))
PY
((KEEP)) || "$DOCKER" image rm "$IMAGE" >/dev/null 2>&1 || true
exit "$rc"
