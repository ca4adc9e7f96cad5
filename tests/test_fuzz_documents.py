"""Fuzzing the other parsers of untrusted bytes (issue 12): TunableOp CSVs, shapes files, and the JSON documents
(smoke reports, baselines, manifests, kernels reports) that cross the host/image seam.

Generated and mutated inputs; each must finish within the deadline with a result or the parser's own error
class (MalformedFile/ConfigError, ModelError, ManifestError), never another exception, and an error is one short
line. Derandomized (the seed is the test's name), so a failure reproduces; hypothesis prints the failing input.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagebuild.errors import ConfigError
from imagebuild.release.publish import find_passing_report, report_refusal
from imagebuild.tunableop import results as top
from imagebuild.tunableop.shapes import parse_shapes
from imagecontract.models import KernelsReport, Manifest, ModelError, SmokeReport
from smoke import baseline
from smoke.manifest import ManifestError, load_json

REPO = Path(__file__).resolve().parents[1]
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=1000,  # ms per input: a hang or a runaway loop fails here
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
MAX_LINE = 400  # an error quotes a short excerpt of its input, never the input


def _one_short_line(exc: BaseException) -> None:
    text = str(exc)
    assert text and "\n" not in text and len(text) < MAX_LINE, text[:200]


# --- TunableOp results files ------------------------------------------------------------------------------

CSV_SEEDS = [p.read_text(encoding="utf-8") for p in sorted((REPO / "tests/data/tunableop").glob("*.csv"))]
_SHARED = REPO.parent / "shared/data/tunableop_h200_torch2.11.csv"
if _SHARED.is_file():
    CSV_SEEDS.append(_SHARED.read_text(encoding="utf-8"))
CSV_PIECES = [",", "\n", "\r", "\r\n", "\f", "\u2028", "\x00", "Validator,", "PT_VERSION", "_ld_", "_B_", "_rw_1"]
CSV_PIECES += ["tn_", "nt_", "GemmTunableOp_Half_TN,", "9" * 5000, "1e999", "nan", "-1", "\u0663", "x" * 3000]


@st.composite
def mutated_csv(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(CSV_SEEDS))
    for _ in range(draw(st.integers(1, 5))):
        at = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["insert", "delete", "replace-field"]))
        piece = draw(st.one_of(st.sampled_from(CSV_PIECES), st.text(max_size=8)))
        if action == "insert":
            text = text[:at] + piece + text[at:]
        elif action == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 30)) :]
        else:
            start = max(text.rfind(",", 0, at), text.rfind("\n", 0, at)) + 1
            ends = [e for e in (text.find(",", at), text.find("\n", at)) if e >= 0]
            text = text[:start] + piece + text[min(ends) if ends else len(text) :]
    return text


@st.composite
def generated_csv(draw: st.DrawFn) -> str:
    """Lines built from the grammar's parts: validators, ops, params with every optional suffix, times."""
    lines = []
    for _ in range(draw(st.integers(0, 8))):
        if draw(st.booleans()):
            key = draw(st.sampled_from([*top.KNOWN_VALIDATORS, "", "X"]))
            lines.append(f"Validator,{key},{draw(st.sampled_from(['2.11.0', '', 'gfx942', ',']))}")
            continue
        layout = draw(st.sampled_from(["tn", "nt", "TT", "nn", "xx"]))
        sizes = ["0", "1", "7", "8192", "9" * 30, "9" * 4400, "\u0663"]  # int() of 4,300+ digits raises
        nums = "_".join(draw(st.sampled_from(sizes)) for _ in range(3))
        suffix = "".join(draw(st.lists(st.sampled_from(["_B_4", "_ld_1_2_3", "_rw_0", "_bias_Half", "_"]))))
        op = f"GemmTunableOp_{draw(st.sampled_from(['Half', 'BFloat16', '']))}_{layout.upper()}"
        time = draw(st.sampled_from(["", ",0.5", ",nan", ",inf", ",-1", ",1e999", ",x", ",0.1,extra"]))
        lines.append(f"{op},{layout}_{nums}{suffix},Gemm_Rocblas_1{time}")
    return "\n".join(lines) + draw(st.sampled_from(["", "\n", "\r\n"]))


def _parse_csv(text: str) -> None:
    try:
        parsed = top.parse_text(text, "fuzz.csv")
    except ConfigError as exc:
        _one_short_line(exc)
        return
    assert top.parse_text(top.render(parsed), "again.csv").validators == parsed.validators  # renders what parses


@settings(FUZZ, max_examples=600)
@given(mutated_csv())
def test_tunableop_parser_on_mutated_files(text: str) -> None:
    _parse_csv(text)


@settings(FUZZ, max_examples=300)
@given(generated_csv())
def test_tunableop_parser_on_generated_files(text: str) -> None:
    _parse_csv(text)


