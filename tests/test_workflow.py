"""The CI workflow (.github/workflows/images.yml): valid against GitHub's schema, safe by construction
(no publish on pull requests, secrets only through env, `--password-stdin` and BuildKit secrets), and its
scripts run, job after job, on the local-cpu target against the loopback registry."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / ".github" / "workflows" / "images.yml"
REGISTRY = os.environ.get("IMAGEBUILD_TEST_REGISTRY", "127.0.0.1:5000")
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
JOB_ORDER = ["matrix", "build", "smoke", "publish"]


def load() -> dict[str, Any]:
    return yaml.safe_load(WORKFLOW.read_text())


def test_workflow_validates_against_the_github_schema() -> None:
    exe = shutil.which("check-jsonschema")
    assert exe, "check-jsonschema is a test dependency (pip install -e .[test])"
    proc = subprocess.run(
        [exe, "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_pull_requests_never_publish_and_secrets_stay_out_of_scripts() -> None:
    workflow = load()
    jobs = workflow["jobs"]
    assert list(jobs) == JOB_ORDER
    assert "pull_request" in workflow[True]  # PyYAML reads the key `on` as True
    assert "github.event_name != 'pull_request'" in jobs["publish"]["if"]
    assert "pull_request" not in str(jobs["build"].get("if", "")) and "if" not in jobs["smoke"]
    for name, job in jobs.items():
        for step in job["steps"]:
            script = step.get("run", "")
            assert not EXPR.search(script), f"{name}: an expression inside a script: {script[:80]}"
            if "docker login" in script:
                assert "--password-stdin" in script and "-p " not in script
        for key, value in job.get("env", {}).items():
            if "secrets." in str(value):
                assert key in {"REGISTRY_USER", "REGISTRY_TOKEN", "PIP_INDEX_URL"}
    assert "PIP_INDEX_URL" in jobs["build"]["env"]  # imagebuild build passes it as a BuildKit secret only
    assert jobs["smoke"]["runs-on"] == "${{ matrix.runs_on }}"


class Context:
    """The values GitHub would give the expressions, for a local run of the local-cpu target."""

    def __init__(self, staging: str, public: str, output: Path) -> None:
        self.values = {
            "vars.IMAGEBUILD_STAGING": staging,
            "vars.IMAGEBUILD_PUBLIC": public,
            "matrix.target": "local-cpu",
            "matrix.arch": "cpu",
            "matrix.gpu": "none",
            # linux/amd64 only: the emulated arm64 build and smoke would add minutes to CI's 2-core run; the index
            # path (per-platform staged digests -> --index-of) is exercised by tests/e2e/test_publish_index_e2e.py
            "matrix.platform": "linux/amd64",
            "matrix.slug": "linux-amd64",
            "github.event_name": "push",
            "github.ref": "refs/heads/main",
        }
        self.output = output

    def value(self, expression: str) -> str:
        if expression.startswith("secrets."):
            return ""  # no credentials on the loopback registry
        assert expression in self.values, f"the test does not know the expression {expression!r}"
        return self.values[expression]

    def expand(self, text: str) -> str:
        return EXPR.sub(lambda m: self.value(m.group(1)), str(text))

    def condition(self, expression: str, env: dict[str, str]) -> bool:
        """The conditions the workflow uses: `env.X != ''`, and the publish job's event checks."""
        if match := re.fullmatch(r"env\.(\w+) != ''", expression.strip()):
            return env.get(match.group(1), "") != ""
        if "github.event_name" in expression:
            return True  # a push to main: publish runs
        if expression.strip() == "always()":
            return True
        raise AssertionError(f"the test does not know the condition {expression!r}")


