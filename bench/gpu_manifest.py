"""The manifest the GPU evidence scripts hand the smoke suite, written through the contract's model.

The GPU machine has no container engine: the suite runs in that machine's own Python, so the script states what
an image built for it would claim. Every field goes through ``imagecontract.models.Manifest`` before the file is
written, so a manifest that stops fitting the contract is an error here (exit 2), on the GPU machine and in the
CPU mode CI runs (``IB_DEVICE=cpu``, tests/test_gpu_scripts_cpu.py) alike.

    python3 bench/gpu_manifest.py --out manifest.json --device cuda --arch sm_90 --kernels-built 1 \
        [--runtime-from dockerfiles/local-cpu/manifest.json]

``--device cpu`` writes the same document for the CPU device (no GPU arch, the math SDPA backend, this
machine's versions); ``cuda`` writes the GPU machine's (EXPECT_TORCH / EXPECT_CUDA / EXPECT_PYTHON override).
The runtime is the one of ``--runtime-from`` (the local-cpu image's ``transformers serve``) with its serve
argv's ``--device`` value replaced by this device, so the server loads the model onto the GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from imagecontract.models import Manifest, ModelError  # noqa: E402

GPU_BACKENDS = ["flash", "efficient", "cudnn", "math"]
# No image: the suite runs in the GPU machine's own Python, on that machine's own system.
HOST_BASE = "none (the GPU machine's own system and Python; no container engine there)"


def _release(version: str) -> str:
    match = re.match(r"\d+(\.\d+)*", version)
    return match.group(0) if match else version


def live_versions() -> dict[str, str | None]:
    """This machine's torch release and Python (CPU mode: the suite must agree with the machine it runs on)."""
    import torch

    return {
        "torch": _release(torch.__version__),
        "rocm": None,
        "cuda": torch.version.cuda,
        "python": ".".join(platform.python_version_tuple()[:2]),
    }


# What an image holds from this checkout at the same path below its root (dockerfiles/templates/stages/final.j2
# and cross/Dockerfile.j2: `COPY imagecontract/ /opt/imagebuild/imagecontract/`, smoke/ the same way): on a
# machine that serves from the checkout (the GPU machine), a serve argv naming such a file names the checkout's copy.
IMAGE_ROOT = "/opt/imagebuild/"
FROM_CHECKOUT = ("imagecontract/", "smoke/")
CHECKOUT = Path(__file__).resolve().parents[1]


def _on_this_machine(arg: str) -> str:
    """An argv element naming a file under the image's root -> the checkout's copy; an error for one only the image
    has (the runtime check would fail with 'can't open file', as it did on the H200 after the guard came in)."""
    if not arg.startswith(IMAGE_ROOT):
        return arg
    inside = arg.removeprefix(IMAGE_ROOT)
    local = CHECKOUT / inside
    if not inside.startswith(FROM_CHECKOUT) or not local.is_file():
        raise ValueError(f"runtime.serve names {arg}, which only the image holds (not {local})")
    return str(local)


def serve_runtime(source: Path, device: str) -> dict[str, Any]:
    """The runtime block of an image manifest, its serve argv's --device set to ``device`` and the files it names
    from the image's root taken from this checkout."""
    doc = json.loads(source.read_text(encoding="utf-8"))
    runtime = dict(doc["runtime"])
    argv = [_on_this_machine(str(arg)) for arg in runtime["serve"]]
    if "--device" not in argv or argv.index("--device") + 1 >= len(argv):
        raise ValueError(f"{source}: runtime.serve has no --device VALUE to set: {argv}")
    argv[argv.index("--device") + 1] = device
    runtime["serve"] = argv
    return runtime


def build(device: str, arch: str, kernels_built: bool, runtime: dict[str, Any] | None) -> dict[str, Any]:
    gpu = device == "cuda"
    if gpu:
        versions: dict[str, str | None] = {
            "torch": os.environ.get("EXPECT_TORCH", "2.11.0"),
            "rocm": None,
            "cuda": os.environ.get("EXPECT_CUDA", "13.0"),
            "python": os.environ.get("EXPECT_PYTHON", "3.12"),
        }
    else:
        versions = {**live_versions(), "cuda": None}
    arches = [arch] if gpu else []
    kernels_arches = arches if kernels_built else []
    return {
        "schema_version": 1,
        "target": "gpu-machine-h200" if gpu else "gpu-machine-cpu-mode",
        "platform": {
            "name": f"cuda{versions['cuda']}" if gpu else "cpu",
            "kind": "cuda" if gpu else "cpu",
            "version": versions["cuda"] if gpu else None,
            "base_image": HOST_BASE,
            "base_digest": None,
        },
        # pip installed the machine's torch from a wheel index (2.11.0+cu130 on the H200).
        "torch": {"version": versions["torch"], "obtained": "wheel", "patches": []},
        "gpu_arches": arches,
        "experimental_arches": [],
        "components": {
            "imagebuild-kernels": {
                "included": kernels_built,
                "arches": kernels_arches,
                "experimental": [],
                "reason": None if kernels_built else "kernels/ not built here (see kernels_build.log)",
            },
        },
        "attention_backends": {arch: GPU_BACKENDS} if gpu else {"cpu": ["math"]},
        "runtime": runtime,
        "tunableop": {"enabled": False, "tuning": False, "filename": "/data/tunableop/tunableop_results%d.csv"},
        "versions": versions,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--device", choices=["cuda", "cpu"], required=True)
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--kernels-built", choices=["0", "1"], default="0")
    p.add_argument("--runtime-from", type=Path, help="an image manifest whose runtime block to serve with")
    args = p.parse_args(argv)
    try:
        runtime = serve_runtime(args.runtime_from, args.device) if args.runtime_from else None
        data = build(args.device, args.arch, args.kernels_built == "1", runtime)
        Manifest.from_dict(data)  # the contract decides, before anything is written
    except (ModelError, ValueError, KeyError, OSError) as exc:
        print(f"error: gpu manifest: {exc}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"manifest: {args.out} ({data['target']}, {args.device}, runtime {runtime['name'] if runtime else None})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
