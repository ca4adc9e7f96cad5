"""What the matrix names from outside this repository, per target and OCI platform, without any network.

Each input has a key (the matrix place it comes from, stable while its value changes), a kind (image, git, pip,
file) and a spec: the matrix values that decide its pin. `imagebuild lock` resolves every spec; `render --check`
compares the specs the matrix gives now with those the lock was made from (`lockfile.stale`), so a changed pinned
value without a re-lock fails naming the input.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from imagebuild.errors import ConfigError
from imagebuild.matrix import Matrix, PipRuntime, Source, Target, TgiRuntime
from imagebuild.matrix.oci import BASELINE, for_oci
from imagebuild.matrix.oci_platform import platform

# Wheels for glibc >= 2.28: every base here (Ubuntu 22.04: 2.35, Debian bookworm: 2.36) runs them.
MANYLINUX = "manylinux_2_28"
# The Debian archive scripts/make-base-image.sh debootstraps a local base from (IMAGEBUILD_DEBIAN_MIRROR or the
# machine's own mirror override it there; the lock names the default).
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# Packages that belong to the torch stage (torch's own requirements): a later stage's set never lists them.
TORCH_OWNED_PREFIXES = ("torch", "triton", "nvidia-", "pytorch-triton")


@dataclass
class Input:
    """One external input: its key, kind, the matrix values that pin it, where it is named, who uses it."""

    key: str
    kind: str  # image | git | pip | file | apt
    spec: dict[str, Any]
    where: str  # the matrix place (key path) or the Dockerfile step it serves, for messages
    users: list[str] = field(default_factory=list)  # "<target> <oci platform>"

    def describe(self) -> str:
        spec = self.spec
        if self.kind == "image":
            return f"image {spec['ref']}"
        if self.kind == "git":
            return f"git {spec['url']}@{spec['commit'] or spec.get('ref') or 'HEAD'}"
        if self.kind == "apt":
            return f"Debian {spec['suite']} ({', '.join(spec['architectures'])}) from {spec['mirror']}"
        if self.kind == "file":
            return f"file {spec['path']} (sha256 {spec['sha256'][:12]})"
        return f"pip set ({len(spec['requirements'])} requirement(s), Python {spec['python']}, {spec['platform']})"


def user(target: Target) -> str:
    return f"{target.name} {target.oci_platform}"


def is_local_image(ref: str) -> bool:
    """Made on this machine (scripts/make-base-image.sh): `local/...`, or served by a loopback registry."""
    host = ref.split("/", 1)[0] if "/" in ref else ""
    loopback = host.split(":")[0] in {"127.0.0.1", "localhost"} or host.startswith("[::1]")
    return ref.startswith("local/") or loopback


def uv_platform(oci: str, glibc: str | None = None) -> str:
    """linux/amd64 -> x86_64-manylinux_2_28 (uv's --python-platform); with the base's glibc (2.36),
    x86_64-manylinux_2_36: the policy the build's pip accepts there (image/cross/cross.py), so uv and pip pick the
    same file (issue 31: under 2_28 uv locked llguidance's sdist, and pip, binary only, took its 2_31 wheel)."""
    return platform(oci).uv_platform(f"manylinux_{glibc.replace('.', '_')}" if glibc else MANYLINUX)


def collect(matrix: Matrix, names: tuple[str, ...] | list[str] = ()) -> dict[str, Input]:
    """Every input of the selected targets (all by default), keyed; an input several targets use is listed once."""
    found: dict[str, Input] = {}

    def add(item: Input, target: Target) -> None:
        have = found.get(item.key)
        if have is None:
            found[item.key] = have = item
        elif have.spec != item.spec:
            if item.kind == "image":  # one image for several OCI platforms: one entry listing them all
                have.spec["platforms"] = sorted(set(have.spec["platforms"]) | set(item.spec["platforms"]))
            elif item.kind == "apt":  # one suite for several architectures
                have.spec["architectures"] = sorted(set(have.spec["architectures"]) | set(item.spec["architectures"]))
            else:
                raise ConfigError(f"lock: {item.key} means two things ({have.describe()}; {item.describe()})")
        if user(target) not in have.users:
            have.users.append(user(target))

    for target in matrix.select(names):
        for oci in target.oci_platforms:
            placed = for_oci(target, matrix.model.oci_platforms, oci)
            for item in _inputs_of(matrix, placed):
                add(item, placed)
    return found


def _where_base(target: Target) -> str:
    if target.oci_platform != BASELINE:
        return f"oci_platforms.{target.oci_platform}.platforms.{target.platform_name}.base_image"
    return f"platforms.{target.platform_name}.base_image"


def _inputs_of(matrix: Matrix, target: Target) -> list[Input]:
    oci = target.oci_platform
    platform = target.platform
    prefix = f"{target.name}@{oci}"
    items: list[Input] = [_image(platform.base_image, oci, _where_base(target))]
    if platform.runtime_image:
        items.append(_image(platform.runtime_image, oci, f"platforms.{target.platform_name}.runtime_image"))
    if is_local_image(platform.base_image) and "debian" in platform.base_image:
        items.append(_debian(platform.base_image, oci, _where_base(target)))
    base_key = f"pip:{prefix}:base"
    where = f"{prefix} stage base: pip install (platforms.{target.platform_name}.pip_packages)"
    items.append(
        _pip(base_key, platform.pip_packages, platform.python_version, uv_platform(oci, platform.glibc), where)
    )
    torch_inputs = _torch_inputs(target, prefix, base_key)
    items += torch_inputs
    for name, component in target.components:
        if component.source.git:
            items.append(_git(component.source, f"components.{name}.source"))
        if component.build_requires:
            where = f"{prefix} stage component-{name}: components.{name}.build_requires"
            reqs = list(component.build_requires)
            key = f"pip:{prefix}:component-{name}"
            items.append(
                _pip(key, reqs, platform.python_version, uv_platform(oci, platform.glibc), where, after=[base_key])
            )
    if target.compiles_with_wheels:  # resolved on its own: the runtime's nvcc need not be torch's CUDA release
        where = f"{prefix} stage cuda-compiler: platforms.{target.platform_name}.cuda_compiler"
        key = f"pip:{prefix}:cuda-compiler"
        reqs = list(platform.cuda_compiler)
        items.append(_pip(key, reqs, platform.python_version, uv_platform(oci, platform.glibc), where))
    torch_key = f"pip:{prefix}:torch" if any(i.key == f"pip:{prefix}:torch" for i in torch_inputs) else None
    return items + _runtime_inputs(matrix, target, prefix, base_key, torch_key)


def _torch_inputs(target: Target, prefix: str, base_key: str) -> list[Input]:
    """The torch stage's pip installs (a wheel and its requirements; or a source build's requirements and its
    companions) and the torch source."""
    build, py, plat = (
        target.torch_build,
        target.platform.python_version,
        uv_platform(target.oci_platform, target.platform.glibc),
    )
    torch_where = f"torch.{target.torch_key}.builds.{target.platform.kind}"
    torch_key = f"pip:{prefix}:torch"
    if build.obtain == "wheel":
        version = target.torch.version + (f"+{build.local_version}" if build.local_version else "")
        where = f"{prefix} stage torch: {torch_where} (torch {version} and its requirements)"
        reqs = [f"torch=={version}"]
        item = _pip(torch_key, reqs, py, plat, where, index_url=build.index_url, find_links=build.find_links)
        runtime = target.runtime
        if (
            isinstance(runtime, PipRuntime)
            and runtime.requirements is None
            and runtime.packages
            and getattr(runtime, "index_url", None) is None
        ):
            # torch's requirements pinned as a resolution with the runtime's packages pins them (cuda-bindings
            # 13.5.0 alone, 13.4.4 beside sglang 0.5.23's cuda-python): the later set then resolves over them. A
            # runtime from an index of its own (AMD's vLLM builds) is not resolvable from torch's: resolved after.
            item.spec["resolved_with"] = list(runtime.packages)
        return [item]
    assert build.source is not None
    where = f"{prefix} stage torch-build: {torch_where}.build_requires and the torch source's requirements.txt"
    source = {"git": build.source.git, "commit": build.source.commit, "file": "requirements.txt"}
    items = [
        _git(build.source, f"{torch_where}.source"),
        _pip(torch_key, list(build.build_requires), py, plat, where, after=[base_key], from_source=source),
    ]
    # the built wheel goes in with --no-deps; what it requires (setup.py's install_requires at the pinned commit)
    # comes from this set
    where = f"{prefix} stage torch: the built wheel's requirements (setup.py install_requires of the torch source)"
    requires = {"git": build.source.git, "commit": build.source.commit, "file": "setup.py"}
    requires["part"] = "setup.install_requires"
    items.append(_pip(f"{torch_key}:requires", [], py, plat, where, after=[base_key], from_source=requires))
    for companion in build.companions:
        where = f"{prefix} stage torch: {torch_where}.companions.{companion.name} (--no-deps)"
        reqs = [f"{companion.name}=={companion.version}"]
        key = f"pip:{prefix}:torch:{companion.name}"
        items.append(_pip(key, reqs, py, plat, where, index_url=companion.index_url, no_deps=True))
    return items


def _runtime_inputs(
    matrix: Matrix, target: Target, prefix: str, base_key: str, torch_key: str | None = None
) -> list[Input]:
    """TGI: its builder image, source and the server's pip installs; a pip runtime: its requirements file, or its
    packages resolved after the base and torch stages' sets (their packages stay theirs: resolve.py)."""
    runtime, rname, oci = target.runtime, target.runtime_name, target.oci_platform
    py, plat, kind = target.platform.python_version, uv_platform(oci, target.platform.glibc), target.platform.kind
    if isinstance(runtime, PipRuntime) and runtime.requirements is None:
        where = f"{prefix} stage venv: runtimes.{rname}.packages (after the base and torch sets)"
        after = [base_key, *([torch_key] if torch_key else [])]
        extra = getattr(runtime, "index_url", None)  # a vllm runtime's index besides PyPI (AMD's ROCm builds)
        return [
            _pip(f"pip:{prefix}:runtime", list(runtime.packages), py, plat, where, after=after, extra_index_url=extra)
        ]
    if isinstance(runtime, PipRuntime):
        assert runtime.requirements is not None
        return [_file(matrix, runtime.requirements, f"runtimes.{rname}.requirements ({oci})")]
    if not isinstance(runtime, TgiRuntime):
        return []
    source = {"git": runtime.source.git, "commit": runtime.source.commit}
    where = f"{prefix} stage runtime-server: make gen-server's pip install (the runtime's server/Makefile)"
    gen = {**source, "file": "server/Makefile", "make_target": "gen-server"}
    items = [
        _image(runtime.builder_image, BASELINE, f"runtimes.{rname}.builder_image"),
        _git(runtime.source, f"runtimes.{rname}.source"),
        _pip(f"pip:{prefix}:runtime-server:gen-server", [], py, plat, where, after=[base_key], from_source=gen),
    ]
    # the server wheel is built without isolation: its build backend comes from this set
    where = f"{prefix} stage runtime-server: the server's build backend (server/pyproject.toml [build-system])"
    backend = {**source, "file": "server/pyproject.toml", "part": "build-system.requires"}
    items.append(_pip(f"pip:{prefix}:runtime-server:build", [], py, plat, where, after=[base_key], from_source=backend))
    server = runtime.server.get(kind)
    if server is not None:
        where = (
            f"{prefix} stage final: runtimes.{rname}.server.{kind} (server/{server.requirements}, "
            f"extras {', '.join(server.extras)})"
        )
        files = {**source, "file": f"server/{server.requirements}", "package": "server", "extras": list(server.extras)}
        key = f"pip:{prefix}:runtime-server"
        items.append(_pip(key, [], py, plat, where, after=[base_key], torch=target.torch.version, from_source=files))
    return items


def _image(ref: str, oci: str, where: str) -> Input:
    return Input(f"image:{ref}", "image", {"ref": ref, "platforms": [oci], "local": is_local_image(ref)}, where)


def _debian(ref: str, oci: str, where: str) -> Input:
    """The Debian suite a local base is debootstrapped from: the tag's first word (`bookworm`, `bookworm-arm64`)."""
    suite = ref.rsplit(":", 1)[-1].split("-", 1)[0]
    spec = {"mirror": DEBIAN_MIRROR, "suite": suite, "architectures": [platform(oci).debian]}
    return Input(f"apt:debian/{suite}", "apt", spec, f"{where} (scripts/make-base-image.sh debootstraps it)")


def _git(source: Source, where: str) -> Input:
    spec = {"url": source.git, "commit": source.commit, "ref": source.ref}
    return Input(f"git:{source.git}@{source.commit or source.ref}", "git", spec, where)


def _pip(
    key: str,
    requirements: list[str],
    python: str,
    platform: str,
    where: str,
    *,
    index_url: str | None = None,
    extra_index_url: str | None = None,
    find_links: str | None = None,
    no_deps: bool = False,
    after: list[str] | None = None,
    torch: str | None = None,
    from_source: dict[str, Any] | None = None,
) -> Input:
    spec: dict[str, Any] = {
        "requirements": list(requirements),
        "python": python,
        "platform": platform,
        "index_url": index_url or "https://pypi.org/simple",
        "find_links": find_links,
        "no_deps": no_deps,
        "after": list(after or []),
        "torch": torch,
        "from_source": from_source,
    }
    if extra_index_url:  # only when set: every other set's spec (and so its lock entry) stays as it was
        spec["extra_index_url"] = extra_index_url
    return Input(key, "pip", spec, where)


def _file(matrix: Matrix, relative: str, where: str) -> Input:
    path = matrix.path.resolve().parent / relative
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {relative}: {exc.strerror}") from None
    return Input(f"file:{relative}", "file", {"path": relative, "sha256": digest}, where)