def run_job(name: str, job: dict[str, Any], workflow_env: dict[str, str], ctx: Context, shim: Path) -> None:
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "GITHUB_OUTPUT": str(ctx.output)}
    env["GITHUB_SHA"] = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    env["IMAGEBUILD_LOCAL_REPO"] = "imagebuild-workflow"  # never move the tags other tests use
    env.update({k: ctx.expand(v) for k, v in workflow_env.items()})
    env.update({k: ctx.expand(v) for k, v in job.get("env", {}).items()})
    if "if" in job:
        assert ctx.condition(job["if"], env)
    for step in job["steps"]:
        if "uses" in step:
            continue  # checkout and artifacts: one working tree holds both sides here
        step_env = {**env, **{k: ctx.expand(v) for k, v in step.get("env", {}).items()}}
        if "if" in step and not ctx.condition(step["if"], step_env):
            continue
        proc = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
            cwd=REPO, env=step_env, capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        assert proc.returncode == 0, f"{name} / {step.get('name')}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


@pytest.mark.docker
@pytest.mark.registry
def test_workflow_commands_run_in_order_on_local_cpu(tmp_path: Path) -> None:
    from imagebuild.engine.docker import find_engine
    from imagebuild.errors import ConfigError

    try:
        find_engine()
        requests.get(f"http://{REGISTRY}/v2/", timeout=5).raise_for_status()
    except (ConfigError, requests.RequestException) as exc:
        if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":
            pytest.fail(f"no engine or registry: {exc}")
        pytest.skip(f"no engine or registry: {exc}; run scripts/setup.sh")
    unique = uuid.uuid4().hex[:8]
    staging, public = f"{REGISTRY}/wf-{unique}-staging", f"{REGISTRY}/wf-{unique}"
    ctx = Context(staging, public, tmp_path / "github_output")
    shim = tmp_path / "bin"
    shim.mkdir()
    sudo = shim / "sudo"  # the builder runs setup.sh with sudo; here the tests already run as root
    sudo.write_text('#!/bin/sh\n[ "$1" = -E ] && shift\nexec "$@"\n')
    sudo.chmod(sudo.stat().st_mode | stat.S_IEXEC)
    shutil.rmtree(REPO / "build" / "ci", ignore_errors=True)

    workflow = load()
    for name in JOB_ORDER:
        run_job(name, workflow["jobs"][name], workflow.get("env", {}), ctx, shim)
        if name == "matrix":
            outputs = dict(line.split("=", 1) for line in ctx.output.read_text().splitlines())
            assert "local-cpu" in json.loads(outputs["targets"])
            smoke = {(s["target"], s["arch"]): s for s in json.loads(outputs["smoke"])}
            assert smoke[("local-cpu", "cpu")]["gpu"] == "none"
            builds = {(b["target"], b["platform"]): b for b in json.loads(outputs["builds"])}
            assert builds[("local-cpu", "linux/arm64")]["runs_on"] == ["self-hosted", "linux", "x64", "builder"]
            assert ("rocm6.1-torch2.3", "linux/arm64") not in builds
            assert "mi300" in smoke[("rocm6.1-torch2.3", "gfx942")]["runs_on"]
            assert "mi250" in smoke[("rocm6.1-torch2.3", "gfx90a")]["runs_on"]
            assert "h100" in smoke[("cuda12.1-torch2.3", "sm_90")]["runs_on"]

    ci = REPO / "build" / "ci"
    staged = json.loads((ci / "local-cpu" / "staged-local-cpu-linux-amd64" / "staged.json").read_text())
    smoke_report = json.loads((ci / "smoke-local-cpu-linux-amd64-cpu" / "report.json").read_text())
    published = json.loads((ci / "local-cpu" / "published.json").read_text())
    assert staged["allow_unsmoked"] is True and staged["repository"] == staging
    assert smoke_report["passed"] and smoke_report["image_id"] == staged["image_id"]
    assert published["ok"] and published["allow_unsmoked"] is False
    assert published["digest"] == staged["digest"] and published["image_id"] == staged["image_id"]
    head = requests.head(
        f"http://{REGISTRY}/v2/wf-{unique}/manifests/local-cpu",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
        timeout=10,
    )
    assert head.headers.get("Docker-Content-Digest") == staged["digest"]
