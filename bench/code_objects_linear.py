"""Time the code-object reader on files made only of empty offload bundles (issue 21: the reader was quadratic,
4 MiB took 74 s), and on a 16 GiB sparse section. Target: linear in the file's size.

Usage: python bench/code_objects_linear.py [--sizes 4,16,64] [--json-out bench/results/code_objects_linear.json]
Reported per size: seconds, bytes read from the file (through Blob.bytes_read), microseconds per bundle.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import struct
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagecontract import blob as bl  # noqa: E402
from imagecontract import codeobjects as co  # noqa: E402

EMPTY = co.BUNDLE_MAGIC + struct.pack("<Q", 0)


def one(folder: Path, mib: int) -> dict[str, float]:
    path = folder / f"empty-{mib}.co"
    path.write_bytes(EMPTY * ((mib << 20) // len(EMPTY)))
    with bl.open_regular(path) as fh:
        blob = bl.Blob(fh, path.stat().st_size)
        started = time.monotonic()
        co.list_blob(path, blob)
        seconds = time.monotonic() - started
    bundles = (mib << 20) // len(EMPTY)
    path.unlink()
    return {
        "mib": mib,
        "bundles": bundles,
        "seconds": round(seconds, 2),
        "bytes_read": blob.bytes_read,
        "us_per_bundle": round(seconds / bundles * 1e6, 2),
    }


def sparse(folder: Path) -> dict[str, float]:
    path = folder / "sparse.co"
    with open(path, "wb") as fh:
        fh.seek(16 << 30)
        fh.write(EMPTY)
    with bl.open_regular(path) as fh:
        blob = bl.Blob(fh, path.stat().st_size)
        started = time.monotonic()
        co.hip_bundle_ids(blob)
        seconds = time.monotonic() - started
    path.unlink()
    return {"gib": 16, "seconds": round(seconds, 3), "bytes_read": blob.bytes_read}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="4,16,64")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = [one(Path(tmp), int(s)) for s in args.sizes.split(",")]
        holes = sparse(Path(tmp))
    doc = {
        "command": "python bench/code_objects_linear.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "before": "issue 21: 4 MiB of empty bundles took 74 s (quadratic; 16 MiB about 20 min)",
        "empty_bundle_runs": runs,
        "sparse_section": holes,
    }
    text = json.dumps(doc, indent=2)
    print(text)
    if args.json_out:
        args.json_out.write_text(text + "\n")


if __name__ == "__main__":
    main()
