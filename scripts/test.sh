#!/usr/bin/env bash
# README command 2, and what CI runs (.ci/run): set the machine up, lint, check rendered files, run all tests.
# Engine-backed tests fail (never skip) here when no engine answers: IMAGEBUILD_REQUIRE_ENGINE=1.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
export IMAGEBUILD_REQUIRE_ENGINE=1
# setup.sh's virtual environment (issue 29): ruff, pytest, check-jsonschema, imagebuild and every `python3` a test
# starts are the venv's; nothing runs from, or was pip-installed into, the system interpreter.
VENV="${IMAGEBUILD_VENV:-$(pwd)/.venv}"
export VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH"

echo "== lint"
ruff check .
ruff format --check .
echo "== types"
# mypy strict on imagebuild/, imagecontract/ and smoke/ (pyproject.toml [tool.mypy]: the files, the options, and the
# modules still waiting for their fixes); its cache (.mypy_cache) makes a run after the first take seconds
"$VENV/bin/python" -m mypy
echo "== rendered Dockerfiles up to date"
imagebuild render --check
if [ -f .github/workflows/images.yml ]; then
    echo "== workflow schema"
    check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/images.yml
fi
echo "== tests"
"$VENV/bin/python" -m pytest -q -ra "$@"
