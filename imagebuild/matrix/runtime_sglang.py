"""The SGLang runtime kind (issue 31): `sglang serve`, an OpenAI-compatible server, installed from PyPI as wheels.

The second runtime on the CUDA 13 wheel stack, added as a module of its own to show the runtime kinds pluggable: like
vLLM it is a pip runtime (every package pinned and hashed by `imagebuild lock`, nothing compiled in the image, the
pip steps cross-installed for every OCI platform) that serves on the image's GPU only, so on a machine without a
usable GPU the smoke suite's serve check is skipped with that reason and a GPU runner runs the same OpenAI-API check.
What differs is only its program: `sglang serve` (sglang 0.5.23's console script `sglang = sglang.cli.main:main`,
subcommand `serve`), health `/health`, the OpenAI routes `/v1/completions` and `/v1/chat/completions`
(sglang/srt/entrypoints/http_server.py of the 0.5.23 wheel). Its wheels are manylinux_2_34 only: the platform's
`glibc` (2.36 for bookworm) lets the lock resolve them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from imagebuild.matrix.fields import Program
from imagebuild.matrix.runtime_pip import PipRuntime


class SglangRuntime(PipRuntime):
    """SGLang (`sglang serve`): its pinned packages resolved by the lock, served on the GPU."""

    kind: Literal["sglang"] = Field(description="sglang: SGLang's OpenAI-compatible server, from PyPI wheels.")  # type: ignore[assignment]
    entrypoint: Program = Field(default="sglang", description="The runtime's main program (on PATH in the image).")
    api: Literal["openai"] = Field(default="openai", description="Request flavour: openai (/v1/completions).")
    startup_timeout_s: int = Field(
        default=900,
        ge=1,
        description="Seconds the smoke suite waits for health (kernel JIT and CUDA graph capture on first start).",
    )

    @model_validator(mode="after")
    def _sglang_from_the_lock(self) -> SglangRuntime:
        if self.requirements is not None:
            raise ValueError("an sglang runtime names packages (resolved by imagebuild lock), not a requirements file")
        if not any(p.split("==", 1)[0].lower() == "sglang" for p in self.packages):
            raise ValueError("packages must pin sglang (e.g. sglang==0.5.23)")
        if self.serve[:1] != ["serve"]:
            raise ValueError("serve must start with the `serve` subcommand (sglang serve --model-path MODEL ...)")
        return self
