"""Image size from the locked inputs: per target and OCI platform, the bytes of every pip file the lock names.

    python bench/lock_sizes.py            # writes bench/results/lock_sizes.json

The lock records each file's size as the index reports it (compressed: wheels are zip files), so this is what a
build downloads for its pip steps, per stage. Where a set is unresolved (download.pytorch.org does not answer
here), `--stand-in` sizes the PyPI release of the same version instead, resolved by uv for the image's Python and
platform (PyPI's torch 2.3.0 linux wheel is the CUDA 12.1 build: it requires nvidia-*-cu12 12.1 wheels). Base
images are sized from the registry's manifest (layer sizes) when the lock holds their digest; unresolved ones are
listed with the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAND_INS = {"pip:cuda12.1-torch2.3@linux/amd64:torch": ("torch==2.3.0", "3.10", "x86_64-manylinux_2_28")}


def stand_in(requirement: str, python: str, platform: str) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "in.txt").write_text(requirement + "\n")
        out = Path(scratch) / "pylock.toml"
        subprocess.run(
            ["uv", "pip", "compile", "--no-config", "--quiet", "--python-version", python, "--python-platform",
             platform, "--index-url", "https://pypi.org/simple", "-o", str(out), str(Path(scratch) / "in.txt")],
            check=True, capture_output=True, timeout=600,
        )  # fmt: skip
        lock = tomllib.loads(out.read_text())
    packages = [
        (p["name"], p["version"], sum(w.get("size", 0) for w in p.get("wheels", [])[:1])) for p in lock["packages"]
    ]
    return {
        "stand_in": f"{requirement} from PyPI (uv, Python {python}, {platform})",
        "bytes": sum(size for *_, size in packages),
        "largest": sorted(({"name": n, "version": v, "bytes": s} for n, v, s in packages), key=lambda x: -x["bytes"])[
            :8
        ],
    }


def _size(item: dict) -> int:
    """A file's size as the index reported it; a local wheelhouse file (file://) is measured."""
    if "size" in item:
        return int(item["size"])
    url = str(item.get("url", ""))
    return Path(url.removeprefix("file://")).stat().st_size if url.startswith("file://") else 0


def main() -> int:
    started = time.monotonic()
    doc = json.loads((ROOT / "matrix.lock.json").read_text())
    out: dict = {"command": "python bench/lock_sizes.py", "targets": {}}
    for target, platforms in sorted(doc["targets"].items()):
        for oci, keys in sorted(platforms.items()):
            sets, images, total = {}, {}, 0
            for key in keys:
                entry = doc["inputs"][key]
                if key.startswith("pip:"):
                    if entry["status"] == "locked":
                        size = sum(_size(p["files"][0]) for p in entry["packages"])
                        sets[key] = {"packages": len(entry["packages"]), "bytes": size}
                        total += size
                    elif key in STAND_INS:
                        sized = stand_in(*STAND_INS[key])
                        sets[key] = {"unresolved": entry.get("why", "")[:120], **sized}
                        total += sized["bytes"]
                    else:
                        sets[key] = {"unresolved": entry.get("why", "")[:160]}
                elif key.startswith("image:"):
                    images[key] = {"status": entry["status"], "why": entry.get("why", "")[:120]}
            out["targets"][f"{target} {oci}"] = {"pip_bytes": total, "pip_sets": sets, "images": images}
    out["seconds"] = round(time.monotonic() - started, 1)
    path = ROOT / "bench" / "results" / "lock_sizes.json"
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    for name, data in out["targets"].items():
        print(f"{name}: {data['pip_bytes'] / 1e9:.2f} GB of pip files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
