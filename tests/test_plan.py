"""The TargetPlan is the one source of stages, arch variables, labels, paths and build args: every command's
output agrees with the rendered Dockerfile, and a non-default arch list never touches the committed files."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from imagebuild.building.buildkit import GitInfo
from imagebuild.matrix import arches, load_matrix
from imagebuild.plan.target_plan import plan_for, resolve_plan

REPO = Path(__file__).resolve().parents[1]
TARGETS = ["rocm6.1-torch2.3", "cuda12.1-torch2.3", "local-cpu", "cuda13.0-torch2.14"]
CONTRACT_LABELS = {  # docs/contracts.md, "Image labels"
    "org.opencontainers.image.title",
    "org.opencontainers.image.version",
    "org.opencontainers.image.revision",
    "org.opencontainers.image.created",
    "io.imagebuild.target",
    "io.imagebuild.platform",
    "io.imagebuild.torch",
    "io.imagebuild.arches",
    "io.imagebuild.matrix-sha256",
}


def dockerfile_stages(text: str) -> dict[str, tuple[str, dict[str, str]]]:
    """Stage name -> (FROM, the arch variables its ENV lines set), read from Dockerfile text."""
    found: dict[str, tuple[str, dict[str, str]]] = {}
    current = None
    for line in text.replace("\\\n", " ").splitlines():
        if match := re.match(r"^FROM (?:--platform=\S+ )?(\S+) AS (\S+)$", line):
            current = match.group(2)
            found[current] = (match.group(1), {})
        elif current and line.startswith("ENV "):
            for key, value in re.findall(r'([A-Z_][A-Z0-9_]*)=("[^"]*"|\S+)', line[4:]):
                if key in arches.ARCH_VARIABLES:
                    found[current][1][key] = value.strip('"')
    return found


def dockerfile_labels(text: str) -> dict[str, str]:
    """The LABEL of the Dockerfile's first OCI platform (a Dockerfile of several has one final-<arch> LABEL each)."""
    label = re.findall(r"^LABEL (.*?)(?<!\\)$", text.replace("\\\n", " "), flags=re.M)[0]
    return {k: json.loads(v) for k, v in re.findall(r'(\S+?)=("(?:[^"\\]|\\.)*")', label)}


