#!/usr/bin/env bash
# Issue 31 item 5: cuda13.0-torch2.14 published as one signed OCI index of linux/amd64 and linux/arm64 in the loopback
# registry, the way CI does it (docs/ci.md): each leg smoked on this CPU and staged by digest, unsigned; then the two
# staged digests promoted as one index, each child and the index signed and attested (SBOM, provenance with the base
# substitution, the leg's smoke report), then `imagebuild verify` naming the GPU arches nobody here could smoke, and
# the compatibility page's rows. One leg at a time, because one leg's image is ~15 GB on this disk:
#
#   KEEP_OURS=1 bash bench/vllm_cuda_build.sh --prune --platform linux/amd64   # builds and keeps our image
#   bash bench/vllm_cuda_publish.sh stage linux/amd64    # smoke on the CPU, stage by digest, remove the local image
#   KEEP_OURS=1 bash bench/vllm_cuda_build.sh --prune --platform linux/arm64
#   bash bench/vllm_cuda_publish.sh stage linux/arm64    # the arm64 smoke runs under emulation
#   bash bench/vllm_cuda_publish.sh promote              # one signed index, verify, the page
#   bash bench/vllm_cuda_publish.sh clean                # after: the two repositories deleted, the registry's GC run
#
# CI runs on the machine a session used (stop 39 went red with a full disk): `clean` deletes every manifest of the
# staging and public repositories (~4.7 GB per leg) and runs the registry's garbage collection on its storage. Run it
# while nothing else pushes to the registry (the GC does not stop the registry; a concurrent upload could lose blobs).
#
# Writes build/bench-cuda/ (reports) and bench/results/vllm-cuda-index.json (what each step did and took).
# Signs with the quick start's throwaway key (build/keys/, scripts/quickstart.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
target=cuda13.0-torch2.14
registry=127.0.0.1:5000
staging="$registry/ib-cuda-staging"
public="$registry/ib-cuda"
work="$root/build/bench-cuda"
out="$root/bench/results/vllm-cuda-index.json"
export IMAGEBUILD_LOCAL_REPO=imagebuild-bench   # bench/vllm_cuda_build.sh's tags, apart from the tests'
mkdir -p "$work"
seconds() { python3 -c 'import sys, time; print(round(time.time() - float(sys.argv[1]), 1))' "$1"; }
record() {  # $1: step name, $2: seconds, $3: exit code, $4: a file whose tail says what happened
    python3 - "$out" "$1" "$2" "$3" "$4" "$(git rev-parse HEAD)" <<'PY'
import json, sys, pathlib, datetime
out, step, secs, code, log, commit = sys.argv[1:]
path = pathlib.Path(out)
doc = json.loads(path.read_text()) if path.exists() else {
    "about": "bench/vllm_cuda_publish.sh: cuda13.0-torch2.14 staged per platform, promoted as one signed index, "
    "verified; each leg built by bench/vllm_cuda_build.sh (KEEP_OURS=1)", "steps": {}}
tail = pathlib.Path(log).read_text(errors="replace").splitlines()[-12:] if pathlib.Path(log).exists() else []
doc["steps"][step] = {"seconds": float(secs), "exit_code": int(code), "commit": commit,
                      "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "output_tail": tail}
path.write_text(json.dumps(doc, indent=1) + "\n")
PY
}
step() {  # $1: name; the rest: the command. Records it; a failure stops the script with its exit code.
    local name="$1" started code=0
    shift
    started="$(date +%s.%N)"
    "$@" >"$work/$name.log" 2>&1 || code=$?
    record "$name" "$(seconds "$started")" "$code" "$work/$name.log"
    if [[ $code != 0 ]]; then tail -20 "$work/$name.log" >&2; echo "error: $name exited $code" >&2; exit "$code"; fi
}
slug() { echo "${1//\//-}"; }

case "${1:-}" in
    stage)
        oci="${2:?usage: $0 stage linux/amd64|linux/arm64}"
        s="$(slug "$oci")"
        if [[ -n "${UNSMOKED_BECAUSE:-}" ]]; then  # staged without a smoke, the reason recorded
            echo "$UNSMOKED_BECAUSE" >"$work/unsmoked-$s.txt"
            step "stage-$s" imagebuild publish "$target" --platform "$oci" --registry "$staging" --allow-unlocked \
                --allow-unsmoked --out "$work/staged-$s.json"
        else
            step "smoke-$s" imagebuild smoke "$target" --platform "$oci" --gpu none --report "$work/smoke-$s.json"
            step "stage-$s" imagebuild publish "$target" --platform "$oci" --registry "$staging" --allow-unlocked \
                --report "$work/smoke-$s.json" --out "$work/staged-$s.json"
        fi
        # the ~15 GB local image goes: the next leg's build needs the room (the registry keeps the ~4.7 GB staged)
        docker rmi -f "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["image_id"])' "$work/staged-$s.json")" >/dev/null
        ;;
    promote)
        refs=()
        for s in linux-amd64 linux-arm64; do
            refs+=(--index-of "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["digest_ref"])' "$work/staged-$s.json")")
        done
        reports=()
        for s in linux-amd64 linux-arm64; do
            if [[ -f "$work/unsmoked-$s.txt" ]]; then reports+=(--allow-unsmoked); else reports+=(--report "$work/smoke-$s.json"); fi
        done
        step promote imagebuild publish - --promote "${refs[@]}" --registry "$public" --allow-unlocked "${reports[@]}" \
            --sign-key build/keys/cosign.key --key-password-file build/keys/password --out "$work/published.json"
        accept=()
        for a in sm_80 sm_90 sm_100 sm_120; do accept+=(--accept-unsmoked-arch "$a"); done
        step verify-strict-refuses bash -c "! imagebuild verify '$public:$target' --key build/keys/cosign.pub"
        # a leg staged unsmoked has no smoke of its image anywhere: verify refuses it even with the arches accepted
        if ls "$work"/unsmoked-*.txt >/dev/null 2>&1; then
            step verify-refuses-the-unsmoked-leg bash -c "! imagebuild verify '$public:$target' --key build/keys/cosign.pub ${accept[*]}"
            step verify-json bash -c "imagebuild verify '$public:$target' --key build/keys/cosign.pub ${accept[*]} --json > '$work/verify.json' || true"
        else
            step verify imagebuild verify "$public:$target" --key build/keys/cosign.pub "${accept[@]}"
        fi
        step page imagebuild report --out "$work/site" --registry "$public" --key build/keys/cosign.pub
        ;;
    clean)
        for repo in "$staging" "$public"; do
            python3 - "$repo" <<'PY'
