"""The pip runtime kind: a serving runtime installed from the package index, every package pinned (a hashed
requirements file of this repository, or packages `imagebuild lock` resolves); registered in runtimes.py.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from imagebuild.matrix.fields import (
    EnvName,
    HttpPath,
    PinnedRequirement,
    Program,
    RepoPath,
    Text,
)
from imagebuild.matrix.sources import Strict


class RuntimeLimits(Strict):
    """What the image's server refuses; enforced by smoke/serve_guard.py in front of the runtime."""

    max_new_tokens: int = Field(ge=1, le=1_000_000, description="Most tokens one request may generate.")
    max_request_bytes: int = Field(ge=1024, le=1 << 30, description="Largest request body in bytes.")
    max_concurrency: int = Field(ge=1, le=4096, description="Generations at once; one more is refused (429).")


class PipRuntime(Strict):
    """A serving runtime installed from the package index, every package pinned by a requirements file."""

    kind: Literal["pip"] = Field(description="pip: a runtime installed from the package index.")
    description: Text = Field(default="", description="What the runtime is, written into the Dockerfile.")
    # A file in this repository holding every package as `name==version --hash=sha256:...`, torch excluded; or the
    # packages `imagebuild lock` resolves with every file's sha256 after the torch stage's set (one of the two).
    requirements: RepoPath | None = Field(
        default=None,
        description="File of this repository pinning every package (`name==version --hash=sha256:...`), not torch.",
    )
    packages: list[PinnedRequirement] = Field(
        default=[],
        description="Instead of requirements: the pinned packages `imagebuild lock` resolves (uv, every file's "
        "sha256) after the torch stage's set; the image installs that set with --require-hashes.",
    )
    entrypoint: Program = Field(description="The runtime's main program (on PATH in the image).")
    serve: list[Text] = Field(
        description="argv after the entrypoint that serves a model; `{model}` and `{port}` are filled in.",
    )
    serve_env: dict[EnvName, Text] = Field(default={}, description="Environment added when the smoke suite serves.")
    health: HttpPath = Field(default="/health", description="HTTP path that answers 200 once the server can generate.")
    api: Literal["openai", "tgi"] = Field(
        default="openai",
        description="Request flavour: openai (/v1/completions) or tgi (/generate).",
    )
    startup_timeout_s: int = Field(default=300, ge=1, description="Seconds the smoke suite waits for health.")
    limits: RuntimeLimits | None = Field(
        default=None,
        description=(
            "Request limits the image enforces: the serve command puts smoke/serve_guard.py (uvicorn, "
            "request checks) in front of the runtime, which listens on `{upstream_port}` instead of `{port}`."
        ),
    )

    def serve_limits(self) -> RuntimeLimits | None:
        """The matrix's `limits`: the guard in front of the runtime enforces them."""
        return self.limits

    @model_validator(mode="after")
    def _one_source(self) -> PipRuntime:
        if (self.requirements is None) == (not self.packages):
            raise ValueError("give either requirements (a hashed file) or packages (resolved by imagebuild lock)")
        return self
