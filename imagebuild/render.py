"""Render Dockerfiles and image manifests from the matrix with Jinja2, write them atomically, detect drift.

Output is a pure function of matrix.yaml and the templates (no dates, no host facts), so the committed
files are byte-identical across runs and machines and `render --check` can gate CI.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from imagebuild.arches import Resolution
from imagebuild.errors import CheckFailed, ConfigError
from imagebuild.matrix import Matrix, Source, Target, TgiRuntime

MANIFEST_SCHEMA_VERSION = 1
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
    return repo_root(matrix) / "dockerfiles"


def _kv(values: dict[str, str], indent: int = 4) -> str:
    """`KEY="value"` pairs, one per continued line (ENV, LABEL)."""
    return f" \\\n{' ' * indent}".join(f'{key}="{value}"' for key, value in values.items())


def _wheel_mounts(stages: list[str]) -> str:
    return " \\\n    ".join(f"--mount=type=bind,from={s},source=/wheels,target=/tmp/wheels/{s}" for s in stages)


def _wheel_globs(stages: list[str]) -> str:
    return " ".join(f"/tmp/wheels/{s}/*.whl" for s in stages)


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
    )
    env.filters.update(kv=_kv, wheel_mounts=_wheel_mounts, wheel_globs=_wheel_globs)
    return env


def _image_ref(image: str, digest: str | None) -> str:
    return f"{image}@{digest}" if digest else image


def _source(source: Source) -> dict[str, Any]:
    return source.model_dump()


def manifest(target: Target, resolution: Resolution) -> dict[str, Any]:
    """The image manifest (docs/contracts.md): what the image claims, for the smoke suite and for users."""
    platform, build = target.platform, target.torch_build
    processors = {t.processor: t.id for t in resolution.arches}
    if platform.kind == "cpu":
        attention = {"cpu": list(build.attention.get("cpu", ["math"]))}
    else:
        attention = {}
        for arch, backends in build.attention.items():
            processor = arch.split(":")[0]
            if processor in processors:
                attention[processors[processor]] = list(backends)
    components = {name: plan.as_dict() for name, plan in resolution.components.items() if name != "pytorch"}
    for name in target.skipped_components:
        components[name] = {
            "included": False,
            "arches": [],
            "experimental": [],
            "reason": f"not built for the {platform.kind} platform",
            "arch_vars": {},
            "fixed_arches": [],
        }
    tunable = target.tunableop
    return {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "target": target.name,
        "platform": {
            "name": target.platform_name,
            "kind": platform.kind,
            "version": platform.version,
            "base_image": platform.base_image,
            "base_digest": platform.base_digest,
        },
        "torch": {
            "version": target.torch.reported_version(platform.kind),
            "obtained": build.obtain,
            "source": _source(build.source) if build.source else None,
            "patches": [p.model_dump() for p in build.patches],
            "companions": [c.model_dump() for c in build.companions],
            "arch_vars": dict(resolution.components["pytorch"].env) if "pytorch" in resolution.components else {},
        },
        "gpu_arches": [t.id for t in resolution.arches],
        "arch_source": resolution.source,
        "experimental_arches": [t.id for t in resolution.experimental],
        "arch_env": dict(resolution.env),
        "components": components,
        "attention_backends": attention,
        "runtime": _runtime_manifest(target, resolution),
        "tunableop": {
            "enabled": tunable.enabled,
            "tuning": tunable.tuning,
            "filename": f"{tunable.results_dir}/{tunable.filename}",
        },
        "versions": {
            "torch": target.torch.reported_version(platform.kind),
            "rocm": platform.version if platform.kind == "rocm" else None,
            "cuda": platform.version if platform.kind == "cuda" else None,
            "python": platform.python_version,
        },
    }


def _runtime_manifest(target: Target, resolution: Resolution) -> dict[str, Any] | None:
    """The manifest's `runtime` section (docs/contracts.md): what the smoke suite starts and how it talks to it."""
    runtime = target.runtime
    if runtime is None:
        return None
    section: dict[str, Any] = {
        "name": target.runtime_name,
        "kind": runtime.kind,
        "entrypoint": runtime.entrypoint,
        "serve": [runtime.entrypoint, *runtime.serve],
        "health": runtime.health,
        "api": runtime.api,
        "serve_env": dict(runtime.serve_env),
        "startup_timeout_s": runtime.startup_timeout_s,
    }
    if isinstance(runtime, TgiRuntime):
        section["source"] = _source(runtime.source)
        section["attention"] = tgi_attention_promises(target, resolution)
    else:
        section["requirements"] = runtime.requirements
        section["attention"] = {}  # a pip runtime makes no flash / paged promises
    return section


def tgi_attention_promises(target: Target, resolution: Resolution) -> dict[str, dict[str, bool]]:
    """Per arch, whether TGI's flash / paged attention must be enabled: every component it imports is built for it."""
    runtime = target.runtime
    if not isinstance(runtime, TgiRuntime) or target.platform.kind == "cpu":
        return {}
    kind = target.platform.kind

    def built_for(names: list[str] | None, arch: str) -> bool:
        if not names:  # the matrix names no provider for this platform kind: nothing is promised
            return False
        plans = [resolution.components.get(name) for name in names]
        return all(plan is not None and plan.included and arch in [t.id for t in plan.arches] for plan in plans)

    return {
        t.id: {
            "flash": built_for(runtime.attention.flash.get(kind), t.id),
            "paged": built_for(runtime.attention.paged.get(kind), t.id),
        }
        for t in resolution.arches
    }


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
            "builder_ref": _image_ref(runtime.builder_image, runtime.builder_digest),
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


