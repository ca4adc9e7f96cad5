"""Our HIP kernels compiled for the new AMD families (issue 32 item 2), and their code objects verified, without a GPU.

Debian bookworm's clang cannot target gfx950 or the gfx11/gfx12 parts; Debian's testing release (forky) has
clang-21 and hipcc 7.0.2 (which depends on clang-21, rocm-device-libs-21 and libamdhip64-dev). Its libraries need
a newer glibc than bookworm's, so they run in a forky root filesystem made with debootstrap (as
scripts/make-base-image.sh makes the local base) and entered with chroot; nothing of it is installed on the host.

Steps: (1) the root filesystem (debootstrap --variant=minbase forky, then `apt-get install hipcc python3`), unless
it is there; (2) kernels/tools/device_check.cu (the kernels' device code, no torch: as CI compiles it) compiled by
kernels/tools/compile_device_check.py's compile_hip with clang-21, once per arch and once for every arch together;
(3) on the host, each library read by the verifier (imagecontract/verify.py: the offload bundle's entries against
the request) and each code object unbundled (clang-offload-bundler) and read by the coverage scanner's ELF reader
(imagecontract/amdgpu_elf.py: the e_flags machine value), its kernels counted (llvm-readelf: `.kd` symbols).
Writes one JSON document (default bench/results/hip_families_codeobjects.json) and exits 1 when any arch fails.

Usage (root: debootstrap and chroot):
    .venv/bin/python bench/hip_families.py [--rootfs /var/tmp/h6-forky] [--keep-rootfs] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagecontract.amdgpu_elf import EF_AMDGPU_MACH, amdgpu_target  # noqa: E402
from imagecontract.codeobjects import list_code_objects  # noqa: E402
from imagecontract.verify import compare, parse_arch_list  # noqa: E402

ARCHES = ["gfx942", "gfx950", "gfx1100", "gfx1101", "gfx1102", "gfx1151", "gfx1200", "gfx1201"]
SUITE = "forky"
MIRROR = os.environ.get("IMAGEBUILD_DEBIAN_MIRROR", "http://deb.debian.org/debian")
PACKAGES = ["hipcc", "python3"]
LLVM = "/usr/lib/llvm-21/bin"
BITCODE = "/usr/lib/llvm-21/lib/clang/21/amdgcn/bitcode"  # rocm-device-libs-21
TRIPLE = "hipv4-amdgcn-amd-amdhsa--"
MAX_ROOTFS_BYTES = 3 << 30


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess[str]:
    print("+ " + shlex.join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=True, text=True, **kw)


def chroot(root: Path, *cmd: str, capture: bool = False) -> str:
    done = run(["chroot", str(root), *cmd], capture_output=capture)
    return done.stdout if capture else ""


def make_rootfs(root: Path) -> None:
    """forky minbase with hipcc; the suite's Release file may be past its Valid-Until on a mirror snapshot."""
    scripts = Path("/usr/share/debootstrap/scripts")
    script = scripts / (SUITE if (scripts / SUITE).exists() else "sid")  # bookworm's debootstrap knows no forky
    run(["debootstrap", "--variant=minbase", SUITE, str(root), MIRROR, str(script)], stdout=subprocess.DEVNULL)
    (root / "etc/apt/apt.conf.d/99imagebuild-valid-until").write_text('Acquire::Check-Valid-Until "false";\n')
    shutil.copy2("/etc/resolv.conf", root / "etc/resolv.conf")
    chroot(root, "apt-get", "update", "-q")
    env = ["env", "DEBIAN_FRONTEND=noninteractive"]
    chroot(root, *env, "apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES)
    chroot(root, "apt-get", "clean")


def du(root: Path) -> int:
    return int(subprocess.run(["du", "-sb", str(root)], check=True, capture_output=True, text=True).stdout.split()[0])


def versions(root: Path) -> dict[str, str]:
    query = "${Package}=${Version}\n"
    names = ["clang-21", "hipcc", "rocm-device-libs-21", "libamdhip64-dev"]
    text = chroot(root, "dpkg-query", "-W", "-f", query, *names, capture=True)
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def compile_in(root: Path, arches: list[str], name: str) -> tuple[Path, float]:
    """kernels/tools/compile_device_check.py's compile_hip inside the root filesystem; the library's host path."""
    code = (
        "import sys; sys.path.insert(0, '/src/kernels/tools'); from pathlib import Path; "
        "import compile_device_check as c; "
        f"c.compile_hip({arches!r}, Path('/src/out/{name}'), libdir=Path({BITCODE!r}))"
    )
    start = time.monotonic()
    chroot(root, "env", f"IMAGEBUILD_LLVM_BIN={LLVM}", "python3", "-c", code)
    return root / "src/out" / name, round(time.monotonic() - start, 1)


def code_object(root: Path, library: Path, arch: str) -> dict[str, object]:
    """One arch's code object out of the library: its e_flags read by the coverage scanner, its kernels counted."""
    inner = "/src/out/" + library.name
    fatbin, co = f"{inner}.{arch}.fatbin", f"{inner}.{arch}.co"
    chroot(root, f"{LLVM}/llvm-objcopy", "--dump-section", f".hip_fatbin={fatbin}", inner, "/dev/null")
    chroot(
        root,
        f"{LLVM}/clang-offload-bundler",
        "--unbundle",
        "--type=o",
        f"--targets={TRIPLE}{arch}",
        f"--input={fatbin}",
        f"--output={co}",
    )
    header = (root / co.lstrip("/")).read_bytes()[:64]
    (flags,) = struct.unpack_from("<I", header, 48)
    symbols = chroot(root, f"{LLVM}/llvm-readelf", "--symbols", "--wide", co, capture=True)
    kernels = sorted({line.split()[-1] for line in symbols.splitlines() if line.rstrip().endswith(".kd")})
    return {
        "e_flags_mach": f"{flags & EF_AMDGPU_MACH:#05x}",
        "scanner_reads": amdgpu_target(header),
        "bytes": (root / co.lstrip("/")).stat().st_size,
        "kernels": len(kernels),
    }


def verify(library: Path, arches: list[str]) -> dict[str, object]:
    listing = list_code_objects(library)
    result = compare(listing, parse_arch_list(";".join(arches)))
    return {
        "code_objects": listing.code_objects,
        "missing": list(result.missing),
        "unexpected": list(result.unexpected),
        "ok": result.ok,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rootfs", type=Path, default=Path("/var/tmp/h6-forky"))
    parser.add_argument("--keep-rootfs", action="store_true", help="leave the root filesystem (else removed)")
    parser.add_argument("--out", type=Path, default=REPO / "bench/results/hip_families_codeobjects.json")
    args = parser.parse_args()
    root = args.rootfs
    if not (root / LLVM.lstrip("/") / "clang++").exists():
        make_rootfs(root)
    size = du(root)
    if size > MAX_ROOTFS_BYTES:
        print(f"error: the root filesystem holds {size} bytes (at most {MAX_ROOTFS_BYTES})", file=sys.stderr)
        return 1
    shutil.rmtree(root / "src", ignore_errors=True)
    (root / "src/out").mkdir(parents=True)
    shutil.copytree(REPO / "kernels", root / "src/kernels", ignore=shutil.ignore_patterns("__pycache__", "build"))
    doc: dict[str, object] = {
        "command": "python3 bench/hip_families.py" + (" --keep-rootfs" if args.keep_rootfs else ""),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source": "kernels/tools/device_check.cu (kernels/csrc/silu_and_mul.cuh, skinny_linear.cuh)",
        "rootfs": {"suite": SUITE, "mirror": MIRROR, "packages": PACKAGES, "bytes": size},
        "toolchain": versions(root),
        "per_arch": {},
    }
    failed = []
    per_arch: dict[str, object] = {}
    for arch in ARCHES:
        library, seconds = compile_in(root, [arch], f"device_check_{arch}.so")
        entry = {"compile_s": seconds, "verify": verify(library, [arch]), **code_object(root, library, arch)}
        entry["ok"] = bool(entry["verify"]["ok"]) and entry["scanner_reads"] == arch and entry["kernels"] > 0
        per_arch[arch] = entry
        if not entry["ok"]:
            failed.append(arch)
    library, seconds = compile_in(root, ARCHES, "device_check_all.so")
    together = {"compile_s": seconds, "bytes": library.stat().st_size, "verify": verify(library, ARCHES)}
    together["per_arch"] = {arch: code_object(root, library, arch) for arch in ARCHES}
    together["ok"] = bool(together["verify"]["ok"]) and all(
        together["per_arch"][a]["scanner_reads"] == a for a in ARCHES
    )
    if not together["ok"]:
        failed.append("all")
    doc["per_arch"], doc["all_arches"], doc["failed"] = per_arch, together, failed
    doc["not_run"] = "no AMD GPU here: the code objects are compiled and read, never loaded or run"
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(args.out)
    if not args.keep_rootfs:
        shutil.rmtree(root)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
