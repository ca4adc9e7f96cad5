#!/usr/bin/env bash
# Issue 31 item 6: one leg (linux/amd64 or linux/arm64) of cuda13.0-torch2.14 built from the lock (base substituted
# by the local Debian base of that platform) beside the plain Dockerfile a user would write for the same content
# (FROM the same base, a venv, `pip install vllm==0.33.0`; on an amd64 host the arm64 one runs apt and pip under
# emulation, as a user's would), by the same engine, each cold, then each cached; sizes unpacked (the sum of the
# history's layers, as imagebuild's build report: the containerd store's `docker image inspect` size is the compressed
# content) and compressed (`docker save | gzip -1`), and the largest layers of both. Writes
# bench/results/vllm_cuda_build-<os>-<arch>.json.
#
#   bash bench/vllm_cuda_build.sh [--prune] [--platform linux/amd64|linux/arm64]
#
# --prune empties the engine's whole build cache (`docker builder prune -af`: BuildKit's cache mounts, pip's
# download cache among them) before each cold build; without it the cold builds use --no-cache, which re-runs every
# step but keeps cache mounts and the base image warm (said in the results). Run it against an engine nobody else
# is building on (DOCKER_HOST): --prune drops their cache too. Needs: local/debian:bookworm (scripts/setup.sh), the
# lock (matrix.lock.json) and about 30 GB of free disk (two ~10 GB images and their layers). Goals (issue 31): ours no
# larger than the plain one, our cold build at most 1.1x its time, our cached build at most 0.5 s over the bare
# BuildKit build of the same Dockerfile.
#
# Disk (issue 31, measured 2026-12-03 on Docker 28.5 with the containerd image store): our build peaks at about 26 GB
# (torch stage 5.6 GB + vLLM stage ~4 GB + the final COPY of the venv ~10.5 GB + ~4.6 GB of compressed layer blobs),
# the plain one at about 15 GB. The two run one after the other: ours, its numbers, its image and its build-cache
# records removed (by record id: nobody else's cache), then the plain one. Each starts only while the disk keeps
# FLOOR_GB free after its peak; one that cannot is recorded as not built, with the free space it saw. KEEP_OURS=1 keeps
# our image (not its build cache) for a smoke, staging or coverage scan afterwards. PLAIN=0 (with PLAIN_WHY) builds
# our side only and records the plain side as not run, with that reason.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
prune=0 oci=linux/amd64
usage() { echo "usage: $0 [--prune] [--platform linux/amd64|linux/arm64]" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --prune) prune=1; shift ;;
        --platform) [[ $# -ge 2 ]] || usage; oci="$2"; shift 2 ;;
        *) usage ;;
    esac
done
target=cuda13.0-torch2.14
case "$oci" in  # the local base of each platform (scripts/setup.sh): arm64's is served by the loopback registry
    linux/amd64) base=local/debian:bookworm image="${target}" ;;
    linux/arm64) base=127.0.0.1:5000/imagebuild-base/debian:bookworm-arm64 image="${target}-linux-arm64" ;;
    *) usage ;;
esac
ours_tag="imagebuild-bench:${image}"   # the matrix's image name of the leg: its tag, its render folder
# the substitution each leg plans: amd64 builds FROM its own base only; arm64 also runs the build-platform stages
# FROM the amd64 base (os-${BUILDARCH}), so it names both
case "$oci" in
    linux/amd64) substitutes=(--base-substitute "debian:bookworm-slim=local/debian:bookworm") ;;
    *) substitutes=(--base-substitute "debian:bookworm-slim=local/debian:bookworm,platform=linux/amd64"
                    --base-substitute "debian:bookworm-slim=${base},platform=${oci}") ;;
esac
plain_tag="imagebuild-bench/plain-vllm:0.33.0-${oci//\//-}"
out="$root/bench/results/vllm_cuda_build-${oci//\//-}.json"
work="$(mktemp -d)"
trap 'status=$?; if [[ $status == 0 ]]; then rm -rf "$work"; else echo "logs kept in $work" >&2; fi' EXIT
export IMAGEBUILD_LOCAL_REPO=imagebuild-bench
docker image inspect local/debian:bookworm >/dev/null 2>&1 || { echo "error: local/debian:bookworm is missing (bash scripts/setup.sh makes it)" >&2; exit 2; }
cert="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}"
FLOOR_GB="${FLOOR_GB:-8}"
free_gb() { df -BG --output=avail / | tail -1 | tr -dc 0-9; }
room_for() {  # $1: the build's peak in GB; true when FLOOR_GB stays free after it
    [[ $(( $(free_gb) - $1 )) -ge $FLOOR_GB ]]
}
started_at="$(date -u +%s)"
drop_own_cache() {  # build-cache records created since this run started (ours only), then the images
    docker buildx du --verbose 2>/dev/null | python3 -c '
import re, sys, datetime
since = float(sys.argv[1])
for rec in sys.stdin.read().split("\n\n"):
    f = dict(re.findall(r"^(\w[\w ]*?):\s+(.*)$", rec, re.M))
    at = f.get("Created at", "")[:19]
    if f.get("ID") and at and datetime.datetime.fromisoformat(at).replace(tzinfo=datetime.timezone.utc).timestamp() >= since:
        print(f["ID"])' "$started_at" | while read -r id; do docker buildx prune -f -a --filter "id=$id" >/dev/null; done
}

