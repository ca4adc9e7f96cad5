#!/usr/bin/env bash
# Issue 31 item 6: the linux/amd64 leg of cuda13.0-torch2.14 built from the lock (base substituted by the local
# Debian base) beside the plain Dockerfile a user would write for the same content (FROM the same base, a venv,
# `pip install vllm==0.33.0`), by the same engine, each cold, then each cached; sizes unpacked and compressed and the
# largest layers of both. Writes bench/results/vllm_cuda_build.json.
#
#   bash bench/vllm_cuda_build.sh [--prune]
#
# --prune empties the engine's whole build cache (`docker builder prune -af`: BuildKit's cache mounts, pip's
# download cache among them) before each cold build; without it the cold builds use --no-cache, which re-runs every
# step but keeps cache mounts and the base image warm (said in the results). Run it against an engine nobody else
# is building on (DOCKER_HOST): --prune drops their cache too. Needs: local/debian:bookworm (scripts/setup.sh), the
# lock (matrix.lock.json) and about 30 GB of free disk (two ~10 GB images and their layers). Goals (issue 31): ours no
# larger than the plain one, our cold build at most 1.1x its time, our cached build at most 0.5 s over the bare
# BuildKit build of the same Dockerfile.
#
# Written and checked with `bash -n` only: not run in the session that wrote it (the machine was saturated).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
prune=0
if [[ "${1:-}" == "--prune" ]]; then prune=1; elif [[ $# -gt 0 ]]; then echo "usage: $0 [--prune]" >&2; exit 2; fi
target=cuda13.0-torch2.14
base=local/debian:bookworm
substitute="debian:bookworm-slim=${base}"
plain_tag=imagebuild-bench/plain-vllm:0.33.0
ours_tag="imagebuild-bench:${target}"
out="$root/bench/results/vllm_cuda_build.json"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export IMAGEBUILD_LOCAL_REPO=imagebuild-bench
docker image inspect "$base" >/dev/null 2>&1 || { echo "error: $base is missing (bash scripts/setup.sh makes it)" >&2; exit 2; }
cert="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}"

# The plain Dockerfile: what a user writes for the same content on the same base.
mkdir -p "$work/plain"
cat >"$work/plain/Dockerfile" <<'EOF'
# syntax=docker/dockerfile:1
FROM local/debian:bookworm
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
RUN --mount=type=secret,id=pipcert \
    if [ -s /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi \
    && pip install --no-cache-dir vllm==0.33.0
EOF

seconds() { python3 -c 'import sys, time; print(round(time.time() - float(sys.argv[1]), 1))' "$1"; }
clear_cache() { if [[ $prune == 1 ]]; then docker builder prune -af >/dev/null; fi; }

plain_build() {  # $1: extra flags (--no-cache or nothing); prints the seconds
    local started
    started="$(date +%s.%N)"
    docker buildx build --progress plain --load --platform linux/amd64 $1 --secret "id=pipcert,src=$cert" \
        -t "$plain_tag" "$work/plain" >"$work/plain-$2.log" 2>&1
    seconds "$started"
}

ours_build() {  # $1: extra flags; prints the seconds (the whole imagebuild process: plan, build, post-build hooks)
    local started
    started="$(date +%s.%N)"
    imagebuild build "$target" --platform linux/amd64 --base-substitute "$substitute" $1 \
        --report "$work/ours-$2.json" >"$work/ours-$2.log" 2>&1
    seconds "$started"
}

bare_cached() {  # the same substituted Dockerfile through BuildKit alone, everything cached
    local started
    started="$(date +%s.%N)"
    docker buildx build --progress plain --load --platform linux/amd64 --secret "id=pipcert,src=$cert" \
        -f "build/render/base-substituted/${target}/Dockerfile" -t "${ours_tag}-bare" . >"$work/bare.log" 2>&1
    seconds "$started"
}

clear_cache
plain_cold="$(plain_build --no-cache cold)"
clear_cache
ours_cold="$(ours_build --no-cache cold)"
plain_cached="$(plain_build "" cached)"
ours_cached="$(ours_build "" cached)"
bare="$(bare_cached)"

layers() {  # the five largest layers: bytes and the step that made them
    docker history --no-trunc --format '{{.Size}}	{{.CreatedBy}}' --human=false "$1" | sort -t$'\t' -k1,1nr | head -5
}
size() { docker image inspect --format '{{.Size}}' "$1"; }
compressed() { docker save "$1" | gzip -1 | wc -c; }

python3 - "$out" "$prune" "$plain_cold" "$ours_cold" "$plain_cached" "$ours_cached" "$bare" \
    "$(size "$plain_tag")" "$(size "$ours_tag")" "$(compressed "$plain_tag")" "$(compressed "$ours_tag")" \
    "$(layers "$plain_tag")" "$(layers "$ours_tag")" "$(docker version --format '{{.Server.Version}}')" <<'PY'
import json
import sys

(out, prune, plain_cold, ours_cold, plain_cached, ours_cached, bare, plain_size, ours_size, plain_gz, ours_gz,
 plain_layers, ours_layers, engine) = sys.argv[1:]


def rows(text):
    found = []
    for line in text.splitlines():
        size, _, step = line.partition("\t")
        found.append({"bytes": int(size), "step": step[:200]})
    return found


doc = {
    "about": "bench/vllm_cuda_build.sh: cuda13.0-torch2.14 linux/amd64 from the lock (base substituted by "
    "local/debian:bookworm) beside a plain `pip install vllm==0.33.0` Dockerfile on the same base, same engine",
    "engine": engine,
    "cold_means": "docker builder prune -af before each" if prune == "1" else "--no-cache (cache mounts kept)",
    "seconds": {
        "plain_cold": float(plain_cold), "ours_cold": float(ours_cold),
        "plain_cached": float(plain_cached), "ours_cached": float(ours_cached), "bare_buildkit_cached": float(bare),
    },
    "ratios": {
        "cold_ours_over_plain": round(float(ours_cold) / float(plain_cold), 3),
        "cached_overhead_s": round(float(ours_cached) - float(bare), 2),
    },
    "bytes": {
        "plain_unpacked": int(plain_size), "ours_unpacked": int(ours_size),
        "plain_compressed_gzip1": int(plain_gz), "ours_compressed_gzip1": int(ours_gz),
    },
    "largest_layers": {"plain": rows(plain_layers), "ours": rows(ours_layers)},
    "goals": {"ours_not_larger": int(ours_size) <= int(plain_size),
              "cold_at_most_1.1x": float(ours_cold) <= 1.1 * float(plain_cold),
              "cached_at_most_0.5s_over_bare": float(ours_cached) - float(bare) <= 0.5},
}
with open(out, "w", encoding="utf-8") as handle:
    json.dump(doc, handle, indent=1)
    handle.write("\n")
print(json.dumps(doc["seconds"]), json.dumps(doc["bytes"]), json.dumps(doc["goals"]))
PY
