"""Issue 31 item 3 without the image: the arch coverage of every wheel the image of a CUDA target installs.

    python3 bench/vllm_cuda_wheels_coverage.py [TARGET] [--platform linux/amd64] [--out FILE]

Reads the target's locked pip sets (matrix.lock.json: base, torch, runtime; the files the image's pip installs, each
by URL and sha256), downloads each wheel from PyPI in turn (streamed, sha256 checked, refused past MAX_WHEEL bytes),
takes out its shared objects and its RECORD (the scanner's owner: the distribution), scans them with the in-image
scanner (imagecontract/coverage.py through imagebuild.prove.host_scan.scan_root) and deletes them before the next
wheel: the disk holds one wheel at a time (the largest, cuDNN or torch, about 2 GB unpacked), never the image.

Writes: the library x arch table for ARCHES (imagecontract.coverage.arch_table: per cell the kind and the entry it
rests on), the verdict of each arch list in VERDICTS with the target's coverage_required (imagebuild.prove.coverage
judge: ok, the one line a failing build prints, the optional gaps), and per wheel its size and library count. What
it cannot say: anything about files an image adds beyond these wheels (ours carries no device code of its own yet).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagebuild.lock import lockfile  # noqa: E402
from imagebuild.matrix import load_matrix  # noqa: E402
from imagebuild.prove.coverage import Required, disallowed, judge  # noqa: E402
from imagebuild.prove.host_scan import scan_root  # noqa: E402
from imagecontract.coverage import arch_table  # noqa: E402

ARCHES = ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_103", "sm_110", "sm_120"]
ARCHES += ["sm_121", "sm_121a"]
# the target's default list, the same with the `a` variants the wheels' arch-specific kernels need, an older GPU
# (Turing) and Thor (sm_110): which required library refuses each
VERDICTS = ["sm_80,sm_90,sm_100,sm_120", "sm_80,sm_86,sm_89,sm_90a,sm_100a,sm_103,sm_120,sm_121a", "sm_75", "sm_110"]
MAX_WHEEL = 4 << 30
# The machine's disk is shared: a wheel is fetched only while the disk keeps FLOOR free after it and its unpacked
# shared objects (about 3x the wheel); else wait, up to WAIT_S, then stop.
FLOOR = 8 << 30
WAIT_S = 1800
MAX_MEMBER = 2 << 30
CHUNK = 1 << 20


def _download(url: str, sha256: str, dest: Path) -> int:
    if not url.startswith("https://files.pythonhosted.org/"):
        raise SystemExit(f"error: not a PyPI file URL: {url[:120]}")
    digest, size = hashlib.sha256(), 0
    with urllib.request.urlopen(url, timeout=120) as resp, dest.open("wb") as out:  # noqa: S310 - https only
        while chunk := resp.read(CHUNK):
            size += len(chunk)
            if size > MAX_WHEEL:
                raise SystemExit(f"error: {url.rsplit('/', 1)[-1]} is over {MAX_WHEEL} bytes")
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != sha256:
        raise SystemExit(f"error: {url.rsplit('/', 1)[-1]}: sha256 {digest.hexdigest()}, locked {sha256}")
    return size


def _unpack(whl: Path, dest: Path) -> int:
    """Shared objects and the RECORD of the wheel under dest; how many shared objects."""
    count = 0
    with zipfile.ZipFile(whl) as zf:
        for info in zf.infolist():
            name = info.filename
            so = ".so" in Path(name).name and not name.endswith((".py", ".pyi", ".txt"))
            if info.is_dir() or not (so or name.endswith(".dist-info/RECORD")):
                continue
            if name.startswith("/") or ".." in Path(name).parts or info.file_size > MAX_MEMBER:
                raise SystemExit(f"error: {whl.name}: refused member {name[:120]}")
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, target.open("wb") as out:
                shutil.copyfileobj(src, out, CHUNK)
            count += so
    return count


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("target", nargs="?", default="cuda13.0-torch2.14")
    ap.add_argument("--platform", default="linux/amd64")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    started = time.monotonic()
    matrix = load_matrix(REPO / "matrix.yaml")
    target = matrix.target(args.target)
    need = [Required.parse(r) for r in target.coverage_required]
    lock = lockfile.read(REPO / "matrix.lock.json")[0]
    prefix = f"pip:{args.target}@{args.platform}:"
    files = [
        (p["name"], p["version"], f)
        for key, entry in sorted(lock["inputs"].items())
        if key.startswith(prefix)
        for p in entry["packages"]
        for f in p["files"][:1]  # the file pip installs (several only where a package lists more than one)
    ]
    libraries: list[dict] = []
    wheels: list[dict] = []
    raw_meta: dict = {}
    downloaded = 0
    with tempfile.TemporaryDirectory(prefix="h5-wheels-") as tmp:
        work = Path(tmp)
        for name, version, f in sorted(files, key=lambda item: item[2].get("size", 0)):
            deadline = time.monotonic() + WAIT_S
            while shutil.disk_usage(work).free < FLOOR + 4 * f.get("size", 1 << 30):
                if time.monotonic() > deadline:
                    raise SystemExit(f"error: disk below {FLOOR >> 30} GiB free for {WAIT_S} s; stopped before {name}")
                time.sleep(20)
            whl = work / f["file"]
            t0 = time.monotonic()
            size = _download(f["url"], f["sha256"], whl)
            took = time.monotonic() - t0
            downloaded += size
            site = work / "site"
            with zipfile.ZipFile(whl) as zf:  # what pip writes: every member unpacked (byte code not counted)
                unpacked = sum(info.file_size for info in zf.infolist())
            shared = _unpack(whl, site)
            whl.unlink()
            row = {"name": name, "version": version, "file": f["file"], "bytes": size, "unpacked_bytes": unpacked}
            row["download_s"] = round(took, 2)
            if shared:
                raw = scan_root(site, ",".join(ARCHES))
                raw_meta = {k: v for k, v in raw.items() if k != "libraries"}
                row["shared_objects"], row["with_device_code"] = shared, len(raw["libraries"])
                libraries += raw["libraries"]
            shutil.rmtree(site, ignore_errors=True)
            wheels.append(row)
            print(
                f"{name} {version}: {size / 1e6:.0f} MB, {row.get('with_device_code', 0)} with device code", flush=True
            )
    merged = {**raw_meta, "libraries": libraries}
    table = arch_table(libraries, ARCHES)
    verdicts = {}
    for arches in VERDICTS:
        wanted = arches.split(",")
        cut = [{**lib, "arches": {a: lib["arches"][a] for a in wanted}} for lib in libraries]
        raw = {**merged, "requested": wanted, "libraries": cut}
        doc = judge(raw, {}, f"{args.target}-wheels", need)
        verdicts[arches] = {
            "ok": doc.ok,
            "line": None if doc.ok else disallowed(doc),
            "optional_gaps": sorted({f"{g.library} {g.arch}" for g in doc.gaps if g.allowed}),
        }
    doc = {
        "about": "bench/vllm_cuda_wheels_coverage.py: the arch coverage of every wheel the image of the target "
        "installs (matrix.lock.json), scanned one wheel at a time with the in-image scanner",
        "command": " ".join(["python3", "bench/vllm_cuda_wheels_coverage.py", *sys.argv[1:]]),
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip(),
        "target": args.target,
        "platform": args.platform,
        "required": list(target.coverage_required),
        "seconds": round(time.monotonic() - started, 1),
        "load_average": os.getloadavg(),
        "downloaded_bytes": downloaded,
        "unpacked_bytes": sum(w["unpacked_bytes"] for w in wheels),
        "download_mb_per_s": round(downloaded / 1e6 / max(sum(w["download_s"] for w in wheels), 0.001), 1),
        "wheels": wheels,
        "verdicts": verdicts,
        "table": table,
    }
    out = args.out or REPO / "bench" / "results" / f"vllm-wheels-coverage-{args.platform.replace('/', '-')}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}: {len(wheels)} wheels, {downloaded / 1e9:.2f} GB in {doc['seconds']} s")


if __name__ == "__main__":
    main()
