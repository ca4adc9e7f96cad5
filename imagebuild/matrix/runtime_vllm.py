"""The vLLM runtime kind (issue 31): `vllm serve`, an OpenAI-compatible server, installed from PyPI as wheels.

What it shares with a pip runtime (every package pinned and hashed, nothing compiled in the image, one Dockerfile
for every OCI platform with the pip steps cross-installed) it inherits; what makes it a kind of its own:
- its packages are resolved by `imagebuild lock` (uv, every file's sha256) after the torch stage's set, never a
  hand-kept requirements file: vLLM pins torch and the CUDA libraries (wheels) itself, so the lock resolves them
  under the torch stage's pins and the image installs exactly that set with `--require-hashes`;
- it serves on the image's GPU only (`vllm serve` has no CPU path in a CUDA build): on a machine without a usable
  GPU the smoke suite's serve check is skipped with that reason (smoke/checks/runtime.py), on a GPU runner it starts
  `vllm serve` on the tiny model and runs the same OpenAI-API check (completions, chat, hostile clients) as for
  transformers serve.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from imagebuild.matrix.fields import Program, Url
from imagebuild.matrix.runtime_pip import PipRuntime


class VllmRuntime(PipRuntime):
    """vLLM (`vllm serve`): its pinned packages resolved by the lock, served on the GPU."""

    kind: Literal["vllm"] = Field(description="vllm: vLLM's OpenAI-compatible server, from PyPI wheels.")  # type: ignore[assignment]
    entrypoint: Program = Field(default="vllm", description="The runtime's main program (on PATH in the image).")
    api: Literal["openai"] = Field(default="openai", description="Request flavour: openai (/v1/completions).")
    startup_timeout_s: int = Field(
        default=900,
        ge=1,
        description="Seconds the smoke suite waits for health (CUDA graph capture and torch.compile on first start).",
    )
    index_url: Url | None = Field(
        default=None,
        description="An index the packages come from besides PyPI (pip's --extra-index-url): AMD's ROCm builds of "
        "vLLM (issue 32); unset: PyPI alone.",
    )

    @model_validator(mode="after")
    def _vllm_from_the_lock(self) -> VllmRuntime:
        if self.requirements is not None:
            raise ValueError("a vllm runtime names packages (resolved by imagebuild lock), not a requirements file")
        if not any(p.split("==", 1)[0].lower() == "vllm" for p in self.packages):
            raise ValueError("packages must pin vllm (e.g. vllm==0.33.0)")
        if self.serve[:1] != ["serve"]:
            raise ValueError("serve must start with the `serve` subcommand (vllm serve MODEL ...)")
        return self
