"""One OCI platform type (issue 30, item 3): every known platform answers every name it has (OCI, ${TARGETARCH},
default variant, Debian, wheel machine and tag, uv's --python-platform, QEMU, host, ELF e_machine), the names are
checked against the real tools of this machine (uv, dpkg, uname, an ELF binary, binfmt_misc, the image's cross.py),
and no table of arch names is left outside imagebuild/matrix/oci_platform.py.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.errors import ConfigError
from imagebuild.matrix import oci_platform
from imagebuild.matrix.oci_platform import AMD64, ARM64, BASELINE, KNOWN, OciPlatform

REPO = Path(__file__).resolve().parents[1]
POLICY = "manylinux_2_28"  # lock/inputs.py MANYLINUX: the policy the images' wheels are resolved for

# The facts, as their sources spell them (matrix/oci_platform.py cites each source).
EXPECTED = {
    "linux/amd64": {
        "architecture": "amd64",
        "default_variant": "v1",
        "debian": "amd64",
        "machine": "x86_64",
        "elf_machine": 62,
        "slug": "linux-amd64",
        "qemu": "qemu-x86_64",
        "wheel_tag": "manylinux_2_28_x86_64",
        "uv_platform": "x86_64-manylinux_2_28",
    },
    "linux/arm64": {
        "architecture": "arm64",
        "default_variant": "v8",
        "debian": "arm64",
        "machine": "aarch64",
        "elf_machine": 183,
        "slug": "linux-arm64",
        "qemu": "qemu-aarch64",
        "wheel_tag": "manylinux_2_28_aarch64",
        "uv_platform": "aarch64-manylinux_2_28",
    },
}


def _names(p: OciPlatform) -> dict[str, object]:
    """Every name the type gives: its fields, its properties and its policy-taking methods."""
    names: dict[str, object] = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
    for attr, value in vars(OciPlatform).items():
        if isinstance(value, property):
            names[attr] = getattr(p, attr)
        elif callable(value) and not attr.startswith("_"):
            names[attr] = getattr(p, attr)(POLICY)
    return names


def test_every_known_platform_answers_every_name() -> None:
    assert {p.oci for p in KNOWN} == set(EXPECTED) and BASELINE is AMD64
    every = [_names(p) for p in KNOWN]
    assert len({frozenset(n) for n in every}) == 1, "every platform has the same names"
    for p, names in zip(KNOWN, every, strict=True):
        assert all(value not in ("", None) for value in names.values()), (p.oci, names)
        for name, value in EXPECTED[p.oci].items():
            assert names[name] == value, (p.oci, name)
    for name in every[0]:
        if name != "os":  # every name but the OS tells the platforms apart
            assert len({str(n[name]) for n in every}) == len(KNOWN), f"two platforms share their {name}"
    with pytest.raises(dataclasses.FrozenInstanceError):
        AMD64.machine = "i686"  # type: ignore[misc]


def test_lookups_by_every_spelling() -> None:
    assert oci_platform.platform("linux/arm64") is ARM64 and oci_platform.platform("linux/arm64/v8") is ARM64
    for bad in ("linux/s390x", "windows/amd64", "arm64", "linux/arm64/v8/x"):
        with pytest.raises(ConfigError, match="not a known platform .known: linux/amd64, linux/arm64"):
            oci_platform.platform(bad)
    for machine, expected in (("x86_64", AMD64), ("AMD64", AMD64), ("aarch64", ARM64), ("arm64", ARM64)):
        assert oci_platform.for_host(machine) is expected
    assert oci_platform.for_host("riscv64") is None and oci_platform.for_architecture("s390x") is None
    assert oci_platform.default_variant("arm64") == "v8" and oci_platform.default_variant("s390x") == ""


def test_the_matrix_schema_pattern_is_the_table() -> None:
    schema = json.loads((REPO / "schema" / "matrix.schema.json").read_text())
    pattern = oci_platform.schema_pattern()
    assert pattern in json.dumps(schema)
    assert all(re.fullmatch(pattern, p.oci) for p in KNOWN) and not re.fullmatch(pattern, "linux/s390x")


def test_this_host_is_known_by_uname_dpkg_and_its_own_elf_header() -> None:
    host = oci_platform.for_host(os.uname().machine)
    assert host is not None, f"this host ({os.uname().machine}) is not a known platform"
    with open(sys.executable, "rb") as f:  # the running interpreter: an ELF binary of this host
        header = f.read(20)
    assert header[:4] == b"\x7fELF" and struct.unpack_from("<H", header, 18)[0] == host.elf_machine
    from imagebuild.commands.smoke import host_platform

    assert host_platform() == host.oci  # what `imagebuild smoke` runs natively (the others under emulation)
    if shutil.which("dpkg"):
        arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True)
        assert arch.stdout.strip() == host.debian


def test_uv_takes_every_platforms_python_platform(tmp_path: Path) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed (scripts/setup.sh installs it)")
    (tmp_path / "empty.txt").write_text("")
    for name in [*(p.uv_platform(POLICY) for p in KNOWN), "bogus-" + POLICY]:
        run = subprocess.run(
            [uv, "pip", "compile", "--quiet", "--offline", "--no-index", "--python-version", "3.11"]
            + ["--python-platform", name, str(tmp_path / "empty.txt")],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert (run.returncode == 0) == (not name.startswith("bogus")), (name, run.stderr[:300])


def test_the_image_cross_script_lists_every_platforms_wheel_tag() -> None:
    spec = importlib.util.spec_from_file_location("cross", REPO / "image" / "cross" / "cross.py")
    assert spec is not None and spec.loader is not None
    cross = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cross)
    for p in KNOWN:
        assert p.wheel_tag(POLICY) in cross.platforms(p.machine)


def test_emulated_platforms_have_their_qemu_binfmt_entry() -> None:
    binfmt = Path("/proc/sys/fs/binfmt_misc")
    if not any(binfmt.glob("qemu-*")):
        pytest.skip("no QEMU binfmt entry on this host (scripts/setup.sh registers them)")
    host = oci_platform.for_host(os.uname().machine)
    for p in KNOWN:
        if p is not host and p.qemu == "qemu-aarch64":  # setup.sh registers the one the matrix builds: arm64
            assert (binfmt / p.qemu).exists(), p.qemu


# String literals naming an arch (not prose: no whitespace) outside the type's module, before issue 30: 33 in 10
# places (6 tables). Files another helper owns keep theirs until swapped for the type's calls; remove each entry
# here when its file is swapped (the test fails on an entry with nothing left to allow).
ARCH_WORD = re.compile(r"(?<![A-Za-z0-9])(?:amd64|arm64|x86_64|aarch64|ppc64le|s390x)(?![A-Za-z0-9])")
NOT_YET_SWAPPED = {
    "imagecontract/models/manifest.py": 1,  # the manifest's default `oci`: imagecontract may not import imagebuild
}


def _arch_literals() -> dict[str, int]:
    found: dict[str, int] = {}
    for root in ("imagebuild", "imagecontract", "smoke"):
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel == "imagebuild/matrix/oci_platform.py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docs = {
                id(node.body[0].value)
                for node in ast.walk(tree)
                if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and node.body
                and isinstance(node.body[0], ast.Expr)
            }
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and id(node) not in docs
                    and not re.search(r"\s", node.value)
                    and ARCH_WORD.search(node.value)
                ):
                    found[rel] = found.get(rel, 0) + 1
    return found


def test_no_arch_table_outside_the_type() -> None:
    found = _arch_literals()
    extra = {f: n for f, n in found.items() if n > NOT_YET_SWAPPED.get(f, 0)}
    assert extra == {}, "an arch name spelled outside imagebuild/matrix/oci_platform.py: ask the OciPlatform type"
    stale = sorted(f for f in NOT_YET_SWAPPED if f not in found)
    assert stale == [], f"swapped: remove {stale} from NOT_YET_SWAPPED"
