"""Render Dockerfiles and image manifests from the matrix with Jinja2, write them atomically, detect drift.

Output is a pure function of matrix.yaml and the templates (no dates, no host facts), so the committed
files are byte-identical across runs and machines and `render --check` can gate CI.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from pydantic import BaseModel

from imagebuild.errors import CheckFailed, ConfigError
from imagebuild.lock import stages as lock_stages
from imagebuild.lock.model import CONTROL
from imagebuild.matrix import Matrix, Target, TgiRuntime
from imagebuild.matrix.arches import Resolution
from imagebuild.matrix.fields import excerpt
from imagebuild.plan.target_plan import COMMITTED_DIR, TargetPlan, image_ref, plan_for
from imagebuild.render import platforms
from imagecontract import kinds
from imagecontract.atomic import write_atomic
from imagecontract.blob import MissingFile, read_bounded

RENDERED_FILES = ("Dockerfile", "manifest.json")


@dataclass
class Rendered:
    """The files of one target, rendered in memory."""

    target: str
    files: dict[str, str]
    resolution: Resolution
    notes: list[str] = field(default_factory=list)


def repo_root(matrix: Matrix) -> Path:
    """The repository the matrix lives in: templates and build context are relative to it."""
    return matrix.path.resolve().parent


def default_out_dir(matrix: Matrix) -> Path:
    return repo_root(matrix) / COMMITTED_DIR


def _kv(values: dict[str, str], indent: int = 4) -> str:
    """`KEY="value"` pairs, one per continued line (ENV, LABEL)."""
    return f" \\\n{' ' * indent}".join(f'{key}="{value}"' for key, value in values.items())


def _label_kv(values: dict[str, str], indent: int = 4) -> str:
    """LABEL pairs with each value as a double-quoted Dockerfile word (JSON-valued labels hold quotes)."""
    pairs = (f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in values.items())
    return f" \\\n{' ' * indent}".join(pairs)


def _wheel_mounts(stages: list[str]) -> str:
    return " \\\n    ".join(f"--mount=type=bind,from={s},source=/wheels,target=/tmp/wheels/{s}" for s in stages)


def _wheel_globs(stages: list[str]) -> str:
    return " ".join(f"/tmp/wheels/{s}/*.whl" for s in stages)


def _shell_quote(value: object) -> str:
    """`{{ value | q }}`: one shell word whatever the value holds (a `#`, `;` or space stays data)."""
    return shlex.quote(str(_no_none(value)))


def _no_none(value: object) -> object:
    """Every `{{ }}` passes here: a field the matrix left out must never render as the word None."""
    if value is None:
        raise jinja2.TemplateRuntimeError("a value the template needs is not set in the matrix (it would render None)")
    return value


def _one_line(value: object, where: str = "") -> None:
    """The one rule for every value a Dockerfile template is given (the matrix's, the lock's digests and paths):
    no line break or other control character anywhere in it, so no value can end an instruction and start
    another (a digest holding a newline would be a `RUN` line). Checked on the whole context before rendering;
    shell words are also quoted (`| q`) and FROM digests have their grammar (imagebuild.lock.model)."""
    if isinstance(value, str):
        found = CONTROL.search(value)
        if found:
            raise ConfigError(
                f"render: {where or 'a value'} holds {found.group()!r} at {found.start()} "
                f"({excerpt(value, 60)}): a Dockerfile line cannot hold a line break or control character"
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            _one_line(key, where)
            _one_line(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list | tuple | set | frozenset):
        for i, item in enumerate(value):
            _one_line(item, f"{where}[{i}]")
    elif isinstance(value, BaseModel):
        _one_line(dict(value), where)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        _one_line({f.name: getattr(value, f.name) for f in dataclasses.fields(value)}, where)
    elif not isinstance(value, int | float | type(None) | Path):
        _one_line(str(value), where)


@functools.lru_cache(maxsize=8)  # compiled once per process; the loader still reloads a template that changed
def environment(templates: Path) -> jinja2.Environment:
    if not templates.is_dir():
        raise ConfigError(f"no templates directory at {templates}")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        finalize=_no_none,
    )
    env.filters.update(kv=_kv, label_kv=_label_kv, wheel_mounts=_wheel_mounts, wheel_globs=_wheel_globs)
    env.filters["q"] = _shell_quote
    return env


def _runtime_context(target: Target) -> dict[str, Any] | None:
    """What the runtime-<kind>.j2 stage needs; `wheel_stage` is the stage whose /wheels the final stage installs."""
    runtime = target.runtime
    if runtime is None:
        return None
    common = {
        "kind": runtime.kind,
        "description": runtime.description or target.runtime_name,
        "entrypoint": runtime.entrypoint,
    }
    if isinstance(runtime, TgiRuntime):
        kind = target.platform.kind
        if kind not in runtime.server:
            raise ConfigError(f"runtime {target.runtime_name} has no server install for platform kind {kind}")
        server = runtime.server[kind]
        return {
            **common,
            "wheel_stage": "runtime-server",
            "source": runtime.source,
            "builder_ref": image_ref(runtime.builder_image, runtime.builder_digest),
            "rust_toolchain": runtime.rust_toolchain,
            "binaries": runtime.binaries,
            "requirements": server.requirements,
            "extras": ",".join(server.extras),
            "apt_packages": runtime.apt_packages,
            "env": dict(sorted(runtime.env.items())),
        }
    return {**common, "wheel_stage": "runtime-pip", "requirements": runtime.requirements}


ENTRYPOINT_PATH = "/opt/imagebuild/bin/tunableop-entrypoint"


def _entrypoint_and_cmd(target: Target) -> tuple[list[str], list[str]]:
    """ENTRYPOINT and CMD of the final stage.

    TGI images run as users type them: `docker run IMAGE --model-id X` starts the launcher with those flags
    (upstream: ENTRYPOINT tgi-entrypoint.sh, CMD ["--json-output"]), while `docker run IMAGE python3 -m smoke`
    runs that command; both go through the TunableOp preparation. Other images run their smoke suite.
    """
    runtime = target.runtime
    if isinstance(runtime, TgiRuntime):
        entry = [ENTRYPOINT_PATH, "--default-command", runtime.entrypoint, "--ldconfig", "--"]
        return entry, list(runtime.default_args)
    return [ENTRYPOINT_PATH], ["python3", "-m", "smoke"]


def _constraints(target: Target) -> list[str]:
    """Pins every later pip call in the image honours (PIP_CONSTRAINT): nothing may replace this torch."""
    build = target.torch_build
    pins = [f"torch=={target.torch.reported_version(target.platform.kind)}", *build.build_requires]
    return pins + [f"{c.name}=={c.version}" for c in build.companions]


def _final_env(target: Target) -> dict[str, str]:
    tunable = target.tunableop
    env = {"HF_HOME": "/data"}
    env["PYTORCH_TUNABLEOP_ENABLED"] = "1" if tunable.enabled else "0"
    env["PYTORCH_TUNABLEOP_TUNING"] = "1" if tunable.tuning else "0"
    env["PYTORCH_TUNABLEOP_FILENAME"] = f"{tunable.results_dir}/{tunable.filename}"
    if tunable.max_tuning_duration_ms is not None:
        env["PYTORCH_TUNABLEOP_MAX_TUNING_DURATION_MS"] = str(tunable.max_tuning_duration_ms)
    return env


def _context(plan: TargetPlan, sets: dict[str, tuple[str, str]] | None = None) -> dict[str, Any]:
    """The template variables; every stage's arch variables and the labels come from the plan."""
    target, resolution = plan.target, plan.resolution
    platform, build = target.platform, target.torch_build
    stages = {stage.name: stage for stage in plan.stages}
    included = {name for name, plan in resolution.components.items() if plan.included}
    components = [
        {
            "name": name,
            "stage": f"component-{name}",
            "kind": component.kind,
            "description": component.description or name,
            "source": component.source,
            "max_jobs": component.max_jobs,
            "arch_env": dict(stages[f"component-{name}"].arch_env),
            "fixed_arches": list(resolution.components[name].fixed_arches),
            "build_requires": list(component.build_requires),
            "build_env": dict(component.build_env),
        }
        for name, component in target.components
        if name in included
    ]
    notes = [
        f"{name}: {plan.reason}" for name, plan in resolution.components.items() if not plan.included and plan.reason
    ]
    if resolution.experimental:
        notes.append("experimental arches: " + ", ".join(t.id for t in resolution.experimental))
    runtime = _runtime_context(target)
    if runtime is not None and "builder_ref" in runtime:
        runtime["builder_ref"] = lock_stages.pinned_ref(plan.root, runtime["builder_ref"])
    if runtime is not None and isinstance(target.runtime, TgiRuntime):  # the server set's git requirements, by commit
        runtime["vcs"] = lock_stages.vcs_requirements(plan.root, target, "runtime-server")
    entrypoint, cmd = _entrypoint_and_cmd(target)
    sets = _locked_sets(plan) if sets is None else sets
    locked = {stage: f"{plan.out_dir}/{name}" for stage, (name, _) in sets.items()}
    return {
        "locked": locked,
        "command": plan.render_command,
        "target": target.name,
        "notes": notes,
        "platform": {
            "kind": platform.kind,
            "version": platform.version,
            "base_ref": lock_stages.pinned_ref(plan.root, stages["base"].parent),
            # the final stage's own base when it is not the torch stage (a runtime image; the venv is copied in)
            "runtime_ref": (
                lock_stages.pinned_ref(plan.root, stages["final"].parent) if stages["final"].parent != "torch" else None
            ),
            "python": platform.python,
            "apt_packages": platform.apt_packages,
            "pip_packages": platform.pip_packages,
            "cuda_compiler": platform.cuda_compiler,
            "env": dict(sorted(platform.env.items())),
        },
        "torch": {
            "version": target.torch.version,
            "reported_version": target.torch.reported_version(platform.kind),
            "arch_env": dict(stages["torch-build"].arch_env) if "torch-build" in stages else {},
            "build_requires": list(build.build_requires),
            "companions": build.companions,
            "constraints": _constraints(target) if kinds.platform(platform.kind).VENDOR is not None else [],
            "obtain": build.obtain,
            "index_url": build.index_url,
            "find_links": "build/wheelhouse" if build.find_links else None,
            "source": build.source,
            "patches": build.patches,
            "build_env": dict(build.build_env),
            "max_jobs": build.max_jobs or 8,
        },
        "arch_env": dict(stages["final"].arch_env),
        "arch_list": resolution.arch_list,
        "components": components,
        "runtime": runtime,
        "final_env": _final_env(target),
        "manifest_path": plan.manifest_path,
        "entrypoint": json.dumps(entrypoint),
        "cmd": json.dumps(cmd),
        "labels": plan.labels,
    }


