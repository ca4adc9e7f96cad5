"""Which GPU arches every library in an image holds code for: scan a filesystem, list device code, tabulate.

Stdlib only: it runs inside the image being scanned (its own python3; the host bind-mounts this package read-only
at a path of its own), because only there do the files, their owners (pip's RECORD, dpkg's lists) and the
manifest sit together. Files are read through codeobjects' bounded readers, never whole: an ELF library's
section table and its `.hip_fatbin` / `.nv_fatbin` headers, the 64-byte header of a bare code object. Any file of
the image may have been planted by a package the build installed: every file is opened through
blob.open_regular without following a symlink and refused unless regular (a FIFO, `/dev/zero`), the owner lists
and the manifest are read up to a bound, and a file that cannot be read is listed in `scan.errors` as such while
the scan goes on (it never aborts or hangs).

A shared object with device code is one library; bare code objects (`.hsaco`, rocBLAS/hipBLASLt `.co`, offload
bundles, fat binaries) count per folder, since rocBLAS keeps one file per arch. Status of an arch per library:
present (code that loads on every setting of the arch), partial (AMD: on some feature settings only),
compatible (CUDA: SASS of the same major, older minor), ptx (CUDA: only PTX the driver compiles), absent. For CUDA
the rule is imagecontract.cuda_fatbin.cuda_cell (CUDA's own compatibility, cited there), and each row's `via` says
which kind of coverage and which entry gives it: `cubin exact (sm_90a)`, `cubin compatible from sm_80`,
`family from sm_100f`, `ptx-jit from compute_80` or `none`; `arch_table` writes that as library -> arch -> cell.
"""

from __future__ import annotations

import sys

if not __package__:  # run as a file (in an image: /tmp/imagebuild-contract/imagecontract/coverage.py)
    from pathlib import Path as _Path

    sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import csv
import errno
import json
import os
import re
import stat
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagecontract.blob import UnreadableFile, open_regular, read_bounded
from imagecontract.codeobjects import BUNDLE_MAGIC, CCOB_MAGIC, FATBIN_MAGIC, Listing, VerifyError, list_code_objects
from imagecontract.cuda_fatbin import PTX_TEXT_HEAD, cuda_cell, describe, ptx_text_target
from imagecontract.targets import device_configs, loads_on

COVERED = ("present", "partial", "compatible", "ptx")
SKIP_TOP = ("proc", "sys", "dev", "run")
MIN_SIZE = 64
MAX_ERRORS = 50  # error lines kept in the document (each names its file)
MAX_OWNER_FILE = 64 << 20  # one RECORD or dpkg .list (torch's RECORD: about 2 MiB)
MAX_MANIFEST = 1 << 20  # /opt/imagebuild/manifest.json (ours: a few KiB)
_FATBIN = FATBIN_MAGIC.to_bytes(4, "little")


@dataclass
class Library:
    """One row of the table: a shared object, or a folder of bare code-object files."""

    path: str
    kind: str  # "library" or "kernel-files"
    files: int = 1
    owner: str | None = None
    code_objects: list[str] = field(default_factory=list)
    ptx: list[str] = field(default_factory=list)


@dataclass
class Scan:
    libraries: list[Library]
    files_seen: int
    files_read: int
    seconds: float
    errors: list[str]


def _sniff(head: bytes) -> str | None:
    """'elf' (64-bit LE), 'object' (bundle or fat binary) or None, from a file's first bytes."""
    if head[:4] == b"\x7fELF":
        return "elf" if head[4:6] == b"\x02\x01" else None
    if head.startswith((BUNDLE_MAGIC, CCOB_MAGIC)) or head[:4] == _FATBIN:
        return "object"
    return None


def walk(root: Path, skip: Iterable[Path] = ()) -> Iterator[Path]:
    """Regular files under root, symlinks not followed, each inode once, /proc /sys /dev /run left out."""
    seen: set[tuple[int, int]] = set()
    skipped = {root / name for name in SKIP_TOP} | {Path(p) for p in skip}
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if here / d not in skipped)
        for name in sorted(files):
            path = here / name
            try:
                st = path.lstat()
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            yield path


