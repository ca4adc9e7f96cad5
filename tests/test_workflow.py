"""The CI workflow rehearsed (scripts/ci_rehearse.py): its own `run:` steps, job after job and leg after leg, in a
fresh Debian container as a non-root runner against the loopback registry. It passes for local-cpu's whole path,
fails when a step is broken, and reproduces the failure of the workflow from before issue 26. The stand-ins for the
actions behave like the pinned releases where issue 29's defects lived (small workflows of their own: download-
artifact's single match, upload-artifact on a re-run, setup-python on a Debian runner, a protected environment from
another ref), and a dispatch from another branch cannot write main's build cache. Also the expression evaluator and
the matrix expansion the rehearsal relies on (no engine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / ".github" / "workflows" / "images.yml"
BEFORE = REPO / "tests" / "data" / "images-before-issue-26.yml"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
REGISTRY = os.environ.get("IMAGEBUILD_TEST_REGISTRY", "127.0.0.1:5000")
sys.path.insert(0, str(REPO / "scripts"))
from ci_expr import Evaluator, ExprError, condition, expand  # noqa: E402
from ci_rehearse import _file_commands, _legs, on_the_cpu  # noqa: E402


def rehearse(
    tmp_path: Path, *args: str, timeout: int = 1800
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    report = tmp_path / "rehearsal.json"
    argv = [sys.executable, str(REPO / "scripts" / "ci_rehearse.py"), "--prefix", "imagebuild-rehearsal-test"]
    child = subprocess.Popen(
        [*argv, "--report", str(report), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.terminate()  # SIGTERM: the rehearsal removes its container (and what still runs there)
        out, err = child.communicate(timeout=120)
        pytest.fail(f"the rehearsal took more than {timeout} s: {err[-3000:]}")
    proc = subprocess.CompletedProcess(child.args, child.returncode, out, err)
    return proc, json.loads(report.read_text()) if report.exists() else {}


def need_engine() -> None:
    import shutil

    try:
        requests.get(f"http://{REGISTRY}/v2/", timeout=5).raise_for_status()
        ok = shutil.which("docker") is not None and subprocess.run(
            ["docker", "version"], capture_output=True, timeout=30
        ).returncode == 0  # fmt: skip
    except requests.RequestException:
        ok = False
    if not ok:
        if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":
            pytest.fail("no engine or registry")
        pytest.skip("no engine or registry; run scripts/setup.sh")


@pytest.mark.docker
@pytest.mark.registry
def test_rehearsal_runs_local_cpu_whole_path(tmp_path: Path) -> None:
    need_engine()
    # 544 s on a quiet machine; 35 min seen with eight other sessions' builds on its two cores (issue 29)
    proc, report = rehearse(tmp_path, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-6000:]
    legs = {(leg["job"], leg["leg"]): leg["status"] for leg in report["legs"]}
    assert legs == {
        ("matrix", ""): "success",
        ("build", "local-cpu linux/amd64"): "success",
        ("build", "local-cpu linux/arm64"): "success",
        ("smoke", "local-cpu linux/amd64 cpu"): "success",
        ("smoke", "local-cpu linux/arm64 cpu"): "success",
        ("publish", "local-cpu"): "success",
        ("conclusion", ""): "success",
    }
    # main's own run writes main's cache (where the builder can export one), nothing else does
    built = [s for s in report["steps"] if s["job"] == "build" and s["step"].startswith("Build")]
    if any("cache: written to" in s["log"] for s in built):
        assert all(f"cache: written to {report['cache']}:main-local-cpu-" in s["log"] for s in built)
    # every run: step of every job ran in the container (the logins only skip: no credentials here)
    workflow = yaml.safe_load(WORKFLOW.read_text())
    ran = {(s["job"], s["step"]) for s in report["steps"] if s["status"] == "passed"}
    skipped = {(s["job"], s["step"]) for s in report["steps"] if s["status"] == "skipped"}
    for job_name, job in workflow["jobs"].items():
        for step in job["steps"]:
            if "run" in step:
                key = (job_name, step["name"])
                assert key in ran or (key in skipped and step["name"].startswith("Log in")), key
    # the public tag is one index of both platforms, signed and verified by the promote step
    head = requests.get(
        f"http://{REGISTRY}/v2/{report['public'].split('/', 1)[1]}/manifests/local-cpu",
        headers={"Accept": f"{OCI_INDEX}, application/vnd.docker.distribution.manifest.list.v2+json"},
        timeout=10,
    )  # fmt: skip
    head.raise_for_status()
    platforms = {f"{m['platform']['os']}/{m['platform']['architecture']}" for m in head.json()["manifests"]}
    assert {"linux/amd64", "linux/arm64"} <= platforms
    promote = [s for s in report["steps"] if s["job"] == "publish" and s["step"].startswith("Promote")][0]
    assert promote["status"] == "passed" and "verified" in promote["log"].lower()


@pytest.mark.docker
def test_rehearsal_fails_when_a_run_step_is_broken(tmp_path: Path) -> None:
    need_engine()
    workflow = yaml.safe_load(WORKFLOW.read_text())
    step = [s for s in workflow["jobs"]["matrix"]["steps"] if s.get("name", "").startswith("The committed")][0]
    step["run"] = step["run"].replace("render --check", "render --chekc")
    broken = tmp_path / "images.yml"
    broken.write_text(yaml.safe_dump(workflow, sort_keys=False))
    proc, report = rehearse(tmp_path, "--workflow", str(broken), "--jobs", "matrix")
    assert proc.returncode == 1, proc.stderr[-3000:]
    failed = [s for s in report["steps"] if s["status"] == "failed"]
    assert [s["step"] for s in failed] == [step["name"]] and "--chekc" in failed[0]["log"]
    later = [s for s in report["steps"] if s["step"].startswith("Compute")]
    assert later and later[0]["status"] == "skipped"


@pytest.mark.docker
def test_rehearsal_reproduces_the_failure_of_the_workflow_before_issue_26(tmp_path: Path) -> None:
    need_engine()
    proc, report = rehearse(tmp_path, "--workflow", str(BEFORE))
    assert proc.returncode == 1
    failed = [s for s in report["steps"] if s["status"] == "failed"]
    assert failed[0]["job"] == "matrix" and failed[0]["step"] == "Install imagebuild"
    assert "externally-managed-environment" in failed[0]["log"]
    assert {leg["job"]: leg["status"] for leg in report["legs"]}["publish"] == "skipped"


def ev(**contexts: Any) -> Evaluator:
    return Evaluator(contexts)


def test_expressions_evaluate_as_github_documents() -> None:
    gh = {"event_name": "push", "ref": "refs/heads/main", "event": {"pull_request": None}}
    e = ev(github=gh, needs={"matrix": {"result": "success", "outputs": {"t": '["a","b"]'}}}, env={"X": ""})
    assert e.evaluate("github.event_name != 'pull_request' && github.ref == 'refs/heads/main'") is True
    assert e.evaluate("fromJSON(needs.matrix.outputs.t)") == ["a", "b"]
    assert e.evaluate("github.event.pull_request.head.repo.full_name") is None
    assert e.evaluate("github.event_name == 'PUSH'") is True  # strings compare case-insensitively
    assert e.evaluate("format('{0}-{1}', 'a', 1)") == "a-1" and e.evaluate("contains(fromJSON('[1,2]'), 2)")
    assert condition("env.X != ''", e) is False
    assert condition("!cancelled() && needs.matrix.result == 'success'", e) is True
    failing = Evaluator({"needs": {}}, lambda name: name in ("failure", "always"))
    assert condition(None, failing) is False and condition("always()", failing) is True
    assert condition("true", failing) is False  # no status function: success() && (...)
    with pytest.raises(ExprError):
        e.evaluate("hashFiles('x')")
    with pytest.raises(ExprError):
        e.evaluate("nothere.x")
    assert expand("${{ github.ref }}/x", e) == "refs/heads/main/x"
    assert expand("${{ fromJSON('[1]') }}", e) == [1]


def test_matrix_legs_expand_axes_and_include(tmp_path: Path) -> None:
    e = ev(needs={"m": {"outputs": {"b": json.dumps([{"target": "t", "slug": "s"}])}}})
    assert _legs({"strategy": {"matrix": {"include": "${{ fromJSON(needs.m.outputs.b) }}"}}}, e) == [
        {"target": "t", "slug": "s"}
    ]
    legs = _legs({"strategy": {"matrix": {"a": [1, 2], "b": ["x"], "include": [{"a": 1, "c": 3}]}}}, e)
    assert legs == [{"a": 1, "b": "x", "c": 3}, {"a": 2, "b": "x"}]
    assert _legs({}, e) == [{}]
    commands = tmp_path / "env"
    commands.write_text("A=1\nB<<EOF\nline 1\nline 2\nEOF\nC=x=y\n")
    assert _file_commands(commands) == {"A": "1", "B": "line 1\nline 2", "C": "x=y"}


def test_gpu_legs_run_on_the_cpu_and_say_so() -> None:
    leg = {"target": "rocm6.1-torch2.3", "arch": "gfx942", "gpu": "rocm"}
    matrix, marks = on_the_cpu(leg, ["self-hosted", "linux", "rocm", "mi300"])
    assert matrix["gpu"] == "none" and leg["gpu"] == "rocm" and "GPU leg on the CPU" in marks[0] and "rocm" in marks[0]
    assert on_the_cpu({"arch": "cpu", "gpu": "none"}, ["self-hosted", "linux", "x64", "builder"]) == (
        {"arch": "cpu", "gpu": "none"},
        [],
    )


# ------------------------------------------------------------------------------------------------------------------
# Issue 29: the stand-ins behave like the pinned actions where the workflow's defects lived. Small workflows of their
# own, rehearsed in the same runner container (no pip, no build: a minute each).

UPLOAD = "actions/upload-artifact@bbbca2ddaa5d8feaa63e36b76fdaad77386f024f"
DOWNLOAD = "actions/download-artifact@3e5f45b2cfb9172054b4087a40e8e0b5a5461e7c"
SETUP_PYTHON = "actions/setup-python@5fda3b95a4ea91299a34e894583c3862153e4b97"
ARTIFACTS_WORKFLOW = {
    "name": "artifacts",
    "on": "push",
    "jobs": {
        "up": {
            "runs-on": ["self-hosted", "linux", "x64", "builder"],
            "strategy": {"matrix": {"leg": ["a", "b"]}},
            "env": {"LEG": "${{ matrix.leg }}"},
            "steps": [
                {"name": "write", "run": 'mkdir -p "out/$LEG" && echo "$GITHUB_RUN_ATTEMPT" > "out/$LEG/f.txt"'},
                {"name": "upload flat", "uses": UPLOAD,
                 "with": {"name": "flat-${{ matrix.leg }}", "path": "out/${{ matrix.leg }}/"}},
                {"name": "upload nested", "if": "always()", "uses": UPLOAD,
                 "with": {"name": "nested-${{ matrix.leg }}", "path": "out/", "overwrite": True}},
            ],
        },
        "down": {
            "needs": "up",
            "if": "always()",  # on the re-run too, after up's refused uploads
            "runs-on": ["self-hosted", "linux", "x64", "builder"],
            "steps": [
                {"name": "by name", "uses": DOWNLOAD, "with": {"name": "flat-a", "path": "in/name/"}},
                {"name": "one match", "uses": DOWNLOAD, "with": {"pattern": "flat-a*", "path": "in/one/"}},
                {"name": "two matches", "uses": DOWNLOAD, "with": {"pattern": "flat-*", "path": "in/two/"}},
                {"name": "merged", "uses": DOWNLOAD,
                 "with": {"pattern": "nested-*", "path": "in/merged/", "merge-multiple": True}},
                {"name": "missing", "uses": DOWNLOAD, "continue-on-error": True,
                 "with": {"name": "nope", "path": "in/x/"}},
                {"name": "layout", "run": "test -f in/name/f.txt && test -f in/one/f.txt && ! test -e in/one/flat-a\n"
                 "test -f in/two/flat-a/f.txt && test -f in/two/flat-b/f.txt\n"
                 'grep -qx "$GITHUB_RUN_ATTEMPT" in/merged/a/f.txt\n'
                 'grep -qx "$GITHUB_RUN_ATTEMPT" in/merged/b/f.txt\n'},
            ],
        },
    },
}  # fmt: skip


@pytest.mark.docker
def test_rehearsal_artifacts_behave_like_the_pinned_actions_on_a_run_and_a_rerun(tmp_path: Path) -> None:
    need_engine()
    path = tmp_path / "artifacts.yml"
    path.write_text(yaml.safe_dump(ARTIFACTS_WORKFLOW, sort_keys=False))
    proc, report = rehearse(tmp_path, "--workflow", str(path), "--rerun", "up,down", timeout=900)
    steps = {(s["attempt"], s["job"], s["leg"], s["step"]): s for s in report["steps"]}
    first = [s for s in report["steps"] if s["attempt"] == 1 and s["step"] != "missing"]
    assert first and all(s["status"] == "passed" for s in first), [(s["step"], s["log"]) for s in first]
    # download-artifact v8.0.1: a name that is not there fails (here continue-on-error)
    missing = steps[(1, "down", "", "missing")]
    assert missing["status"] == "failed" and "Artifact 'nope' not found" in missing["log"]
    # upload-artifact v7.0.0 on a re-run: the same name again fails without overwrite, is replaced with it
    for leg in ("a", "b"):
        flat = steps[(2, "up", leg, "upload flat")]
        assert flat["status"] == "failed" and "(409) Conflict: an artifact with this name already exists" in flat["log"]
        assert steps[(2, "up", leg, "upload nested")]["status"] == "passed"
    # the re-run's downloads see attempt 2's nested artifacts (the layout step greps the attempt number)
    assert steps[(2, "down", "", "layout")]["status"] == "passed", steps[(2, "down", "", "layout")]["log"]
    assert proc.returncode == 1  # the re-run's refused uploads


RUNNERS_WORKFLOW = {
    "name": "runners",
    "on": "workflow_dispatch",
    "jobs": {
        "hosted": {"runs-on": "ubuntu-24.04", "steps": [
            {"name": "python", "uses": SETUP_PYTHON, "with": {"python-version": "3.11"}}]},
        "debian": {"runs-on": ["self-hosted", "linux", "x64", "release"], "steps": [
            {"name": "python", "uses": SETUP_PYTHON, "with": {"python-version": "3.11"}}]},
        "toolcache": {"runs-on": ["self-hosted", "linux", "x64", "release"], "steps": [
            {"name": "cache", "run": 'mkdir -p "$RUNNER_TOOL_CACHE/Python/3.11.9/x64/bin"\n'
                                     'touch "$RUNNER_TOOL_CACHE/Python/3.11.9/x64.complete"'},
            {"name": "python", "uses": SETUP_PYTHON, "with": {"python-version": "3.11"}}]},
        "protected": {"runs-on": ["self-hosted", "linux", "x64", "builder"], "environment": "builder-main",
                      "steps": [{"name": "never", "run": "exit 0"}]},
    },
}  # fmt: skip


@pytest.mark.docker
def test_rehearsal_setup_python_and_environments_behave_like_github(tmp_path: Path) -> None:
    need_engine()
    path = tmp_path / "runners.yml"
    path.write_text(yaml.safe_dump(RUNNERS_WORKFLOW, sort_keys=False))
    args = ("--workflow", str(path), "--event", "workflow_dispatch", "--ref", "refs/heads/feature")
    proc, report = rehearse(tmp_path, *args, timeout=900)
    assert proc.returncode == 1
    steps = {(s["job"], s["step"]): s for s in report["steps"]}
    assert steps[("hosted", "python")]["status"] == "passed"  # GitHub's image has it in its tool cache
    debian = steps[("debian", "python")]
    assert debian["status"] == "failed", debian["log"]
    assert "The version '3.11' with architecture 'x64' was not found for debian 12" in debian["log"]
    assert steps[("toolcache", "python")]["status"] == "passed"  # an admin's tool cache would do
    assert "found in the local cache" in steps[("toolcache", "python")]["log"]
    refused = steps[("protected", "(runner)")]
    assert refused["status"] == "failed"
    assert 'Branch "refs/heads/feature" is not allowed to deploy to builder-main' in refused["note"]
    assert ("protected", "never") not in steps


@pytest.mark.docker
@pytest.mark.registry
def test_rehearsal_a_dispatch_from_another_branch_cannot_write_mains_cache(tmp_path: Path) -> None:
    """Issue 29: pool and cache scope followed the event name, so a workflow_dispatch from any branch built on
    main's builders and wrote cache-main-*. Rehearsed from refs/heads/feature: the build runs in the untrusted
    environment and pool, and main's cache repository holds nothing afterwards."""
    need_engine()
    args = ("--event", "workflow_dispatch", "--ref", "refs/heads/feature", "--jobs", "matrix,build")
    proc, report = rehearse(tmp_path, *args, "--platform", "linux/amd64")
    assert proc.returncode == 0, proc.stderr[-6000:]
    legs = {(leg["job"], leg["leg"]): leg for leg in report["legs"]}
    assert legs[("build", "local-cpu linux/amd64")]["status"] == "success"
    assert "builder-pr" in legs[("build", "local-cpu linux/amd64")]["runs_on"]
    build = [s for s in report["steps"] if s["job"] == "build" and s["step"].startswith("Build")][0]
    cache_repo = report["cache"].split("/", 1)[1]
    tags = requests.get(f"http://{REGISTRY}/v2/{cache_repo}/tags/list", timeout=10)
    assert tags.status_code == 404 or not (tags.json().get("tags") or []), tags.text  # main's cache: untouched
    if "cache: written to" in build["log"]:  # this builder exports a registry cache: it went to its own scope
        assert f"cache: written to {report['staging']}:cache-ref-feature-local-cpu-linux-amd64" in build["log"]
        staging = requests.get(f"http://{REGISTRY}/v2/{report['staging'].split('/', 1)[1]}/tags/list", timeout=10)
        assert "cache-ref-feature-local-cpu-linux-amd64" in staging.json()["tags"]
    else:
        assert "cannot export a registry cache" in build["log"]
