"""The image manifest (docs/contracts.md): what an image claims about itself, built from a target and its
arch resolution. The target plan holds it; render writes it next to the Dockerfile; the smoke suite reads it.
"""

from __future__ import annotations

from imagebuild.matrix import Source, Target, TgiRuntime
from imagebuild.matrix.arches import Resolution
from imagebuild.matrix.runtime_kind import RuntimeKind
from imagecontract import kinds
from imagecontract.models import manifest as model
from imagecontract.models.manifest import MANIFEST_SCHEMA_VERSION, Manifest


def _source(source: Source) -> model.Source:
    return model.Source.from_dict(source.model_dump())


def _left_out(reason: str) -> model.ComponentEntry:
    return model.ComponentEntry(included=False, reason=reason)


def _toolkit_version(kind: str, version: str | None) -> dict[str, str | None]:
    """The manifest's `versions` field named after a GPU kind (rocm, cuda) holds the platform's version."""
    return {kind: version} if kinds.platform(kind).VENDOR is not None else {}


def manifest(target: Target, resolution: Resolution) -> Manifest:
    """The image manifest (docs/contracts.md): what the image claims, for the smoke suite and for users; built as
    the contract's model (written with to_dict(), its schema version the model's)."""
    platform, build = target.platform, target.torch_build
    processors = {t.processor: t.id for t in resolution.arches}
    attention: dict[str, list[str]]
    if kinds.platform(platform.kind).VENDOR is None:  # no GPU: the CPU's backends, under its arch name
        attention = {kinds.CPU_ARCH: list(build.attention.get(kinds.CPU_ARCH, ["math"]))}
    else:
        attention = {}
        for arch, backends in build.attention.items():
            processor = arch.split(":")[0]
            if processor in processors:
                attention[processors[processor]] = list(backends)
    components = {
        name: model.ComponentEntry.from_dict(plan.as_dict(), f"components.{name}")
        for name, plan in resolution.components.items()
        if name != "pytorch"
    }
    for name in target.skipped_components:
        components[name] = _left_out(f"not built for the {platform.kind} platform")
    for name, reason in target.left_out:  # optional components absent on this OCI platform
        components[name] = _left_out(reason)
    tunable = target.tunableop
    version = target.torch.reported_version(platform.kind)
    return Manifest(
        schema_version=MANIFEST_SCHEMA_VERSION,
        target=target.name,
        platform=model.Platform(
            name=target.platform_name,
            kind=platform.kind,
            version=platform.version,
            base_image=platform.base_image,
            base_digest=platform.base_digest,
            oci=target.oci_platform,
            oci_notes=list(target.oci_notes),
            min_driver=platform.min_driver,
        ),
        torch=model.TorchInfo(
            version=version,
            obtained=build.obtain,
            source=_source(build.source) if build.source else None,
            patches=[model.Patch.from_dict(p.model_dump()) for p in build.patches],
            companions=[model.Companion.from_dict(c.model_dump()) for c in build.companions],
            arch_vars=dict(resolution.components["pytorch"].env) if "pytorch" in resolution.components else {},
        ),
        gpu_arches=[t.id for t in resolution.arches],
        arch_source=resolution.source,
        experimental_arches=[t.id for t in resolution.experimental],
        arch_env=dict(resolution.env),
        components=components,
        attention_backends=attention,
        runtime=_runtime_manifest(target, resolution),
        tunableop=model.TunableOpSettings(
            enabled=tunable.enabled, tuning=tunable.tuning, filename=f"{tunable.results_dir}/{tunable.filename}"
        ),
        versions=model.Versions(
            torch=version,
            **_toolkit_version(platform.kind, platform.version),
            python=platform.python_version,
        ),
    )


GUARD = "/opt/imagebuild/smoke/serve_guard.py"


def _serve_argv(runtime: RuntimeKind) -> list[str]:
    """The argv that serves: the runtime's own, or, when the matrix gives limits the runtime has no options for,
    the guard on `{port}` with the runtime behind it on the port the guard picks (`{upstream_port}`)."""
    own = [runtime.entrypoint, *runtime.serve]
    limits = runtime.serve_limits()
    if limits is None:
        return own
    return [
        "python3", GUARD, "--host", "127.0.0.1", "--port", "{port}", "--model", "{model}",
        "--max-new-tokens", str(limits.max_new_tokens), "--max-request-bytes", str(limits.max_request_bytes),
        "--max-concurrency", str(limits.max_concurrency), "--",
        *(arg.replace("{port}", "{upstream_port}") for arg in own),
    ]  # fmt: skip


def _runtime_manifest(target: Target, resolution: Resolution) -> model.Runtime | None:
    """The manifest's `runtime` section (docs/contracts.md): what the smoke suite starts and how it talks to it."""
    runtime = target.runtime
    if runtime is None:
        return None
    section = model.Runtime(
        name=str(target.runtime_name),
        kind=runtime.kind,
        entrypoint=runtime.entrypoint,
        serve=_serve_argv(runtime),
        health=runtime.health,
        api=runtime.api,
        serve_env=dict(runtime.serve_env),
        startup_timeout_s=runtime.startup_timeout_s,
    )
    if isinstance(runtime, TgiRuntime):
        section.source = _source(runtime.source)
        section.attention = tgi_attention_promises(target, resolution)
    else:
        section.requirements = runtime.requirements
        limits = runtime.serve_limits()
        if limits is not None:
            section.limits = model.RuntimeLimits.from_dict(limits.model_dump())
        section.attention = {}  # a pip runtime makes no flash / paged promises
    return section


def tgi_attention_promises(target: Target, resolution: Resolution) -> dict[str, dict[str, bool]]:
    """Per arch, whether TGI's flash / paged attention must be enabled: every component it imports is built for it."""
    runtime = target.runtime
    if not isinstance(runtime, TgiRuntime) or kinds.platform(target.platform.kind).VENDOR is None:
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