def render_plan(plan: TargetPlan, matrix: Matrix | None = None) -> Rendered:
    """Render one plan's Dockerfile and manifest in memory.

    A target whose pip steps all cross-install (render/platforms.py) has one Dockerfile for all its OCI platforms,
    rendered from every platform's plan: that needs the matrix.
    """
    if platforms.one_dockerfile(plan.target):
        if matrix is None:
            raise ConfigError(f"target {plan.name}: its one Dockerfile for every OCI platform needs the matrix")
        return _render_cross(matrix, plan)
    if len(plan.target.oci_platforms) > 1:
        raise ConfigError(
            f"target {plan.name} lists {len(plan.target.oci_platforms)} OCI platforms and one Dockerfile serves them "
            f"all, but its steps cannot be placed from the build platform: {platforms.cross_reason(plan.target)}",
            hint="list one OCI platform for it (targets: oci_platforms in matrix.yaml)",
        )
    env = environment(plan.root / "dockerfiles" / "templates")
    try:
        sets = _locked_sets(plan)
        context = _context(plan, sets)
        _one_line(context)
        dockerfile = env.get_template("Dockerfile.j2").render(**context)
    except jinja2.TemplateError as exc:
        raise ConfigError(f"template error while rendering {plan.name}: {exc}") from None
    manifest_text = json.dumps(plan.manifest, indent=2, sort_keys=True) + "\n"
    notes = [f"{name}: {comp.reason}" for name, comp in plan.resolution.components.items() if comp.reason]
    files = {"Dockerfile": dockerfile, "manifest.json": manifest_text}
    files.update({name: text for name, text in sets.values()})
    return Rendered(plan.key, files, plan.resolution, notes)


