"""Policy over .github/workflows/images.yml, read as GitHub reads it (no engine needed): what a pull request can
reach, what holds the release identity and credentials, pins, timeouts, shells, cleanups; and the workflow's own
gate scripts run here on made-up reports (a wrong arch, a missing leg, a prefix-named neighbour, no OIDC)."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / ".github" / "workflows" / "images.yml"
sys.path.insert(0, str(REPO / "scripts"))
from ci_expr import EXPR, Evaluator, condition  # noqa: E402

GENERIC_LABELS = {"self-hosted", "linux", "x64", "arm64"}
SHA_PIN = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")


def load() -> dict[str, Any]:
    return yaml.safe_load(WORKFLOW.read_text())


def jobs() -> dict[str, dict[str, Any]]:
    return load()["jobs"]


def github(event: str, fork: bool = False) -> dict[str, Any]:
    repo = "owner/imagebuild"
    ctx: dict[str, Any] = {"event_name": event, "repository": repo}
    if event == "pull_request":
        head = "someone/imagebuild" if fork else repo
        ctx |= {
            "ref": "refs/pull/7/merge",
            "event": {"pull_request": {"number": 7, "head": {"repo": {"full_name": head}}}},
        }
    else:
        ctx |= {"ref": "refs/heads/main", "event": {}}
    return ctx


def runs_for(job: dict[str, Any], ctx: dict[str, Any]) -> bool:
    needs = {n: {"result": "success", "outputs": {}} for n in jobs()}
    return condition(job.get("if"), Evaluator({"github": ctx, "needs": needs, "vars": {}, "inputs": {}}))


def pr_jobs() -> dict[str, dict[str, Any]]:
    """Jobs a pull request (from this repository or a fork) can start."""
    return {
        name: job
        for name, job in jobs().items()
        if runs_for(job, github("pull_request")) or runs_for(job, github("pull_request", fork=True))
    }


def signing_jobs() -> dict[str, dict[str, Any]]:
    return {n: j for n, j in jobs().items() if (j.get("permissions") or {}).get("id-token") == "write"}


def step(job: str, starts: str) -> dict[str, Any]:
    found = [s for s in jobs()[job]["steps"] if str(s.get("name", "")).startswith(starts)]
    assert len(found) == 1, f"{job}: {len(found)} steps named {starts!r}"
    return found[0]


def run_step(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"], "HOME": str(cwd)}
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd, env={**base, **env}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_workflow_validates_against_the_github_schema() -> None:
    exe = shutil.which("check-jsonschema")
    assert exe, "check-jsonschema is a test dependency (pip install -e .[test])"
    proc = subprocess.run(
        [exe, "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_pull_requests_reach_no_release_credential_identity_or_signing_runner() -> None:
    prs, signers = pr_jobs(), signing_jobs()
    assert set(prs) == {"matrix", "build", "smoke"} and set(signers) == {"publish"}
    assert not runs_for(jobs()["build"], github("pull_request", fork=True)), "a fork's code on a self-hosted runner"
    signer_labels = {label for j in signers.values() for label in j["runs-on"]} - GENERIC_LABELS
    assert signer_labels == {"release"}
    for name, job in jobs().items():  # the release label is the signing jobs' alone, static or computed
        if name not in signers:
            assert "release" not in (job["runs-on"] if isinstance(job["runs-on"], list) else [])
            assert '"release"' not in json.dumps(job), f"{name} names the release label"
    for name, job in prs.items():
        blob = json.dumps(job)
        assert "secrets.RELEASE_" not in blob, f"{name} can read release credentials"
        assert (job.get("permissions") or {}).get("id-token") != "write", f"{name} can mint an OIDC token"
        assert "environment" not in job
        if isinstance(job["runs-on"], list):
            assert not set(job["runs-on"]) & signer_labels
    for name, job in jobs().items():
        if "secrets.RELEASE_" in json.dumps(job):
            assert job.get("environment") == "release", f"{name} reads release secrets outside the environment"
    assert "secrets.RELEASE_" in json.dumps(signers["publish"]) and signers["publish"]["environment"] == "release"
    assert not runs_for(jobs()["publish"], github("push") | {"ref": "refs/heads/feature"})


def test_the_computed_runner_pools_keep_pull_requests_off_main_builders(tmp_path: Path) -> None:
    """Run the matrix job's own script for a PR and for main: PR legs land in builder-pr, never on a label the
    release job has, and main legs never in the PR pool."""
    shim = tmp_path / "bin" / "imagebuild"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\ncd {REPO} && exec {shutil.which("imagebuild") or "imagebuild"} "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    script = step("matrix", "Compute the build and smoke matrices")["run"]
    pools = {}
    for event in ("pull_request", "push"):
        out = tmp_path / f"out-{event}"
        env = {"PATH": f"{shim.parent}:{os.environ['PATH']}", "EVENT": event, "GITHUB_OUTPUT": str(out)}
        proc = run_step(script, tmp_path, env)
        assert proc.returncode == 0, proc.stderr
        outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
        legs = json.loads(outputs["builds"]) + json.loads(outputs["smoke"])
        pools[event] = {label for leg in legs for label in leg["runs_on"]}
        names = [leg["artifact"] for leg in legs]
        assert len(names) == len(set(names))
    assert "builder-pr" in pools["pull_request"] and "builder" not in pools["pull_request"]
    assert "builder" in pools["push"] and "builder-pr" not in pools["push"]
    assert not pools["pull_request"] & {"release"} and not pools["push"] & {"release"}


def test_every_action_is_pinned_by_commit_sha_and_checkout_keeps_no_token() -> None:
    uses = [(name, s) for name, job in jobs().items() for s in job["steps"] if "uses" in s]
    assert len(uses) >= 8
    for name, s in uses:
        assert SHA_PIN.match(s["uses"]), f"{name}: {s['uses']} is not pinned by a 40-hex commit SHA"
        if s["uses"].startswith("actions/checkout@"):
            assert s.get("with", {}).get("persist-credentials") is False, f"{name}: checkout keeps the token"
    for line in WORKFLOW.read_text().splitlines():  # each pin says which release it is
        if re.search(r"uses: \S+@[0-9a-f]{40}", line):
            assert re.search(r"#\s*v\d+\.\d+\.\d+", line), line


def test_every_job_has_a_timeout_minimal_permissions_and_legs_that_do_not_cancel_each_other() -> None:
    workflow = load()
    assert workflow["permissions"] == {}
    assert workflow["defaults"]["run"]["shell"] == "bash"
    for name, job in jobs().items():
        assert isinstance(job.get("timeout-minutes"), int) and 0 < job["timeout-minutes"] <= 360, name
        permissions = job.get("permissions")
        assert isinstance(permissions, dict) and permissions.get("contents") == "read", name
        writes = {k for k, v in permissions.items() if v == "write"}
        assert writes <= ({"id-token"} if name == "publish" else set()), f"{name} writes {writes}"
        if "strategy" in job:
            assert job["strategy"].get("fail-fast") is False, name
    on = workflow[True]  # PyYAML reads the key `on` as True
    assert on["pull_request"]["paths"] == on["push"]["paths"] and "README.md" not in on["push"]["paths"]
    assert "dockerfiles/**" in on["push"]["paths"] and ".github/workflows/images.yml" in on["push"]["paths"]


def test_scripts_never_run_as_root_or_install_into_the_system_python() -> None:
    for name, job in jobs().items():
        for s in job["steps"]:
            script = s.get("run", "")
            assert not EXPR.search(script), f"{name}: an expression inside a script: {script[:80]}"
            assert not re.search(r"\bsudo\b|\bsetup\.sh\b", script), f"{name}: {script[:80]}"
            for line in script.splitlines():
                if re.search(r"\bpip\b.*\binstall\b", line):
                    assert '"$RUNNER_TEMP/venv/bin/python" -m pip' in line, f"{name}: {line.strip()}"
            if "docker login" in script:
                assert "--password-stdin" in script and "-p " not in script
        for key, value in job.get("env", {}).items():
            if "secrets." in str(value):
                assert key in {"STAGING_USER", "STAGING_TOKEN", "RELEASE_USER", "RELEASE_TOKEN", "PIP_INDEX_URL"}
    assert "PIP_INDEX_URL" in jobs()["build"]["env"]  # imagebuild build passes it as a BuildKit secret only
    assert jobs()["build"]["env"]["STAGING_TOKEN"] != jobs()["smoke"]["env"]["STAGING_TOKEN"]


def test_logins_end_and_pulled_images_leave_in_always_steps() -> None:
    for name, job in jobs().items():
        scripts = [s.get("run", "") for s in job["steps"]]
        if any("docker login" in s for s in scripts):
            last = job["steps"][-1]
            assert last.get("if") == "always()" and "docker logout" in last["run"], name
            assert 'rm -rf "$DOCKER_CONFIG"' in last["run"]
    cleanup = jobs()["smoke"]["steps"][-1]
    assert cleanup["if"] == "always()" and 'docker image rm "$PULLED"' in cleanup["run"]
    assert any("PULLED=" in s.get("run", "") for s in jobs()["smoke"]["steps"])


def test_build_cache_of_a_pull_request_is_its_own() -> None:
    script = step("build", "Build")["run"]
    assert 'scope="pr${PR_NUMBER}"' in script and "cache-${scope}-" in script
    # the only cache a build writes is its own scope's
    assert re.findall(r'--cache-to "type=registry,ref=\$\{(\w+)\}', script) == ["own"]


def _gate_case(
    tmp_path: Path, reports: dict[str, dict[str, Any]], staged: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    builds = [
        {"target": "t", "platform": p, "slug": p.replace("/", "-"), "artifact": f"staged-t-{p.replace('/', '-')}"}
        for p in ("linux/amd64", "linux/arm64")
    ]
    smoke = [
        {"target": "t", "arch": "gfx942", "gpu": "rocm", "platform": "linux/amd64", "staged": "staged-t-linux-amd64",
         "artifact": "smoke-t-linux-amd64-gfx942"},
        {"target": "t", "arch": "cpu", "gpu": "none", "platform": "linux/arm64", "staged": "staged-t-linux-arm64",
         "artifact": "smoke-t-linux-arm64-cpu"},
    ]  # fmt: skip
    art = tmp_path / "build" / "ci" / "artifacts"
    for name, image in staged.items():
        (art / name).mkdir(parents=True, exist_ok=True)
        (art / name / "staged.json").write_text(json.dumps({"image_id": image, "digest_ref": f"r/s@{image}"}))
    for name, report in reports.items():
        (art / name).mkdir(parents=True, exist_ok=True)
        (art / name / "report.json").write_text(json.dumps(report))
    env = {"TARGET": "t", "BUILDS": json.dumps(builds), "SMOKE": json.dumps(smoke)}
    return run_step(step("publish", "Gate")["run"], tmp_path, env)


GOOD = {
    "smoke-t-linux-amd64-gfx942": {
        "passed": True,
        "arch": "gfx942:sramecc+:xnack-",
        "gpu": "rocm",
        "image_id": "sha256:a",
    },
    "smoke-t-linux-arm64-cpu": {"passed": True, "arch": "cpu", "gpu": "none", "image_id": "sha256:b"},
}
STAGED = {"staged-t-linux-amd64": "sha256:a", "staged-t-linux-arm64": "sha256:b"}


def test_the_release_gate_promotes_only_when_every_planned_leg_passed_on_its_arch(tmp_path: Path) -> None:
    # a neighbour target whose name starts with this one's never counts (exact artifact names)
    neighbour = {"smoke-t-debug-linux-amd64-gfx942": {"passed": False}}
    proc = _gate_case(tmp_path, GOOD | neighbour, STAGED)
    assert proc.returncode == 0, proc.stderr
    args = (tmp_path / "build/ci/publish/promote.args").read_text().split()
    assert args[:2] == ["--promote", "-"] and args.count("--index-of") == 2 and args.count("--report") == 2
    assert "t-debug" not in " ".join(args)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"smoke-t-linux-amd64-gfx942": GOOD["smoke-t-linux-amd64-gfx942"] | {"arch": "gfx90a"}}, "reported gfx90a"),
        ({"smoke-t-linux-amd64-gfx942": GOOD["smoke-t-linux-amd64-gfx942"] | {"gpu": "none", "arch": "cpu"}}, "cpu"),
        ({"smoke-t-linux-arm64-cpu": GOOD["smoke-t-linux-arm64-cpu"] | {"passed": False}}, "did not pass"),
        ({"smoke-t-linux-arm64-cpu": GOOD["smoke-t-linux-arm64-cpu"] | {"image_id": "sha256:x"}}, "not the staged"),
    ],
)
def test_the_release_gate_refuses_a_wrong_arch_a_failed_leg_or_another_image(
    tmp_path: Path, change: dict[str, Any], why: str
) -> None:
    proc = _gate_case(tmp_path, GOOD | change, STAGED)
    assert proc.returncode != 0 and why in proc.stderr, proc.stderr
    assert not (tmp_path / "build/ci/publish/promote.args").exists()


def test_the_release_gate_refuses_a_missing_leg_or_platform(tmp_path: Path) -> None:
    proc = _gate_case(tmp_path, {"smoke-t-linux-arm64-cpu": GOOD["smoke-t-linux-arm64-cpu"]}, STAGED)
    assert proc.returncode != 0 and "linux/amd64 gfx942: no smoke report" in proc.stderr
    proc = _gate_case(tmp_path / "b", GOOD, {"staged-t-linux-amd64": "sha256:a"})
    assert proc.returncode != 0 and "linux/arm64: not staged" in proc.stderr


def test_a_smoke_leg_fails_when_its_runner_reports_another_arch(tmp_path: Path) -> None:
    script = step("smoke", "This runner reported the planned arch")["run"]
    (tmp_path / "build/ci/smoke").mkdir(parents=True)
    (tmp_path / "build/ci/staged").mkdir(parents=True)
    (tmp_path / "build/ci/staged/staged.json").write_text(json.dumps({"image_id": "sha256:a"}))
    runtime = [{"name": "runtime", "status": "passed", "numbers": {}}]
    report = {"arch": "gfx90a", "gpu": "rocm", "image_id": "sha256:a", "checks": runtime}
    (tmp_path / "build/ci/smoke/report.json").write_text(json.dumps(report))
    proc = run_step(script, tmp_path, {"ARCH": "gfx942", "GPU": "rocm"})
    assert proc.returncode != 0 and "reported gfx90a" in proc.stderr
    (tmp_path / "build/ci/smoke/report.json").write_text(json.dumps(report | {"arch": "gfx942:sramecc+:xnack-"}))
    proc = run_step(script, tmp_path, {"ARCH": "gfx942", "GPU": "rocm"})
    assert proc.returncode == 0, proc.stderr


def test_without_an_oidc_token_on_github_the_release_fails_before_anything_is_promoted(tmp_path: Path) -> None:
    first = jobs()["publish"]["steps"][0]["run"]
    assert run_step(first, tmp_path, {"GITHUB_ACTIONS": "true"}).returncode == 1
    assert (
        run_step(first, tmp_path, {"GITHUB_ACTIONS": "true", "ACTIONS_ID_TOKEN_REQUEST_URL": "https://x"}).returncode
        == 0
    )
    # the promote step takes no key on GitHub, even when one is offered
    calls = tmp_path / "calls"
    shim = tmp_path / "bin" / "imagebuild"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "build/ci/publish").mkdir(parents=True)
    (tmp_path / "build/ci/publish/promote.args").write_text("--promote\nr/s@sha256:a\n")
    promote = step("publish", "Promote")["run"]
    env = {
        "PATH": f"{shim.parent}:{os.environ['PATH']}", "PUBLIC": "r/p", "TARGET": "t", "GITHUB_SHA": "0" * 40,
        "IMAGEBUILD_REHEARSAL_SIGN_KEY": "k", "IMAGEBUILD_REHEARSAL_KEY_PASSWORD_FILE": "p",
        "IMAGEBUILD_REHEARSAL_VERIFY_KEY": "v",
    }  # fmt: skip
    proc = run_step(promote, tmp_path, env | {"GITHUB_ACTIONS": "true"})
    assert proc.returncode == 1 and "refusing to publish unsigned" in proc.stdout and not calls.exists()
    proc = run_step(promote, tmp_path, env | {"GITHUB_ACTIONS": "true", "ACTIONS_ID_TOKEN_REQUEST_URL": "https://x"})
    assert proc.returncode == 0, proc.stderr
    lines = calls.read_text().splitlines()
    assert "--keyless" in lines[0] and "--sign-key" not in lines[0] and "--certificate-identity-regexp" in lines[1]
    assert "images\\.yml@refs/heads/main$" in lines[1]


def _promote_then_page(tmp_path: Path, env: dict[str, str]) -> list[list[str]]:
    """The promote step, then the page step, with `imagebuild` a shim that records each call's arguments."""
    calls = tmp_path / "calls.json"
    shim = tmp_path / "bin" / "imagebuild"
    shim.parent.mkdir(parents=True)
    record = f"import json, sys; open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -c {json.dumps(record)} "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "build/ci/publish").mkdir(parents=True)
    (tmp_path / "build/ci/publish/promote.args").write_text("--promote\nr/s@sha256:a\n")
    base = {"PATH": f"{shim.parent}:{os.environ['PATH']}", "PUBLIC": "r/p", "TARGET": "t", "GITHUB_SHA": "0" * 40}
    for name in ("Promote", "The compatibility page"):
        proc = run_step(step("publish", name)["run"], tmp_path, base | env)
        assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in calls.read_text().splitlines()]


