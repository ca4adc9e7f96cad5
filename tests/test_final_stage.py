"""The CUDA final stage ships on the runtime base upstream ships (TGI@232e8d52:Dockerfile:166), not the devel base."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _final(target: str) -> str:
    text = (REPO / "dockerfiles" / target / "Dockerfile").read_text()
    return text[text.index("# ---- final: what ships ----") :]


def test_cuda_final_stage_is_the_runtime_base_with_the_venv_copied_in() -> None:
    final = _final("cuda12.1-torch2.3")
    assert final.splitlines()[1] == "FROM nvidia/cuda:12.1.1-base-ubuntu22.04 AS final"
    assert "COPY --from=torch /opt/venv /opt/venv" in final
    assert "PIP_CONSTRAINT=/opt/imagebuild/constraints.txt" in final  # the torch pin holds in the final stage too
    # Triton compiles its launcher at run time: compilers and Python headers, as upstream (Dockerfile:235-237)
    assert re.search(r"apt-get install -y --no-install-recommends python3 python3-dev build-essential", final)
    assert "cudnn" not in final.splitlines()[1]


def test_rocm_final_stage_stays_on_the_torch_stage_as_upstream() -> None:
    """TGI@232e8d52:Dockerfile_amd:163 ships the ROCm dev base (`FROM base as base-copy`)."""
    assert _final("rocm6.1-torch2.3").splitlines()[1] == "FROM torch AS final"
