"""Serving runtimes of matrix.yaml: TGI built from source (Rust launcher and router, Python server) or a runtime
installed from the package index with every package pinned.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from imagebuild.matrix.fields import (
    AptPackage,
    Digest,
    EnvName,
    HttpPath,
    ImageName,
    Name,
    PlatformKind,
    Program,
    RepoPath,
    Text,
)
from imagebuild.matrix.runtime_pip import PipRuntime as PipRuntime
from imagebuild.matrix.runtime_pip import RuntimeLimits as RuntimeLimits
from imagebuild.matrix.runtime_sglang import SglangRuntime as SglangRuntime
from imagebuild.matrix.runtime_vllm import VllmRuntime as VllmRuntime
from imagebuild.matrix.sources import Source, Strict


class TgiServer(Strict):
    """How TGI's Python server is installed on one platform kind: its pinned requirements file and extras."""

    requirements: RepoPath = Field(
        description="Requirements file in TGI's server/ directory (e.g. requirements_rocm.txt).",
    )
    extras: list[Name] = Field(
        default=[],
        description="Extras whose packages the server's modules import at top level.",
    )


class TgiAttention(Strict):
    """Per platform kind, the components TGI's flash / paged attention import: all included for an arch -> promised."""

    flash: dict[PlatformKind, list[Name]] = Field(
        default={},
        description="Per platform kind, what TGI's flash attention imports (all built for an arch: a promise).",
    )
    paged: dict[PlatformKind, list[Name]] = Field(
        default={},
        description="Per platform kind, what TGI's paged attention imports (all built for an arch: a promise).",
    )


class TgiRuntime(Strict):
    """text-generation-inference: Rust launcher and router built from source, Python server built against torch."""

    kind: Literal["tgi"] = Field(
        description="tgi: text-generation-inference (Rust launcher and router, Python server).",
    )
    description: Text = Field(default="", description="What the runtime is, written into the Dockerfile.")
    source: Source = Field(description="TGI source, pinned by commit.")
    builder_image: ImageName = Field(description="Rust image the launcher and router are built in.")
    builder_digest: Digest | None = Field(default=None, description="sha256 digest pinning builder_image.")
    rust_toolchain: Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$")] = Field(
        description="Channel of TGI's rust-toolchain.toml; builder_image must carry it.",
    )
    entrypoint: Program = Field(description="The runtime's main program (one of binaries).")
    binaries: list[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")]] = Field(
        description="Cargo outputs the image ships.",
    )
    server: dict[PlatformKind, TgiServer] = Field(
        description="How the Python server is installed on each platform kind.",
    )
    apt_packages: list[AptPackage] = Field(
        default=[],
        description="Debian packages the binaries need at run time (the router links OpenSSL).",
    )
    env: dict[EnvName, Text] = Field(default={}, description="Environment variables of the final stage.")
    default_args: list[Text] = Field(
        default=[],
        description="CMD: the entrypoint's arguments when `docker run IMAGE` gives none.",
    )
    serve: list[Text] = Field(
        description="argv after the entrypoint that serves a model; `{model}` and `{port}` are filled in.",
    )
    serve_env: dict[EnvName, Text] = Field(default={}, description="Environment added when the smoke suite serves.")
    health: HttpPath = Field(default="/health", description="HTTP path that answers 200 once the server can generate.")
    api: Literal["tgi"] = Field(default="tgi", description="Request flavour of the generate API.")
    startup_timeout_s: int = Field(default=900, ge=1, description="Seconds the smoke suite waits for health.")
    attention: TgiAttention = Field(
        default=TgiAttention(),
        description="Which components TGI's flash / paged attention need.",
    )

    def serve_limits(self) -> RuntimeLimits | None:
        """None: TGI's launcher bounds requests itself (its own options), no guard in front."""
        return None

    @model_validator(mode="after")
    def _builder_has_toolchain(self) -> TgiRuntime:
        tag = self.builder_image.rpartition(":")[2]
        if not tag.startswith(self.rust_toolchain):
            raise ValueError(
                f"builder_image {self.builder_image} does not carry Rust {self.rust_toolchain} "
                "(rust_toolchain, the channel of TGI's rust-toolchain.toml); rustup would fetch another toolchain"
            )
        if self.entrypoint not in self.binaries:
            raise ValueError(f"entrypoint {self.entrypoint} is not one of binaries {self.binaries}")
        return self


# The runtime kinds, registered here: tgi above, pip, vllm and sglang in modules of their own.

Runtime = Annotated[TgiRuntime | PipRuntime | VllmRuntime | SglangRuntime, Field(discriminator="kind")]
RUNTIME_KINDS = ("tgi", "pip", "vllm", "sglang")