@pytest.mark.parametrize(
    ("env", "flags"),
    [
        (
            {"GITHUB_ACTIONS": "true", "ACTIONS_ID_TOKEN_REQUEST_URL": "https://x", "GITHUB_REPOSITORY": "o/r"},
            ["--certificate-identity-regexp", "--certificate-oidc-issuer"],
        ),
        (
            {"IMAGEBUILD_REHEARSAL_SIGN_KEY": "k", "IMAGEBUILD_REHEARSAL_KEY_PASSWORD_FILE": "p",
             "IMAGEBUILD_REHEARSAL_VERIFY_KEY": "v"},
            ["--key"],
        ),
    ],
    ids=["keyless", "rehearsal-key"],
)  # fmt: skip
def test_the_page_is_made_from_the_public_repository_with_the_identity_the_verify_step_checked(
    tmp_path: Path, env: dict[str, str], flags: list[str]
) -> None:
    publish, verify, report = _promote_then_page(tmp_path, env)
    assert publish[0] == "publish" and verify[:2] == ["verify", "r/p:t"]
    assert report[:5] == ["report", "--out", "site", "--registry", "r/p"]
    assert report[5:] == verify[2:] and [a for a in report[5:] if a.startswith("--")] == flags
    if "--certificate-identity-regexp" in report:
        identity = report[report.index("--certificate-identity-regexp") + 1]
        assert identity == r"^https://github.com/o/r/\.github/workflows/images\.yml@refs/heads/main$"
        assert report[report.index("--certificate-oidc-issuer") + 1] == "https://token.actions.githubusercontent.com"
    # one source for the identity: the page step reads the promote step's flags, never spells its own
    assert "certificate" not in step("publish", "The compatibility page")["run"]


def test_the_page_is_made_after_the_release_and_uploaded_as_an_artifact() -> None:
    steps = jobs()["publish"]["steps"]
    promote = steps.index(step("publish", "Promote"))
    page = steps.index(step("publish", "The compatibility page"))
    upload = steps[page + 1]
    assert promote < page < len(steps) - 1 and "if" not in steps[page]  # only once the promote step verified
    assert upload["uses"].startswith("actions/upload-artifact@")
    assert upload["with"]["path"] == "site/" and upload["with"]["if-no-files-found"] == "error"
    assert upload["with"]["name"] == "compat-page-${{ matrix.target }}"  # one artifact per release leg
    assert all(s.get("uses", "").split("@")[0] != "actions/deploy-pages" for s in steps)  # docs/ci.md: why not yet
