#!/usr/bin/env python3
"""Build-platform helpers for cross-installed layers (run in the Dockerfile's build stages, never in an image).

`cross.py platforms ARCH`: the wheel platform tags (for PIP_PLATFORM, space separated) pip needs to choose the wheels
a Linux of this stage's glibc accepts on ARCH (x86_64, aarch64): manylinux_2_<glibc> down to the oldest, the legacy
aliases, linux_ARCH. pip does not expand a manylinux_2_X tag to older ones itself, so every tag is listed. The build
and target stages share one distribution (the matrix platform), so this stage's glibc is the target's.

`cross.py merge SITE VENV`: move what `pip install --target SITE` placed into the virtual environment VENV: any
distribution VENV already holds under the same name is uninstalled first (pip, as an upgrade would), scripts go to
VENV/bin (their RECORD entries follow), everything else to VENV's site-packages (SITE is removed).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

OLDEST = {"x86_64": 5, "i686": 5, "aarch64": 17, "ppc64le": 17, "s390x": 17, "armv7l": 17}
LEGACY = {"manylinux2014": 17, "manylinux2010": 12, "manylinux1": 5}


def platforms(arch: str) -> list[str]:
    if arch not in OLDEST:
        raise SystemExit(f"error: no manylinux tags known for arch {arch!r}")
    glibc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    match = re.fullmatch(r"glibc (\d+)\.(\d+)", glibc)
    if not match or match.group(1) != "2":
        raise SystemExit(f"error: this stage's C library is not glibc 2.x: {glibc!r}")
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(int(match.group(2)), OLDEST[arch] - 1, -1)]
    tags += [f"{alias}_{arch}" for alias, minor in LEGACY.items() if minor >= OLDEST[arch]]
    return [*tags, f"linux_{arch}"]


def _name(dist_info: Path) -> str:
    for line in (dist_info / "METADATA").read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("Name:"):
            return line.split(":", 1)[1].strip()
    raise SystemExit(f"error: {dist_info} has no Name in METADATA")


def merge(site: Path, venv: Path) -> None:
    purelib = next((venv / "lib").glob("python3*/site-packages"))
    names = sorted(_name(d) for d in site.glob("*.dist-info"))
    held = {re.sub(r"[-_.]+", "-", _name(d)).lower() for d in purelib.glob("*.dist-info")}
    replaced = [n for n in names if re.sub(r"[-_.]+", "-", n).lower() in held]
    if replaced:
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-q", "-y", *replaced], check=True)
    scripts = site / "bin"
    if scripts.is_dir():
        for script in sorted(scripts.iterdir()):
            os.replace(script, venv / "bin" / script.name)
        scripts.rmdir()
        # --target installs from a home scheme (lib/python): its scripts are ../../bin/X from there
        for record in site.glob("*.dist-info/RECORD"):
            text = record.read_text(encoding="utf-8")
            record.write_text(re.sub(r"(?m)^\.\./\.\./bin/", "../../../bin/", text), encoding="utf-8")
    # file by file: folders both hold (__pycache__, namespace packages) are merged, not replaced
    for folder, dirs, files in os.walk(site, topdown=True):
        dirs.sort()
        rel = Path(folder).relative_to(site)
        for name in sorted(files) + sorted(d for d in dirs if (Path(folder) / d).is_symlink()):
            dest = purelib / rel / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(Path(folder) / name, dest)
    shutil.rmtree(site)


def main(argv: list[str]) -> None:
    if len(argv) == 2 and argv[0] == "platforms":
        print(" ".join(platforms(argv[1])))
    elif len(argv) == 3 and argv[0] == "merge":
        merge(Path(argv[1]), Path(argv[2]))
    else:
        raise SystemExit("usage: cross.py platforms ARCH | cross.py merge SITE VENV")


if __name__ == "__main__":
    main(sys.argv[1:])