def scan(root: Path, skip: Iterable[Path] = ()) -> Scan:
    """Every file with device code under root, grouped into libraries; unreadable files are listed as errors."""
    started = time.monotonic()
    libraries: dict[str, Library] = {}
    records: list[Path] = []
    seen = read = 0
    errors: list[str] = []
    for path in walk(root, skip):
        seen += 1
        if path.name == "RECORD" and path.parent.name.endswith(".dist-info"):
            records.append(path)
        try:
            with open_regular(path, follow=False) as fh:
                head = fh.read(64)
                text_ptx = path.suffix == ".ptx" and head.lstrip().startswith((b"//", b".version"))
                if text_ptx:  # PTX as a text file: its `.target` line (cuda_fatbin.ptx_text_target)
                    head += fh.read(PTX_TEXT_HEAD - len(head))
            kind = "ptx-text" if text_ptx else _sniff(head) if len(head) >= MIN_SIZE else None
            if kind is None:
                continue
            read += 1
            if kind == "ptx-text":
                target = ptx_text_target(head)
                listing = Listing(str(path), ptx=[target] if target else [])
            else:
                listing = list_code_objects(path, follow=False)
        except (OSError, VerifyError) as exc:
            _unreadable(errors, path, exc)
            continue
        if not listing.code_objects and not listing.ptx:
            continue
        bare = kind != "elf" or not listing.entries or listing.entries[0].startswith("amdgpu-elf")
        key = str(path.parent) if bare else str(path)
        lib = libraries.setdefault(key, Library(key, "kernel-files" if bare else "library", files=0))
        lib.files += 1
        lib.code_objects = sorted({*lib.code_objects, *listing.code_objects})
        lib.ptx = sorted({*lib.ptx, *listing.ptx})
    rows = sorted(libraries.values(), key=lambda lib: lib.path)
    _set_owners(root, rows, records, errors)
    return Scan(rows, seen, read, round(time.monotonic() - started, 3), errors)


def _unreadable(errors: list[str], path: Path, exc: BaseException) -> None:
    """Record a file the scan could not read (one line naming it) and go on."""
    if len(errors) < MAX_ERRORS:
        text = str(exc) if isinstance(exc, UnreadableFile) else f"{path}: {exc}"
        errors.append(" ".join(f"unreadable: {text}".split())[:300])


def _owner_lines(path: Path, errors: list[str]) -> list[str] | None:
    """The lines of a RECORD or dpkg list (bounded, symlinks not followed), or None after recording why not."""
    try:
        return read_bounded(path, MAX_OWNER_FILE, follow=False).decode("utf-8", "replace").splitlines()
    except OSError as exc:
        _unreadable(errors, path, exc)
        return None


def _set_owners(root: Path, rows: list[Library], records: list[Path], errors: list[str] | None = None) -> None:
    """Owner of each row: the Python distribution whose RECORD lists it (`python:torch`), else the Debian
    package whose file list does (`dpkg:librocsparse0`); a folder row by any of its files."""
    wanted = {row.path: row for row in rows}
    folders = {row.path: row for row in rows if row.kind == "kernel-files"}

    def claim(path: str, owner: str) -> None:
        row = wanted.get(path) or folders.get(os.path.dirname(path))
        if row is not None and row.owner is None:
            row.owner = owner

    errors = [] if errors is None else errors
    for record in records:
        dist = record.parent.name.split("-")[0].lower().replace("_", "-")
        base = record.parent.parent
        lines = _owner_lines(record, errors)
        try:
            for entry in csv.reader(lines or []):  # csv's own field limit (128 KiB) is an error, not an abort
                if entry:
                    claim(os.path.normpath(str(base / entry[0])), f"python:{dist}")
        except csv.Error as exc:
            _unreadable(errors, record, exc)
    for listing in sorted((root / "var/lib/dpkg/info").glob("*.list")):
        package = listing.name.removesuffix(".list").split(":")[0]
        for line in _owner_lines(listing, errors) or []:
            claim(str(root / line.strip().lstrip("/")), f"dpkg:{package}")


# --- status of one arch in one library -------------------------------------------------------------------


def status(want: str, code_objects: list[str], ptx: list[str]) -> str:
    """present / partial / compatible / ptx / absent for one requested arch (module docstring); CUDA by
    cuda_fatbin.cuda_cell (cubin, `a`/`f` and PTX rules)."""
    if want.startswith("gfx"):
        configs = device_configs(want) or []
        hits = [d for d in configs if any(loads_on(c, d) for c in code_objects)]
        return "present" if hits and len(hits) == len(configs) else ("partial" if hits else "absent")
    return cuda_cell(want, code_objects, ptx).status


def via(want: str, code_objects: list[str], ptx: list[str]) -> str:
    """How an arch is covered, in words: CUDA as cuda_fatbin.Cell.text (`cubin compatible from sm_80`), AMD its
    status."""
    if want.startswith("gfx"):
        return status(want, code_objects, ptx)
    return cuda_cell(want, code_objects, ptx).text()


