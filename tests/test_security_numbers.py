"""Issue 21, class 5: numbers from the environment and from files are ASCII digits of bounded length, else a
located refusal; the in-image preflight refuses (exit 78) when it cannot decide and never lets the entrypoint
start the server unchecked.

Simulated AMD host (a fake KFD topology, as tests/test_preflight_simulated.py lays it out): a gfx942 GPU, an
image built for gfx90a only. Without an override that is a refusal; an override the HSA runtime would not
believe must not turn it into a start.
"""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagecontract import preflight
from imagecontract.driver import rocm_gpus, visible
from imagecontract.kinds import rocm
from imagecontract.numbers import ascii_int
from tests.test_preflight_simulated import manifest, rocm_host

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = settings(
    max_examples=300, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
NON_ASCII_DIGITS = "٠١٢٣٤٥٦٧٨٩０１２３４５６７８９²³¹߀०"


def _valid(text: str) -> bool:
    parts = text.strip(" \t").split(".")
    return len(parts) == 3 and all(0 < len(p) <= 3 and all("0" <= c <= "9" for c in p) for p in parts)


# generated overrides: digits of any script, separators, signs, underscores, spaces and very long runs
_chars = st.sampled_from(list("0123456789.._-+ \t\n") + list(NON_ASCII_DIGITS) + ["x", "\u00a0", "\u2009"])
OVERRIDES = st.one_of(
    st.text(_chars, min_size=1, max_size=20),
    st.builds(lambda n, sep: sep.join(["9"] * 2 + ["4" * n]), st.integers(4, 6000), st.sampled_from(["."])),
    st.builds(lambda a, b, c: f"{a}.{b}.{c}", *[st.text(st.sampled_from("94٤９２"), min_size=1, max_size=3)] * 3),
)


def _run(root: Path, manifest_path: Path, env: dict[str, str]) -> tuple[int, list[str]]:
    out = io.StringIO()
    code = preflight.run(env, root=root, manifest_path=manifest_path, out=out)
    return code, out.getvalue().splitlines()


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("host")
    root = rocm_host(tmp / "root", [90402], render_gid=0)  # a gfx942 GPU
    path = tmp / "manifest.json"
    path.write_text(json.dumps(manifest(["gfx90a"])))  # an image for gfx90a only
    return root, path


@SETTINGS
@given(value=OVERRIDES)
def test_an_override_that_is_not_ascii_major_minor_stepping_is_refused(host: tuple[Path, Path], value: str) -> None:
    root, path = host
    code, lines = _run(root, path, {"HSA_OVERRIDE_GFX_VERSION": value})
    assert code == preflight.EXIT_REFUSED, (value, lines)  # gfx942 on a gfx90a image: never a start
    if not _valid(value) and value.strip(" \t"):
        assert any("is not MAJOR.MINOR.STEPPING in ASCII digits" in line for line in lines), lines
    assert all(len(line) < 400 for line in lines), lines  # a 6,000-digit value is not echoed whole


def test_the_issues_examples(host: tuple[Path, Path]) -> None:
    root, path = host
    for value in ("٩.٠.١٠", "９.０.１０", "9.0." + "1" * 5000, "9.0.1_0", "+9.0.10", "9.0.10\n"):
        code, lines = _run(root, path, {"HSA_OVERRIDE_GFX_VERSION": value})
        assert code == 78 and lines[-1].startswith("preflight: the server was not started"), (value, lines)
    code, lines = _run(root, path, {"HSA_OVERRIDE_GFX_VERSION": "9.0.10"})  # ASCII: believed, same family, warns
    assert code == 0 and any("not supported by AMD" in line for line in lines), lines


@pytest.mark.parametrize("value", ["٩٠٤٠٢", "0x16172", "9_04_02", "9" * 5000, "90402 junk"])
def test_a_sysfs_number_that_is_not_ascii_decimal_is_a_gpu_that_cannot_be_checked(tmp_path: Path, value: str) -> None:
    root = rocm_host(tmp_path / "root", [90402], render_gid=0)
    props = root / "sys/class/kfd/kfd/topology/nodes/1/properties"
    props.write_text(props.read_text().replace("gfx_target_version 90402", f"gfx_target_version {value}"))
    gpus = rocm_gpus(root)
    assert [g.arch for g in gpus] == [None] and "gfx_target_version" in gpus[0].name and len(gpus[0].name) < 200
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest(["gfx942"])))
    code, lines = _run(root, path, {})
    assert code == 78 and any("cannot be read" in line for line in lines), lines


@pytest.mark.parametrize("value", ["²", "٠", "0,²", "1" * 5000])
def test_visible_devices_that_are_not_ascii_indices_are_left_to_the_runtime(tmp_path: Path, value: str) -> None:
    root = rocm_host(tmp_path / "root", [90402, 90402], render_gid=0)
    gpus = rocm_gpus(root)
    hip = rocm.VISIBLE_VARIABLES
    assert visible(gpus, {"HIP_VISIBLE_DEVICES": value}, hip) == gpus  # was: ValueError from int("²")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder", "not-json", "list"])
def test_an_unreadable_manifest_is_a_refusal_not_a_start(tmp_path: Path, kind: str) -> None:
    import os

    root = rocm_host(tmp_path / "root", [90402], render_gid=0)
    path = tmp_path / "manifest.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    else:
        path.write_text("{not json" if kind == "not-json" else "[]")
    code, lines = _run(root, path, {})
    assert code == 78 and any("cannot decide" in line for line in lines), lines
    code, _ = _run(root, tmp_path / "absent.json", {})
    assert code == 0  # no manifest: not an imagebuild image, nothing promised


def test_the_entrypoint_never_starts_the_server_when_the_check_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("ep21", ROOT / "image/tunableop/tunableop_entrypoint.py")
    assert spec and spec.loader
    ep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ep)

    def broken(env: dict[str, str]) -> int:
        raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")

    monkeypatch.setattr(ep.preflight, "run", broken)
    execs: list[list[str]] = []
    monkeypatch.setattr(ep.os, "execvp", lambda prog, argv: execs.append(argv))
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    assert ep.main(["entrypoint", "--", "server"]) == 78
    assert execs == [] and "preflight: refused: the check could not decide (ValueError" in err.getvalue()


@SETTINGS
@given(text=st.text(st.sampled_from(list("0123456789_ +-x\n\t") + list(NON_ASCII_DIGITS)), max_size=30))
def test_ascii_int_takes_only_ascii_digits(text: str) -> None:
    core = text.strip(" \t\r\n")
    expected = int(core) if core and len(core) <= 19 and all("0" <= c <= "9" for c in core) else None
    assert ascii_int(text) == expected