import json, sys, urllib.error, urllib.request
host, _, name = sys.argv[1].partition("/")
base = f"http://{host}/v2/{name}"
kinds = ", ".join(("application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
                   "application/vnd.docker.distribution.manifest.list.v2+json",
                   "application/vnd.docker.distribution.manifest.v2+json"))
try:
    with urllib.request.urlopen(f"{base}/tags/list", timeout=30) as answer:
        tags = json.loads(answer.read(1 << 20)).get("tags") or []
except urllib.error.HTTPError as error:
    if error.code != 404:
        raise
    tags = []
digests = set()
for tag in tags:
    ask = urllib.request.Request(f"{base}/manifests/{tag}", headers={"Accept": kinds})
    with urllib.request.urlopen(ask, timeout=30) as answer:
        digests.add(answer.headers["Docker-Content-Digest"])
        # an index's children are untagged manifests of their own: deleted too, or their layers stay referenced
        digests.update(child["digest"] for child in json.loads(answer.read(4 << 20)).get("manifests", []))
for digest in sorted(digests):
    urllib.request.urlopen(urllib.request.Request(f"{base}/manifests/{digest}", method="DELETE"), timeout=30).close()
print(f"{sys.argv[1]}: {len(tags)} tags, {len(digests)} manifests deleted")
PY
        done
        # without --delete-untagged: Debian 12's registry (2.8) takes an index's children for untagged manifests and
        # deletes those of every multi-platform tag (distribution/distribution#3178, fixed by #3822 for 3.x only);
        # the children above were deleted by digest instead
        docker-registry garbage-collect /var/lib/imagebuild-registry/config.yml >"$work/registry-gc.log" 2>&1
        echo "registry: garbage collected ($(grep -c 'blob eligible for deletion' "$work/registry-gc.log" || true) blobs); $(du -sh /var/lib/imagebuild-registry/data | cut -f1) left"
        ;;
    *) echo "usage: $0 stage linux/amd64|linux/arm64 | promote | clean" >&2; exit 2 ;;
esac
