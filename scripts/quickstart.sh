#!/usr/bin/env bash
# README command 1, on a fresh machine: install what is missing, start an engine and a loopback registry when
# none runs, then render, build, smoke (CPU, in the container) and publish local-cpu to 127.0.0.1:5000.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

REGISTRY="${IMAGEBUILD_QUICKSTART_REGISTRY:-127.0.0.1:5000/imagebuild}"

bash scripts/setup.sh
echo "== render local-cpu"
imagebuild render local-cpu
echo "== build local-cpu"
imagebuild build local-cpu
echo "== smoke local-cpu (CPU, inside the image)"
imagebuild smoke local-cpu --gpu none
echo "== publish local-cpu to ${REGISTRY}"
imagebuild publish local-cpu --registry "$REGISTRY"

cat <<DONE

Reports:
  build    $(pwd)/build/build-report.json   (logs under build/logs/)
  smoke    $(pwd)/build/smoke/local-cpu/report.json, junit.xml
  publish  $(pwd)/build/publish/local-cpu/publish-report.json
Pull it back: docker pull ${REGISTRY}:local-cpu
DONE