@settings(FUZZ, max_examples=100)
@given(st.binary(max_size=512))
def test_tunableop_load_on_binary_files(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "results.csv"
    path.write_bytes(data)
    try:
        top.load(path)
    except ConfigError as exc:
        _one_short_line(exc)


SHAPES = (REPO / "tests/data/tunableop/shapes_llama70b.txt").read_text(encoding="utf-8")


@settings(FUZZ, max_examples=300)
@given(st.lists(st.tuples(st.integers(0, len(SHAPES)), st.sampled_from(["=", ",", "9" * 5000, "x", "#", "\n"]))))
def test_shapes_parser_on_mutated_files(edits: list[tuple[int, str]]) -> None:
    text = SHAPES
    for at, piece in edits:
        text = text[:at] + piece + text[at:]
    try:
        parse_shapes(text, "fuzz.txt")
    except ConfigError as exc:
        _one_short_line(exc)


# --- JSON documents: smoke reports, baselines, manifests, kernels reports ---------------------------------

IMAGE = "sha256:" + "a" * 64
REPORT: dict[str, Any] = {
    "schema_version": 1,
    "image_id": IMAGE,
    "passed": True,
    "exit_code": 0,
    "checks": [
        {"name": "environment", "status": "passed"},
        {"name": "gemm", "status": "passed", "metrics": {"throughput": {"tflops": 12.5}}},
        {"name": "runtime", "status": "skipped"},
    ],
}
MANIFEST: dict[str, Any] = json.loads((REPO / "dockerfiles/cuda12.1-torch2.3/manifest.json").read_text())
KERNELS: dict[str, Any] = {"library": "/x.so", "requested": ["gfx942"], "code_objects": ["gfx942"], "ptx": []}
MODELS = [(SmokeReport, REPORT), (Manifest, MANIFEST), (KernelsReport, KERNELS)]


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


HOSTILE: list[Any] = [None, True, False, 0, -1, 1.5, "", "x" * 100_000, [], {}, {"": 1}, [None] * 3]
HOSTILE += [10**400, -(10**400), float("nan"), float("inf"), -float("inf"), 1e308, _deep(50), "\x00\u2028"]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _paths(item, (*prefix, i))
    return found


@st.composite
def mutated_document(draw: st.DrawFn) -> tuple[type, Any]:
    model, seed = draw(st.sampled_from(MODELS))
    doc: Any = json.loads(json.dumps(seed))
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(_paths(doc)))
        new = copy.deepcopy(draw(st.sampled_from(HOSTILE)))  # never the same list twice: no cycles
        if not path:
            doc = new
            continue
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "delete", "add-key"]))
        if action == "replace" or (action == "delete" and isinstance(parent, list)):
            parent[path[-1]] = new
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["extra", "passed", "checks", "name"]))] = new
    return model, doc


@settings(FUZZ, max_examples=800)
@given(mutated_document())
def test_models_on_mutated_documents(case: tuple[type, Any]) -> None:
    model, doc = case
    try:
        parsed = model.from_dict(doc)
    except ModelError as exc:
        _one_short_line(exc)
        return
    assert model.from_dict(json.loads(json.dumps(parsed.to_dict()))) == parsed or _has_nan(parsed.to_dict())
    if isinstance(parsed, SmokeReport):
        refusal = parsed.refusal()
        assert refusal is None or isinstance(refusal, str)
    refused = report_refusal(doc, IMAGE)
    assert refused is None or len(refused) < MAX_LINE


def _has_nan(value: Any) -> bool:
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, dict):
        return any(_has_nan(v) for v in value.values())
    return isinstance(value, list) and any(_has_nan(v) for v in value)


JSON_PIECES = [b"\xff", b"\x00", b"[" * 5000, b"{", b'"', b"9" * 5000, b"NaN", b"-Infinity", b"1e999", b"\\ud800"]


@st.composite
def mutated_json_bytes(draw: st.DrawFn) -> bytes:
    data = json.dumps(REPORT, indent=1).encode()
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = draw(st.one_of(st.sampled_from(JSON_PIECES), st.binary(max_size=8)))
        if action == "insert":
            data = data[:at] + piece + data[at:]
        elif action == "delete":
            data = data[:at] + data[at + draw(st.integers(1, 20)) :]
        else:
            data = data[:at] + piece + data[at + len(piece) :]
    return data


@settings(FUZZ, max_examples=400)
@given(mutated_json_bytes())
def test_baseline_and_report_loaders_on_mutated_bytes(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "report.json"
    path.write_bytes(data)
    for read in (lambda: load_json(str(path), "report"), lambda: baseline.load(str(path))):
        try:
            read()
        except ManifestError as exc:
            _one_short_line(exc)
    assert find_passing_report(IMAGE, [path]) in (None, path)
