#!/usr/bin/env bash
# README command 1, on a fresh machine: install what is missing, start an engine and a loopback registry when
# none runs, then render, build, smoke (CPU, in the container) and publish local-cpu to 127.0.0.1:5000.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

REGISTRY="${IMAGEBUILD_QUICKSTART_REGISTRY:-127.0.0.1:5000/imagebuild}"

bash scripts/setup.sh
# setup.sh's virtual environment (issue 29): imagebuild and python3 below are the venv's
VENV="${IMAGEBUILD_VENV:-$(pwd)/.venv}"
export VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH"
echo "== render local-cpu"
imagebuild render local-cpu
echo "== build local-cpu"
imagebuild build local-cpu
echo "== smoke local-cpu (CPU, inside each platform's image; linux/arm64 under emulation)"
imagebuild smoke local-cpu --gpu none
# The runtime check must have served (a skip would mean the image has no runtime): say what it measured.
python3 - build/smoke/local-cpu/report.json <<'PY'
import json
import sys

runtime = {c["name"]: c for c in json.load(open(sys.argv[1], encoding="utf-8"))["checks"]}["runtime"]
if runtime["status"] != "passed":
    sys.exit(f"error: smoke check runtime {runtime['status']}: {runtime['reason']}")
lat, thr = runtime["latency"], runtime["throughput"]
print(
    f"runtime passed: {runtime['numbers']['runtime']} served {runtime['numbers']['completion_tokens']} tokens; "
    f"server start {lat['server_start_s']:.2f} s, time to first token {lat['ttft_s'] * 1000:.0f} ms, "
    f"{thr['tokens_per_s']:.0f} tokens/s"
)
PY
# A throwaway signing key pair under build/keys (its password in a file, never an argument): signs what the
# quick start publishes to the loopback registry. Real releases sign keyless in CI (docs/reference.md: "Verify an
# image").
KEYS=build/keys
if [[ ! -f "$KEYS/cosign.key" ]]; then
    echo "== throwaway cosign key pair in ${KEYS}/"
    mkdir -p "$KEYS" && chmod 700 "$KEYS"
    (umask 077 && python3 -c 'import secrets, sys; sys.stdout.write(secrets.token_urlsafe(24))' >"$KEYS/password")
    COSIGN_PASSWORD="$(<"$KEYS/password")" cosign generate-key-pair --output-key-prefix "$KEYS/cosign" >/dev/null
fi
echo "== publish local-cpu to ${REGISTRY}: one index (linux/amd64, linux/arm64), signed, SBOM, provenance, smoke"
imagebuild publish local-cpu --registry "$REGISTRY" --sign-key "$KEYS/cosign.key" --key-password-file "$KEYS/password"
echo "== verify ${REGISTRY}:local-cpu"
imagebuild verify "${REGISTRY}:local-cpu" --key "$KEYS/cosign.pub"
echo "== pull ${REGISTRY}:local-cpu per platform"
for want in linux/amd64:x86_64 linux/arm64:aarch64; do
    run=(/usr/bin/docker run --rm --pull always --network host --platform "${want%%:*}" --entrypoint sh)
    got="$("${run[@]}" "${REGISTRY}:local-cpu" -c 'uname -m; python3 -c "import platform; print(platform.machine())"' |
        tr '\n' ' ')"
    [[ "$got" == "${want##*:} ${want##*:} " ]] || { echo "error: ${want%%:*} image says '$got'" >&2; exit 1; }
    echo "${want%%:*}: uname -m and platform.machine() are ${want##*:}"
done
echo "== compatibility page (what was built, smoked and published; ${REGISTRY}'s attestations verified)"
imagebuild report --registry "$REGISTRY" --key "$KEYS/cosign.pub"

cat <<DONE

Reports:
  build    $(pwd)/build/build-report.json   (logs under build/logs/)
  smoke    $(pwd)/build/smoke/local-cpu/report.json, junit.xml (linux/arm64: build/smoke/local-cpu/linux-arm64/)
  publish  $(pwd)/build/publish/local-cpu/publish-report.json, signing.json (the index); <os>-<arch>/ per platform
  sbom     $(pwd)/build/sbom/local-cpu.cdx.json   (also /opt/imagebuild/sbom.json in the image)
  page     $(pwd)/build/report/compat.html   (data: compat.json; smoke history: build/report/smoke-history.json)
Verify it: imagebuild verify ${REGISTRY}:local-cpu --key $(pwd)/${KEYS}/cosign.pub
Pull it back: docker pull ${REGISTRY}:local-cpu
DONE
echo "Compatibility page: file://$(pwd)/build/report/compat.html"