def arches_found(rows: Iterable[Library]) -> list[str]:
    """Every processor the libraries hold code for (the columns when nothing was requested)."""
    found = {c.split(":")[0] for row in rows for c in row.code_objects if not c.startswith("amdgcn-mach")}
    return sorted(found, key=lambda a: (a[:2], len(a), a))


def table(rows: Iterable[Library], arches: list[str]) -> list[dict[str, object]]:
    """The rows as documents (models.coverage.LibraryCoverage fields), each with its per-arch status."""
    return [
        {
            "path": row.path,
            "kind": row.kind,
            "files": row.files,
            "owner": row.owner,
            "component": None,
            "code_objects": row.code_objects,
            "ptx": row.ptx,
            "arches": {a: status(a, row.code_objects, row.ptx) for a in arches},
            "via": {a: via(a, row.code_objects, row.ptx) for a in arches},
        }
        for row in rows
    ]


def arch_table(libraries: Iterable[Mapping[str, Any]], requested: list[str]) -> dict[str, Any]:
    """The per-library table the build, the SBOM and the page consume: {"requested": [...], "libraries": {path:
    {"owner", "carries", "arches": {arch: {"kind": cubin exact | cubin compatible | family | ptx-jit | none (AMD:
    its status), "from": the entry that gives it, or null}}}}}. Input: `table()`'s rows or arch-coverage.json's
    `libraries`."""
    out: dict[str, Any] = {}
    for lib in libraries:
        code = [str(c) for c in lib.get("code_objects") or []]
        ptx = [str(p) for p in lib.get("ptx") or []]
        cells: dict[str, dict[str, str | None]] = {}
        for arch in requested:
            if arch.startswith("gfx"):
                cells[arch] = {"kind": status(arch, code, ptx), "from": None}
            else:
                cell = cuda_cell(arch, code, ptx)
                cells[arch] = {"kind": cell.kind, "from": cell.source}
        out[str(lib["path"])] = {"owner": lib.get("owner"), "carries": describe(code, ptx), "arches": cells}
    return {"requested": list(requested), "libraries": out}


def _manifest(root: Path, errors: list[str] | None = None) -> dict[str, object] | None:
    """The image's manifest (bounded, no symlink followed), or None: absent, or unreadable (then recorded)."""
    path = root / "opt/imagebuild/manifest.json"
    try:
        data = json.loads(read_bounded(path, MAX_MANIFEST, follow=False).decode("utf-8"))
    except FileNotFoundError:
        return None
    except UnreadableFile as exc:
        if exc.errno != errno.ENOENT:
            _unreadable([] if errors is None else errors, path, exc)
        return None
    except (OSError, ValueError, RecursionError) as exc:
        _unreadable([] if errors is None else errors, path, exc)
        return None
    return data if isinstance(data, dict) else None


def main(argv: list[str] | None = None) -> int:
    """Print the raw scan as JSON: libraries (statuses over --arch, or the manifest's arches, or all found), the
    image's manifest, scan numbers. The host turns it into arch-coverage.json (imagebuild/prove/coverage.py)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--root", default="/", type=Path)
    parser.add_argument("--arch", help="arches to tabulate (default: the manifest's, else every one found)")
    parser.add_argument("--skip", action="append", default=[], help="a folder to leave out (repeatable)")
    parser.add_argument("--table", action="store_true", help="print arch_table's library -> arch -> cell instead")
    args = parser.parse_args(argv)
    result = scan(args.root, args.skip)
    manifest = _manifest(args.root, result.errors)
    if args.arch:
        arches = [a for a in re.split(r"[;,\s]+", args.arch) if a]
    elif manifest and isinstance(gpu := manifest.get("gpu_arches"), list) and gpu:
        experimental = manifest.get("experimental_arches")
        arches = [str(a) for a in gpu] + [str(a) for a in (experimental if isinstance(experimental, list) else [])]
    else:
        arches = arches_found(result.libraries)
    libraries = table(result.libraries, arches)
    doc = {
        "root": str(args.root),
        "requested": arches,
        "libraries": libraries,
        "manifest": manifest,
        "scan": {
            "files_seen": result.files_seen,
            "files_read": result.files_read,
            "seconds": result.seconds,
            "errors": result.errors,
        },
    }
    json.dump(arch_table(libraries, arches) if args.table else doc, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