def repo_copy(tmp_path: Path) -> Path:
    """What render and bake read, copied, so a command that writes where it should not cannot hurt the checkout."""
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy(REPO / "matrix.yaml", root / "matrix.yaml")
    for name in ("dockerfiles", "runtimes", "kernels", "smoke", "image"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    return root


@pytest.mark.parametrize("target", TARGETS)
def test_arches_prints_every_stage_of_the_rendered_dockerfile_with_its_variables(cli, target: str) -> None:
    """`imagebuild arches` prints the stage table from the plan, so it is the Dockerfile's own."""
    shown = json.loads(cli("arches", target, "--json").stdout)
    rendered = dockerfile_stages((REPO / "dockerfiles" / target / "Dockerfile").read_text())
    assert shown["stages"] == {name: env for name, (_, env) in rendered.items()}
    listed = {t["name"]: t for t in json.loads(cli("matrix", "list", "--json").stdout)}
    assert listed[target]["stages"] == list(rendered)  # in the Dockerfile's order


@pytest.mark.parametrize(
    ("target", "arch"), [("rocm6.1-torch2.3", "gfx942:sramecc+:xnack-"), ("cuda12.1-torch2.3", "8.6")]
)
def test_arches_table_matches_a_non_default_render(cli, tmp_path: Path, target: str, arch: str) -> None:
    root = repo_copy(tmp_path)
    matrix = str(root / "matrix.yaml")
    shown = json.loads(cli("--matrix", matrix, "arches", target, "--arch", arch, "--json").stdout)
    assert cli("--matrix", matrix, "render", target, "--arch", arch).exit_code == 0
    rendered = dockerfile_stages((root / shown["dockerfile"]).read_text())
    assert shown["stages"] == {name: env for name, (_, env) in rendered.items()}


def test_render_with_a_non_default_arch_never_touches_the_committed_files(cli, tmp_path: Path) -> None:
    root = repo_copy(tmp_path)
    committed = root / "dockerfiles" / "rocm6.1-torch2.3"
    before = {p.relative_to(committed): p.read_bytes() for p in committed.rglob("*") if p.is_file()}
    result = cli("--matrix", str(root / "matrix.yaml"), "render", "rocm6.1-torch2.3", "--arch", "gfx942")
    assert result.exit_code == 0, result.stderr
    assert {p.relative_to(committed): p.read_bytes() for p in committed.rglob("*") if p.is_file()} == before
    written = root / "build" / "render" / "rocm6.1-torch2.3" / "Dockerfile"  # where `build --arch` renders too
    assert 'PYTORCH_ROCM_ARCH="gfx942"' in written.read_text()
    assert "COPY build/render/rocm6.1-torch2.3/manifest.json /opt/imagebuild/manifest.json" in written.read_text()
    refused = cli(
        "--matrix",
        str(root / "matrix.yaml"),
        "render",
        "rocm6.1-torch2.3",
        "--arch",
        "gfx942",
        "--out",
        str(root / "dockerfiles"),
    )
    assert refused.exit_code == 2 and "committed dockerfiles/" in refused.stderr
    assert {p.relative_to(committed): p.read_bytes() for p in committed.rglob("*") if p.is_file()} == before


def test_the_default_arches_by_name_are_the_committed_plan() -> None:
    matrix = load_matrix(REPO / "matrix.yaml")
    target = matrix.target("rocm6.1-torch2.3")
    named = resolve_plan(matrix, target, "gfx90a,gfx942", {})
    assert named.default and named.out_dir == "dockerfiles/rocm6.1-torch2.3" and named.source == "--arch"
    assert named.manifest == plan_for(matrix, target).manifest


def test_build_args_are_only_those_the_dockerfile_declares(cli, tmp_path: Path) -> None:
    root = repo_copy(tmp_path)
    out = tmp_path / "bake.json"
    result = cli(
        "--matrix", str(root / "matrix.yaml"), "bake", "rocm6.1-torch2.3", "cuda12.1-torch2.3", "--out", str(out)
    )
    assert result.exit_code == 0, result.stderr
    for name, entry in json.loads(out.read_text())["target"].items():
        declared = set(re.findall(r"^ARG (\w+)", (root / entry["dockerfile"]).read_text(), flags=re.M))
        assert set(entry["args"]) <= declared, f"{name}: build args no ARG declares: {set(entry['args']) - declared}"


@pytest.mark.parametrize("target", TARGETS)
def test_labels_are_computed_once_dockerfile_and_build_never_both_set_one(cli, tmp_path: Path, target: str) -> None:
    root = repo_copy(tmp_path)
    out = tmp_path / "bake.json"
    assert cli("--matrix", str(root / "matrix.yaml"), "render", target).exit_code == 0
    assert cli("--matrix", str(root / "matrix.yaml"), "bake", target, "--out", str(out)).exit_code == 0
    at_build = json.loads(out.read_text())["target"][target]["labels"]
    in_dockerfile = dockerfile_labels((root / "dockerfiles" / target / "Dockerfile").read_text())
    assert not set(at_build) & set(in_dockerfile), "a label set twice (Dockerfile LABEL and --label)"
    assert CONTRACT_LABELS <= set(at_build) | set(in_dockerfile)
    plan = plan_for(load_matrix(root / "matrix.yaml"), load_matrix(root / "matrix.yaml").target(target))
    assert in_dockerfile == plan.labels
    assert in_dockerfile["org.opencontainers.image.title"] == in_dockerfile["io.imagebuild.target"] == target
    git = GitInfo("r", "s", "c")
    assert plan.all_labels(git, "x") == {**in_dockerfile, **plan.build_labels(git, "x")}


def test_matrix_list_and_the_ci_smoke_jobs_come_from_the_plan(cli) -> None:
    listed = {t["name"]: t for t in json.loads(cli("matrix", "list", "--json").stdout)}
    matrix = load_matrix(REPO / "matrix.yaml")
    for target in matrix.targets:
        plan = plan_for(matrix, target)
        assert listed[target.name] == json.loads(json.dumps(plan.summary()))
        assert listed[target.name]["stages"] == [s.name for s in plan.stages]
    assert listed["local-cpu"]["smoke"] == [{"arch": "cpu", "gpu": "none"}]
    assert {job["arch"] for job in listed["rocm6.1-torch2.3"]["smoke"]} == {"gfx90a", "gfx942"}


def test_every_command_prints_the_plan_the_same_way_with_dry_run(cli, tmp_path: Path) -> None:
    root = repo_copy(tmp_path)
    matrix = str(root / "matrix.yaml")
    render_out = cli("--matrix", matrix, "render", "rocm6.1-torch2.3", "--arch", "gfx942", "--dry-run")
    bake_out = cli("--matrix", matrix, "bake", "rocm6.1-torch2.3", "--arch", "gfx942", "--dry-run")
    assert render_out.exit_code == bake_out.exit_code == 0
    matrix_obj = load_matrix(root / "matrix.yaml")
    expected = "\n".join(resolve_plan(matrix_obj, matrix_obj.target("rocm6.1-torch2.3"), "gfx942", {}).describe())
    assert render_out.stdout.startswith(expected) and bake_out.stdout.startswith(expected)
    assert not (root / "build").exists(), "--dry-run wrote files"


def test_ci_checks_the_render_and_takes_its_smoke_jobs_from_the_plan() -> None:
    import yaml

    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "images.yml").read_text())
    scripts = [step.get("run", "") for step in workflow["jobs"]["matrix"]["steps"]]
    assert "imagebuild render --check" in scripts
    (compute,) = [s for s in scripts if "matrix list --json" in s]
    assert 't["smoke"]' in compute and 't["kind"]' not in compute and 't["arches"]' not in compute
