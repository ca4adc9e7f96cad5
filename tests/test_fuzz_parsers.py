"""Fuzzing the parsers of untrusted bytes (issue 12): the code-object reader and the matrix loader.

Thousands of generated and mutated inputs; each must finish within the deadline with a result or the parser's
own error class (VerifyError, ConfigError), never another exception. Derandomized: the same inputs every run
(the seed is the test's name), so a failure reproduces; hypothesis prints the failing input.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagebuild.errors import ConfigError
from imagebuild.matrix import load_text
from imagecontract import codeobjects as co
from imagecontract import verify as kv
from tests.test_kernel_verify import ccob, elf_with, fatbin, offload_bundle

REPO = Path(__file__).resolve().parents[1]
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=1000,  # ms per input: a hang or a runaway loop fails here
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- the code-object reader -------------------------------------------------------------------------------

HIP = ["host-x86_64-unknown-linux--", "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+", "hipv4-amdgcn-amd-amdhsa--gfx942"]


def _ccob_v3(bundle: bytes) -> bytes:
    data = zlib.compress(bundle)
    return b"CCOB" + struct.pack("<HHQQQ", 3, 0, 32 + len(data), len(bundle), 0) + data


SEEDS = [
    elf_with({".hip_fatbin": offload_bundle(HIP)}),
    elf_with({".hip_fatbin": ccob(offload_bundle(HIP))}),
    elf_with({".nv_fatbin": fatbin([(2, 80, False), (1, 90, False), (2, 90, True)])}),
    offload_bundle(HIP),
    _ccob_v3(offload_bundle(HIP)),
    fatbin([(2, 90, False), (1, 90, False)]),
]
INTERESTING = [0, 1, 15, 16, 24, 47, 48, 64, 0x7FFF, 0xFFFF, 1 << 31, (1 << 32) - 1, 1 << 60, (1 << 63), (1 << 64) - 1]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 6))):
        action = draw(st.sampled_from(["bytes", "int", "truncate", "append", "magic"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if action == "bytes":
            data[at : at + 8] = draw(st.binary(min_size=1, max_size=8))
        elif action == "int":
            fmt = draw(st.sampled_from(["<H", "<I", "<Q"]))
            value = draw(st.sampled_from(INTERESTING)) & ((1 << (8 * struct.calcsize(fmt))) - 1)
            data[at : at + struct.calcsize(fmt)] = struct.pack(fmt, value)
        elif action == "truncate":
            del data[at:]
        elif action == "append":
            data += draw(st.binary(max_size=64))
        else:  # plant a magic where a parser may go looking for one
            data[at:at] = draw(st.sampled_from([co.BUNDLE_MAGIC, co.CCOB_MAGIC, struct.pack("<I", co.FATBIN_MAGIC)]))
    return bytes(data)


def _read(data: bytes) -> None:
    try:
        listing = co.list_blob(Path("fuzz.so"), co.Blob(data, len(data)))
    except co.VerifyError as exc:
        assert str(exc) and len(str(exc)) < 400  # one short line, never the input itself
        return
    assert isinstance(listing, co.Listing)
    kv.compare(listing, kv.parse_arch_list("gfx942;9.0+PTX"))


@settings(FUZZ, max_examples=2000)
@given(mutated())
def test_code_object_reader_on_mutated_containers(data: bytes) -> None:
    _read(data)


@settings(FUZZ, max_examples=500)
@given(st.one_of(st.binary(max_size=256), st.builds(lambda tail: b"\x7fELF\x02\x01" + tail, st.binary(max_size=256))))
def test_code_object_reader_on_random_bytes(data: bytes) -> None:
    _read(data)


@settings(FUZZ, max_examples=300)
@given(st.text(max_size=40))
def test_arch_list_parser(text: str) -> None:
    try:
        kv.parse_arch_list(text)
    except co.VerifyError:
        pass


# --- the matrix loader ------------------------------------------------------------------------------------

MATRIX = (REPO / "matrix.yaml").read_text()
YAML_PIECES = [
    *["&a ", "*a", "<<: ", "[", "]", "{", "}", ": ", "- ", "\n", "  ", "#", "'", '"', "~", "\t", "0x", "1e999"],
    *["!!str ", "!!binary ", "!!python/object:os.system ", "2020-13-45", "\x00", "\x07", "\u2028", "&b [*a, *a]"],
]


@st.composite
def mutated_matrix(draw: st.DrawFn) -> str:
    text = MATRIX
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["insert", "delete", "replace-line"]))
        piece = draw(st.one_of(st.sampled_from(YAML_PIECES), st.text(max_size=6)))
        if action == "insert":
            text = text[:at] + piece + text[at:]
        elif action == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 40)) :]
        else:
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            text = text[:start] + piece + text[end if end >= 0 else len(text) :]
    return text


@st.composite
def hostile_yaml(draw: st.DrawFn) -> str:
    """Small documents built from anchors, aliases, merges and nesting: the structures that blow up."""
    lines = []
    for i in range(draw(st.integers(1, 12))):
        refs = [f"*a{draw(st.integers(0, i))}" for _ in range(draw(st.integers(0, 12)))]  # may name an undefined one
        kind = draw(st.sampled_from(["seq", "map", "merge", "nest"]))
        if kind == "seq":
            body = "[" + ", ".join(refs or ["1"]) + "]"
        elif kind == "map":
            body = "{" + ", ".join(f"k{j}: {r}" for j, r in enumerate(refs)) + "}"
        elif kind == "merge":
            body = "{<<: [" + ", ".join(refs) + "], k: v}" if refs else "{<<: {}}"
        else:
            depth = draw(st.integers(1, 120))
            body = "[" * depth + (refs[0] if refs else "x") + "]" * depth
        lines.append(f"a{i}: &a{i} {body}")
    return "\n".join(lines) + "\n"


def _load(text: str) -> None:
    try:
        load_text(text, Path("matrix.yaml"))
    except ConfigError as exc:
        assert str(exc).startswith("matrix.yaml") and len(str(exc).splitlines()) == 1


@settings(FUZZ, max_examples=400)
@given(mutated_matrix())
def test_matrix_loader_on_mutated_matrices(text: str) -> None:
    _load(text)


@settings(FUZZ, max_examples=600)
@given(hostile_yaml())
def test_matrix_loader_on_alias_and_nesting_structures(text: str) -> None:
    _load(text)