def _render_cross(matrix: Matrix, plan: TargetPlan) -> Rendered:
    """The one Dockerfile of every OCI platform of plan's target (templates/cross/), plan's manifest and sets."""
    plans = platforms.sibling_plans(matrix, plan)
    oci = [platforms.platform_context(each, _locked_sets(each)) for each in plans]
    try:
        context = {**_context(plans[0]), "oci": oci, "locked_build": oci[0]["locked"]}
        context.update(compiled=plan.target.compiles_with_wheels, platform_name=plan.target.platform_name)
        _one_line(context)
        env = environment(plan.root / "dockerfiles" / "templates")
        dockerfile = env.get_template(platforms.TEMPLATE).render(**context)
    except jinja2.TemplateError as exc:
        raise ConfigError(f"template error while rendering {plan.name}: {exc}") from None
    notes = [f"{name}: {comp.reason}" for name, comp in plan.resolution.components.items() if comp.reason]
    manifest = json.dumps(plan.manifest, indent=2, sort_keys=True) + "\n"
    files = {"Dockerfile": dockerfile, plan.image.manifest_name: manifest}
    files.update({name: text for name, text in platforms.renamed(plan, _locked_sets(plan)).values()})
    return Rendered(plan.key, files, plan.resolution, notes)


def _locked_sets(plan: TargetPlan) -> dict[str, tuple[str, str]]:
    """The pip installs that come from the lock (imagebuild.lock.stages), by the name the templates use (the file
    requirements/<name>.txt) -> the lock key's last part: base; torch (a wheel) or the source build's torch-build
    and the built wheel's requirements; each companion of torch; components; a pip runtime's packages; TGI's
    gen-server tools, the server's build backend and the server with its requirements and extras."""
    target = plan.target
    named = {"base": "base"}
    if target.torch_build.obtain == "wheel":
        named["torch"] = "torch"
    elif target.torch_build.obtain == "source":
        named.update({"torch-build": "torch", "torch-requires": "torch:requires"})
    named.update({f"torch-{c.name}": f"torch:{c.name}" for c in target.torch_build.companions})
    named.update({f"component-{n}": f"component-{n}" for n, component in target.components if component.build_requires})
    if target.compiles_with_wheels:
        named["cuda-compiler"] = "cuda-compiler"
    if getattr(target.runtime, "packages", None):  # a pip runtime whose packages the lock resolves
        named["runtime"] = "runtime"
    if isinstance(target.runtime, TgiRuntime):
        named.update({"gen-server": "runtime-server:gen-server", "server-build": "runtime-server:build"})
        named["runtime-server"] = "runtime-server"
    return lock_stages.stage_sets(plan.root, target, named)


