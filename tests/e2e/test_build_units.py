"""Host-side pieces of build/bake/publish that need no engine: argv, log parsing, secrets, labels, refs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagebuild.building.bake import bake_file
from imagebuild.building.buildkit import STEP_OUTPUT_LINES, BuildSpec, GitInfo, LogSummary, command
from imagebuild.building.secrets import collect_secrets
from imagebuild.building.specs import PlanOptions, plan, select_targets
from imagebuild.engine.docker import Engine
from imagebuild.engine.registry import RepoRef
from imagebuild.errors import ConfigError
from imagebuild.matrix import load_matrix
from imagebuild.plan.target_plan import plan_for
from imagebuild.release.publish import find_passing_report

REPO = Path(__file__).resolve().parents[2]
NATIVE = Engine("/usr/bin/docker", "buildkit", "20.10.24", "20.10.24", {"DOCKER_BUILDKIT": "1"})
BUILDX = Engine("/usr/bin/docker", "buildx", "28.2.2", "28.2.2")


def spec(**kwargs: object) -> BuildSpec:
    base: dict[str, object] = {
        "target": "t",
        "context": Path("/ctx"),
        "dockerfile": Path("/ctx/Dockerfile"),
        "tags": ["imagebuild:t"],
        "log_path": Path("/tmp/t.log"),
    }
    return BuildSpec(**{**base, **kwargs})  # type: ignore[arg-type]


def test_argv_has_host_network_secrets_by_file_and_labels() -> None:
    argv = command(spec(secrets={"pipcert": Path("/ca.crt")}, labels={"a": "1"}, build_args={"X": "y"}), NATIVE)
    assert argv[:3] == ["/usr/bin/docker", "build", "--progress"]
    assert argv[argv.index("--network") + 1] == "host"
    assert "id=pipcert,src=/ca.crt" in argv and "--label" in argv and "X=y" in argv
    assert argv[-1] == "/ctx"


def test_buildx_loads_and_takes_builder_and_registry_cache() -> None:
    argv = command(spec(builder="remote", cache_to=["type=registry,ref=r/c"]), BUILDX)
    assert argv[1:3] == ["buildx", "build"] and "--load" not in argv
    # loaded as one OCI manifest, without BuildKit's provenance (its times made every rebuild a new local ID)
    assert argv[argv.index("--output") + 1] == "type=docker,oci-mediatypes=true" and "--provenance=false" in argv
    assert argv[argv.index("--builder") + 1] == "remote"
    assert argv[argv.index("--cache-to") + 1] == "type=registry,ref=r/c"


def test_without_buildx_builder_and_registry_cache_to_are_usage_errors() -> None:
    with pytest.raises(ConfigError, match="buildx"):
        command(spec(builder="remote"), NATIVE)
    with pytest.raises(ConfigError, match="type=inline"):
        command(spec(cache_to=["type=registry,ref=r/c"]), NATIVE)
    assert "BUILDKIT_INLINE_CACHE=1" in command(spec(cache_to=["type=inline"]), NATIVE)


def test_log_summary_counts_cached_steps_and_names_the_failing_one() -> None:
    summary = LogSummary()
    for line in [
        "#4 [base 1/3] FROM docker.io/local/debian:bookworm",
        "#5 [base 2/3] RUN apt-get update",
        "#5 CACHED",
        "#6 [base 3/3] RUN exit 7",
        "#6 ERROR: executor failed running [/bin/sh -c exit 7]: exit code: 7",
        "#7 [internal] load build context",
    ]:
        summary.feed(line)
    assert summary.failed == "[base 3/3] RUN exit 7"
    assert summary.build_steps == ["5", "6"] and summary.cached == {"5"}


def test_log_summary_tail_is_the_failing_steps_own_output_then_the_engines_error() -> None:
    """BuildKit ends a failed build's log with a Dockerfile excerpt: the step's own error (pip's) came before it."""
    summary = LogSummary()
    lines = [
        "#5 [base 2/3] RUN pip download x",
        *(f"#5 {i}.100 noise {i}" for i in range(40)),
        "#6 [base 3/3] RUN pip install -r r.txt",
        *(f"#6 {i}.200 collecting {i}" for i in range(30)),
        "#6 31.500 ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.",
        "#6 ERROR: process did not complete successfully: exit code: 1",
        "------",
        " > [base 3/3] RUN pip install -r r.txt:",
        "Dockerfile:3",
        "   3 | >>> RUN pip install -r r.txt",
        "ERROR: failed to solve: process did not complete successfully: exit code: 1",
    ]
    for line in lines:
        summary.feed(line)
    tail = summary.failure_tail(lines[-40:])
    assert tail[-3] == "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE."
    assert tail[-2:] == [lines[-6], lines[-1]]
    assert len(tail) == STEP_OUTPUT_LINES + 2 and not any("noise" in line or "Dockerfile" in line for line in tail)
    # a failure before any step printed (the frontend, a missing base) keeps the log's own end
    assert LogSummary().failure_tail(["ERROR: failed to solve: pull access denied"]) == [
        "ERROR: failed to solve: pull access denied"
    ]


def test_secret_values_become_files_and_are_scrubbed(tmp_path: Path) -> None:
    env = {
        "PIP_INDEX_URL": "https://user:s3cr3t-token@index.example/simple",
        "TOKEN": "tok-123456",
    }
    with pytest.raises(ConfigError, match="PIP_CERT=/nope does not exist"):  # was dropped without a word
        collect_secrets({**env, "PIP_CERT": "/nope"}, [])
    secrets = collect_secrets(env, ["id=registry-token,env=TOKEN"])
    try:
        assert {"pipindex", "registry-token"} <= set(secrets.files)  # pipcert: the default bundle, if present
        assert secrets.files["pipindex"].read_text() == env["PIP_INDEX_URL"]
        assert oct(secrets.files["pipindex"].stat().st_mode & 0o777) == "0o600"
        line = secrets.scrub(f"url {env['PIP_INDEX_URL']} pw s3cr3t-token tok tok-123456")
        assert "s3cr3t" not in line and "tok-123456" not in line
        argv = command(spec(secrets=secrets.files), NATIVE)
        assert not any("s3cr3t" in arg or "tok-123456" in arg for arg in argv)
    finally:
        secrets.cleanup()
    with pytest.raises(ConfigError, match="id=NAME"):
        collect_secrets({}, ["nonsense"])


def test_labels_summarise_the_manifest() -> None:
    manifest = json.loads((REPO / "dockerfiles/rocm6.1-torch2.3/manifest.json").read_text())
    matrix = load_matrix(REPO / "matrix.yaml")
    target_plan = plan_for(matrix, matrix.target("rocm6.1-torch2.3"))
    labels = target_plan.all_labels(GitInfo("deadbeef", "deadbee", "2026-01-01T00:00:00+00:00"), "abc")
    assert labels["io.imagebuild.target"] == "rocm6.1-torch2.3"
    assert labels["io.imagebuild.arches"] == ";".join(manifest["gpu_arches"])
    # The fork at a pinned commit carries PR 124362's TunableOp fix: no patch is applied, the label names the source.
    assert labels["io.imagebuild.patches"] == ""
    assert labels["io.imagebuild.torch-source"] == (
        "https://github.com/fxmarty/pytorch@ceaa1e4a7b66e818ea4e56925bb4a5dff8c56055"
    )
    assert labels["org.opencontainers.image.revision"] == "deadbeef"
    assert json.loads(labels["io.imagebuild.components"])["imagebuild-kernels"] == manifest["gpu_arches"]


def test_arch_selects_targets_whose_platform_has_it_and_renders_for_it_alone() -> None:
    matrix = load_matrix(REPO / "matrix.yaml")
    assert [t.name for t in select_targets(matrix, [], "gfx942")] == ["rocm6.1-torch2.3", "rocm7.14-gfx942-torch2.12"]
    sm_90 = ["cuda12.1-torch2.3", "cuda13.0-torch2.14", "cuda13.0-torch2.14.1-sglang"]
    assert [t.name for t in select_targets(matrix, [], "sm_90")] == sm_90
    assert [t.name for t in select_targets(matrix, [], "sm_120")] == sm_90[1:]  # CUDA 12.1 has no sm_120
    seed, family = plan(matrix, [], PlanOptions(arch="gfx942"), env={})
    assert family.plan is not None and family.plan.target.name == "rocm7.14-gfx942-torch2.12"
    only = seed
    assert only.plan is not None and only.plan.stage("final").arch_env["PYTORCH_ROCM_ARCH"] == "gfx942"
    assert 'PYTORCH_ROCM_ARCH="gfx942"' in only.rendered_files["Dockerfile"]
    assert only.render_dir == REPO / "build/render/rocm6.1-torch2.3"
    assert "build/render/rocm6.1-torch2.3/manifest.json" in only.rendered_files["Dockerfile"]
    (default,) = plan(matrix, ["rocm6.1-torch2.3"], PlanOptions(), env={})
    assert default.render_dir is None and default.dockerfile == REPO / "dockerfiles/rocm6.1-torch2.3/Dockerfile"
    assert default.plan is not None and "gfx90a" in default.plan.stage("final").arch_env["PYTORCH_ROCM_ARCH"]


def test_bake_file_matches_the_build_plan_and_holds_no_secret_values() -> None:
    matrix = load_matrix(REPO / "matrix.yaml")
    specs = plan(matrix, [], PlanOptions(cache_from=("type=registry,ref=c",)), env={"PIP_FIND_LINKS": "/opt/wheels"})
    bake = bake_file(specs, REPO)
    assert bake["group"]["default"]["targets"] == [s.target for s in specs]
    entry = bake["target"]["local-cpu"]
    assert entry["dockerfile"] == "dockerfiles/local-cpu/Dockerfile" and entry["network"] == "host"
    assert entry["cache-from"] == ["type=registry,ref=c"]
    assert all(s.startswith("id=") and ("src=${" in s or "env=" in s) for s in entry["secret"])


def test_registry_ref_parsing() -> None:
    ref = RepoRef.parse("127.0.0.1:5000/team/imagebuild")
    assert (ref.host, ref.repo, ref.base_url) == ("127.0.0.1:5000", "team/imagebuild", "http://127.0.0.1:5000")
    assert RepoRef.parse("ghcr.io/org/img").base_url == "https://ghcr.io"
    for bad in ("127.0.0.1:5000", "host/UPPER", "ho st/x"):
        with pytest.raises(ValueError):
            RepoRef.parse(bad)


def test_publish_gate_needs_a_passing_report_for_that_exact_id(tmp_path: Path) -> None:
    good, bad = tmp_path / "a.json", tmp_path / "b.json"
    ran = [{"name": "environment", "status": "passed"}]
    good.write_text(json.dumps({"schema_version": 1, "image_id": "sha256:aa", "passed": True, "checks": ran}))
    bad.write_text(json.dumps({"schema_version": 1, "image_id": "sha256:bb", "passed": False, "checks": ran}))
    assert find_passing_report("sha256:aa", [bad, good]) == good
    assert find_passing_report("sha256:bb", [bad, good]) is None
    assert find_passing_report("sha256:cc", [good]) is None


def test_device_flags_per_gpu_kind() -> None:
    from imagebuild.engine.docker import device_options

    rocm = device_options("rocm")
    assert rocm["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert rocm["group_add"] == ["video"] and rocm["security_opt"] == ["seccomp=unconfined"]
    assert rocm["ipc_mode"] == "host"
    (request,) = device_options("cuda")["device_requests"]
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
    assert device_options("none") == {}