def _context(target: Target, resolution: Resolution, manifest_path: str, command: str) -> dict[str, Any]:
    platform, build = target.platform, target.torch_build
    included = {name for name, plan in resolution.components.items() if plan.included}
    components = [
        {
            "name": name,
            "stage": f"component-{name}",
            "kind": component.kind,
            "description": component.description or name,
            "source": component.source,
            "max_jobs": component.max_jobs,
            "arch_env": dict(resolution.components[name].env),
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
    entrypoint, cmd = _entrypoint_and_cmd(target)
    labels = {
        "org.opencontainers.image.title": f"imagebuild {target.name}",
        "io.imagebuild.target": target.name,
        "io.imagebuild.platform": target.platform_name,
        "io.imagebuild.torch": target.torch.reported_version(platform.kind),
        "io.imagebuild.arches": resolution.arch_list or "none",
    }
    return {
        "command": command,
        "target": target.name,
        "notes": notes,
        "platform": {
            "kind": platform.kind,
            "version": platform.version,
            "base_ref": _image_ref(platform.base_image, platform.base_digest),
            "python": platform.python,
            "apt_packages": platform.apt_packages,
            "pip_packages": platform.pip_packages,
            "env": dict(sorted(platform.env.items())),
        },
        "torch": {
            "version": target.torch.version,
            "reported_version": target.torch.reported_version(platform.kind),
            "arch_env": dict(resolution.components["pytorch"].env) if "pytorch" in resolution.components else {},
            "build_requires": list(build.build_requires),
            "companions": build.companions,
            "constraints": _constraints(target) if platform.kind != "cpu" else [],
            "obtain": build.obtain,
            "index_url": build.index_url,
            "find_links": "build/wheelhouse" if build.find_links else None,
            "source": build.source,
            "patches": build.patches,
            "build_env": dict(build.build_env),
            "max_jobs": build.max_jobs or 8,
        },
        "arch_env": dict(resolution.env),
        "arch_list": resolution.arch_list,
        "components": components,
        "runtime": runtime,
        "final_env": _final_env(target),
        "manifest_path": manifest_path,
        "entrypoint": json.dumps(entrypoint),
        "cmd": json.dumps(cmd),
        "labels": labels,
    }


def render_target(
    matrix: Matrix,
    target: Target,
    resolution: Resolution | None = None,
    manifest_path: str | None = None,
) -> Rendered:
    """Render one target's Dockerfile and manifest; `manifest_path` is where the Dockerfile COPYs it from."""
    default = resolution is None
    resolution = resolution or target.resolve(env={})
    if manifest_path is None:
        manifest_path = f"dockerfiles/{target.name}/manifest.json"
    command = f"imagebuild render {target.name}"
    if not default and resolution.source != "matrix default":
        command += f" --arch '{resolution.arch_list}'"
        if resolution.experimental:
            command += " --allow-experimental"
    env = environment(repo_root(matrix) / "dockerfiles" / "templates")
    try:
        dockerfile = env.get_template("Dockerfile.j2").render(**_context(target, resolution, manifest_path, command))
    except jinja2.TemplateError as exc:
        raise ConfigError(f"template error while rendering {target.name}: {exc}") from None
    manifest_text = json.dumps(manifest(target, resolution), indent=2, sort_keys=True) + "\n"
    notes = [f"{name}: {plan.reason}" for name, plan in resolution.components.items() if plan.reason]
    return Rendered(target.name, {"Dockerfile": dockerfile, "manifest.json": manifest_text}, resolution, notes)


def write_atomic(path: Path, text: str) -> bool:
    """Write through a temp file in the same directory and rename; returns whether the content changed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def write_rendered(rendered: Rendered, out_dir: Path) -> list[Path]:
    """Write one target's files under out_dir; returns the files that changed."""
    changed = []
    for name, text in rendered.files.items():
        path = out_dir / name
        if write_atomic(path, text):
            changed.append(path)
    return changed


def render_all(matrix: Matrix, targets: list[Target]) -> list[Rendered]:
    """Render every target in memory first, so a failure leaves no file half written."""
    return [render_target(matrix, target) for target in targets]


def drift(matrix: Matrix, rendered: list[Rendered], out_dir: Path) -> list[str]:
    """Files on disk that differ from a fresh render (missing ones included)."""
    drifted = []
    for item in rendered:
        for name, text in item.files.items():
            path = out_dir / item.target / name
            if not path.exists():
                drifted.append(f"{path} (missing)")
            elif path.read_text(encoding="utf-8") != text:
                drifted.append(f"{path} (differs)")
    return drifted


def stale(matrix: Matrix, out_dir: Path) -> list[str]:
    """Rendered directories of targets the matrix no longer has (they would keep being built and linted)."""
    names = {t.name for t in matrix.targets}
    if not out_dir.is_dir():
        return []
    return [
        f"{path} (no target '{path.name}' in the matrix)"
        for path in sorted(out_dir.iterdir())
        if path.is_dir() and path.name != "templates" and path.name not in names and (path / "Dockerfile").exists()
    ]


def check(matrix: Matrix, targets: list[Target], out_dir: Path, *, all_targets: bool = True) -> None:
    drifted = drift(matrix, render_all(matrix, targets), out_dir)
    if all_targets:
        drifted += stale(matrix, out_dir)
    if drifted:
        raise CheckFailed(
            f"{len(drifted)} rendered file(s) out of date: {', '.join(drifted)}",
            hint="run `imagebuild render` and commit the result",
        )