def render_target(
    matrix: Matrix,
    target: Target,
    resolution: Resolution | None = None,
    manifest_path: str | None = None,
) -> Rendered:
    """Render target under resolution; `manifest_path` (relative to the repository) names the plan's directory."""
    out_dir = manifest_path.rsplit("/", 1)[0] if manifest_path else None
    return render_plan(plan_for(matrix, target, resolution, out_dir=out_dir), matrix)


MAX_RENDERED = 16 << 20  # bytes of a rendered file read back to compare (the real ones are a few KiB)


def on_disk(path: Path) -> bytes | None:
    """A rendered file as it is on disk (None: not there), read as files imagebuild did not write are
    (imagecontract.blob: a FIFO or device there is refused without blocking, UnreadableFile, an OSError)."""
    try:
        return read_bounded(path, MAX_RENDERED, what="a rendered file")
    except MissingFile:
        return None


def write_if_changed(path: Path, text: str) -> bool:
    """Write through the contract's write_atomic (0644) unless the file already holds text; whether it changed."""
    if on_disk(path) == text.encode("utf-8"):
        return False
    write_atomic(path, text)
    return True


def write_rendered(rendered: Rendered, out_dir: Path) -> list[Path]:
    """Write one target's files under out_dir; returns the files that changed."""
    changed = []
    for name, text in rendered.files.items():
        path = out_dir / name
        if write_if_changed(path, text):
            changed.append(path)
    return changed


def render_all(matrix: Matrix, targets: list[Target]) -> list[Rendered]:
    """Render every target, on every OCI platform it lists, in memory first, so a failure leaves no file half
    written."""
    return [render_plan(plan_for(matrix, t, oci=oci), matrix) for t in targets for oci in t.oci_platforms]


def differences(files: dict[str, str], directory: Path) -> list[str]:
    """Files under directory that differ from these rendered ones (missing ones included)."""
    drifted = []
    for name, text in files.items():
        path = directory / name
        try:
            found = on_disk(path)
        except OSError as exc:  # a FIFO, a device, a folder, a file too large: said, never waited on
            drifted.append(f"{path} ({exc.strerror})")
            continue
        if found is None:
            drifted.append(f"{path} (missing)")
        elif found != text.encode("utf-8"):
            drifted.append(f"{path} (differs)")
    return drifted


def drift(matrix: Matrix, rendered: list[Rendered], out_dir: Path) -> list[str]:
    """Files on disk that differ from a fresh render (missing ones included)."""
    return [line for item in rendered for line in differences(item.files, out_dir / item.target)]


def stale(matrix: Matrix, out_dir: Path) -> list[str]:
    """Rendered directories of targets the matrix no longer has (they would keep being built and linted), and
    per-platform Dockerfile copies under a target's folder (one Dockerfile serves every OCI platform)."""
    names = {t.name for t in matrix.targets}
    if not out_dir.is_dir():
        return []
    found = [
        f"{path} (no target '{path.name}' in the matrix)"
        for path in sorted(out_dir.iterdir())
        if path.is_dir() and path.name != "templates" and path.name not in names and (path / "Dockerfile").exists()
    ]
    found += [
        f"{copy} (a per-platform copy: dockerfiles/{copy.parent.parent.name}/Dockerfile serves every platform)"
        for name in sorted(names)
        for copy in sorted((out_dir / name).glob("*/Dockerfile"))
    ]
    return found


def check(matrix: Matrix, targets: list[Target], out_dir: Path, *, all_targets: bool = True) -> None:
    drifted = drift(matrix, render_all(matrix, targets), out_dir)
    if all_targets:
        drifted += stale(matrix, out_dir)
    raise_on_drift(drifted)


def raise_on_drift(drifted: list[str]) -> None:
    if drifted:
        raise CheckFailed(
            f"{len(drifted)} rendered file(s) out of date: {', '.join(drifted)}",
            hint="run `imagebuild render` and commit the result",
        )