# The plain Dockerfile: what a user writes for the same content on the same base.
mkdir -p "$work/plain"
# (no `# syntax=` line: it makes BuildKit fetch the frontend from Docker Hub; the built-in one reads RUN --mount)
cat >"$work/plain/Dockerfile" <<EOF
FROM ${base}
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:\$PATH
RUN --mount=type=secret,id=pipcert \
    if [ -s /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi \
    && pip install --no-cache-dir vllm==0.33.0
EOF

seconds() { python3 -c 'import sys, time; print(round(time.time() - float(sys.argv[1]), 1))' "$1"; }
clear_cache() { if [[ $prune == 1 ]]; then docker builder prune -af >/dev/null; fi; }

plain_build() {  # $1: extra flags (--no-cache or nothing); prints the seconds
    local started
    started="$(date +%s.%N)"
    # host networking, as imagebuild's own builds use (this machine's builds reach the network only that way)
    # PLAIN_TIMEOUT_S bounds it (the arm64 one runs apt and pip under emulation): one that runs out is recorded so
    timeout "${PLAIN_TIMEOUT_S:-3000}" docker buildx build --progress plain --network host --load --platform "$oci" $1 \
        --secret "id=pipcert,src=$cert" -t "$plain_tag" "$work/plain" >"$work/plain-$2.log" 2>&1 \
        || { tail -20 "$work/plain-$2.log" >&2; return 1; }
    seconds "$started"
}

ours_build() {  # $1: extra flags; prints the seconds (the whole imagebuild process: plan, build, post-build hooks)
    local started
    started="$(date +%s.%N)"
    imagebuild build "$target" --platform "$oci" "${substitutes[@]}" $1 \
        --report "$work/ours-$2.json" >"$work/ours-$2.log" 2>&1 || { tail -20 "$work/ours-$2.log" >&2; return 1; }
    seconds "$started"
}

bare_cached() {  # the same substituted Dockerfile through BuildKit alone, everything cached
    local started
    started="$(date +%s.%N)"
    docker buildx build --progress plain --network host --load --platform "$oci" --secret "id=pipcert,src=$cert" \
        -f "build/render/base-substituted/${image}/Dockerfile" -t "${ours_tag}-bare" . >"$work/bare.log" 2>&1 \
        || { tail -20 "$work/bare.log" >&2; return 1; }
    seconds "$started"
}

clear_cache
if ! room_for 26; then echo "error: $(free_gb) GB free: our build needs about 26 GB and ${FLOOR_GB} GB must stay free" >&2; exit 3; fi
# a failed step stops the bench (command substitution does not inherit set -e)
ours_cold="$(ours_build --no-cache cold)" || exit 1
ours_cached="$(ours_build "" cached)" || exit 1
bare="$(bare_cached)" || exit 1

layers() {  # the five largest layers: bytes and the step that made them
    docker history --no-trunc --format '{{.Size}}	{{.CreatedBy}}' --human=false "$1" | sort -t$'\t' -k1,1nr | head -5
}
size() {  # unpacked: the sum of the history's layer sizes (what building/sizes.py reports)
    docker history --format '{{.Size}}' --human=false "$1" | python3 -c 'import sys; print(sum(int(x) for x in sys.stdin.read().split()))'
}
compressed() { docker save "$1" | gzip -1 | wc -c; }

ours_size="$(size "$ours_tag")" ours_gz="$(compressed "$ours_tag")" ours_layers="$(layers "$ours_tag")"
docker rmi "${ours_tag}-bare" >/dev/null 2>&1 || true
if [[ "${KEEP_OURS:-0}" != 1 ]]; then  # KEEP_OURS=1 keeps our image (~15 GB) for a smoke, staging or coverage scan
    # every tag of our image (imagebuild also tags <target>-<commit>)
    docker rmi -f "$(docker image inspect --format '{{.Id}}' "$ours_tag")" >/dev/null 2>&1 || true
fi
drop_own_cache  # the build cache records (~10 GB), in both cases
plain_cold=null plain_cached=null plain_size=null plain_gz=null plain_layers="" plain_why=""
if [[ "${PLAIN:-1}" == 0 ]]; then  # PLAIN=0: our side only (the arm64 plain build runs pip under emulation)
    plain_why="not run: PLAIN=0 (${PLAIN_WHY:-no reason given})"
elif room_for 15; then
    clear_cache
    if plain_cold="$(plain_build --no-cache cold)"; then
        plain_cached="$(plain_build "" cached)"
        plain_size="$(size "$plain_tag")" plain_gz="$(compressed "$plain_tag")" plain_layers="$(layers "$plain_tag")"
    else
        plain_cold=null
        plain_why="not built: the plain build failed or ran past PLAIN_TIMEOUT_S=${PLAIN_TIMEOUT_S:-3000} s: $(tail -3 "$work/plain-cold.log" | tr -d '"\\' | tr '\n' ' ' | cut -c1-400)"
    fi
    docker rmi "$plain_tag" >/dev/null 2>&1 || true
    drop_own_cache
else
    plain_why="not built: $(free_gb) GB free after ours was removed, the plain build needs about 15 GB, ${FLOOR_GB} GB must stay free"
fi

python3 - "$out" "$prune" "$plain_cold" "$ours_cold" "$plain_cached" "$ours_cached" "$bare" \
    "$plain_size" "$ours_size" "$plain_gz" "$ours_gz" \
    "$plain_layers" "$ours_layers" "$(docker version --format '{{.Server.Version}}')" "$plain_why" \
    "$(git rev-parse HEAD)" "$(cut -d' ' -f1-3 /proc/loadavg)" "$oci" "$base" <<'PY'
import json
import sys

(out, prune, plain_cold, ours_cold, plain_cached, ours_cached, bare, plain_size, ours_size, plain_gz, ours_gz,
 plain_layers, ours_layers, engine, plain_why, commit, load, oci, base) = sys.argv[1:]
num = json.loads  # "null" when the plain image was not built


def rows(text):
    found = []
    for line in text.splitlines():
        size, _, step = line.partition("\t")
        found.append({"bytes": int(size), "step": step[:200]})
    return found


plain = {"cold": num(plain_cold), "cached": num(plain_cached), "size": num(plain_size), "gz": num(plain_gz)}
built = plain_why == ""
doc = {
    "about": f"bench/vllm_cuda_build.sh: cuda13.0-torch2.14 {oci} from the lock (base substituted by "
    f"{base}), then a plain `pip install vllm==0.33.0` Dockerfile on the same base, same engine",
    "command": "bash bench/vllm_cuda_build.sh" + (" --prune" if prune == "1" else "") + f" --platform {oci}",
    "platform": oci,
    "commit": commit,
    "load_average_at_end": load,
    "engine": engine,
    "cold_means": "docker builder prune -af before each" if prune == "1" else "--no-cache (cache mounts kept)",
    "plain_not_built": plain_why or None,
    "seconds": {
        "plain_cold": plain["cold"], "ours_cold": float(ours_cold),
        "plain_cached": plain["cached"], "ours_cached": float(ours_cached), "bare_buildkit_cached": float(bare),
    },
    "ratios": {
        "cold_ours_over_plain": round(float(ours_cold) / plain["cold"], 3) if built else None,
        "cached_overhead_s": round(float(ours_cached) - float(bare), 2),
    },
    "bytes": {
        "plain_unpacked": plain["size"], "ours_unpacked": int(ours_size),
        "plain_compressed_gzip1": plain["gz"], "ours_compressed_gzip1": int(ours_gz),
    },
    "largest_layers": {"plain": rows(plain_layers), "ours": rows(ours_layers)},
    "goals": {"ours_not_larger": int(ours_size) <= plain["size"] if built else None,
              "cold_at_most_1.1x": float(ours_cold) <= 1.1 * plain["cold"] if built else None,
              "cached_at_most_0.5s_over_bare": float(ours_cached) - float(bare) <= 0.5},
}
with open(out, "w", encoding="utf-8") as handle:
    json.dump(doc, handle, indent=1)
    handle.write("\n")
print(json.dumps(doc["seconds"]), json.dumps(doc["bytes"]), json.dumps(doc["goals"]))
PY
