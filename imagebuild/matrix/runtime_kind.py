"""What every runtime kind answers (issue 30 item 2): how to serve, how to know it is up, how to talk to it, which
limits the image enforces. Each kind's matrix model (TGI in runtimes.py, runtime_pip.py, runtime_vllm.py,
runtime_sglang.py) answers these; the plan writes the answers into the image's manifest (`runtime`), where the smoke
suite reads them as data, so the image side needs no module per runtime kind. The registration is the `Runtime`
union in runtimes.py; tests/test_kinds_layout.py holds every registered model to this protocol.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from imagebuild.matrix.runtime_pip import RuntimeLimits


class RuntimeKind(Protocol):
    @property
    def kind(self) -> str:
        """The kind's name: matrix.yaml `runtimes.<r>.kind`, the manifest's `runtime.kind`."""
        ...

    @property
    def entrypoint(self) -> str:
        """The program that serves (on PATH in the image)."""
        ...

    @property
    def serve(self) -> Sequence[str]:
        """How to serve: argv after the entrypoint; `{model}` and `{port}` are filled in."""
        ...

    @property
    def serve_env(self) -> Mapping[str, str]:
        """Environment added when it serves."""
        ...

    @property
    def health(self) -> str:
        """The HTTP path that answers 200 once it can generate."""
        ...

    @property
    def api(self) -> str:
        """The request flavour the smoke suite's generate and hostile checks speak: openai or tgi."""
        ...

    @property
    def startup_timeout_s(self) -> int:
        """Seconds the smoke suite waits for health."""
        ...

    def serve_limits(self) -> RuntimeLimits | None:
        """The request limits the image enforces in front of it (smoke/serve_guard.py), None for none."""
        ...
