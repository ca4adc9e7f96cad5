"""TunableOp results files: parsing, decoding, validator checks and merging, through the module and the CLI."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagebuild.cli import main
from imagebuild.errors import CheckFailed, ConfigError
from imagebuild.tunableop import results as top
from imagebuild.tunableop import shapes as ts

DATA = Path(__file__).parent / "data" / "tunableop"
SHARED_SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tunableop_h200_torch2.11.csv"
ROCM0, ROCM1 = DATA / "rocm_gfx942_dev0.csv", DATA / "rocm_gfx942_dev1.csv"
ROCM_HIP = DATA / "rocm_hip_ld.csv"
CUDA = DATA / "cuda_h200_torch2.11.csv"
ROCM_EXPECT = [
    "PT_VERSION=2.3.0",
    "ROCM_VERSION=6.1.0.0-82-5fabb4c",
    "HIPBLASLT_VERSION=0.7.0-1549b021",
    "ROCBLAS_VERSION=4.1.0-a11b9ab4",
    "GCN_ARCH_NAME=gfx942:sramecc+:xnack-",
]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["tunableop", *args])
    return result.exit_code, result.stdout, result.stderr


def expect_args(items: list[str]) -> list[str]:
    return [a for item in items for a in ("--expect", item)]


# --- parse and decode ---------------------------------------------------------------------------------


def test_rocm_file_has_five_validators_and_old_signatures_decoded_as_linear_terms() -> None:
    f = top.load(ROCM0)
    assert list(f.validators) == ["PT_VERSION", "ROCM_VERSION", "HIPBLASLT_VERSION", "ROCBLAS_VERSION", "GCN_ARCH_NAME"]
    assert f.validators["GCN_ARCH_NAME"] == "gfx942:sramecc+:xnack-"
    row = next(r for r in f.rows if r.params == "tn_8192_7_28672")
    # tn_N_M_K: m is out features, n tokens, k in features
    assert (row.shape.tokens, row.shape.in_features, row.shape.out_features) == (7, 28672, 8192)
    assert (row.family, row.dtype, row.shape.layout, row.solution) == (
        "GemmTunableOp",
        "Half",
        "tn",
        "Gemm_Rocblas_45475",
    )
    assert row.time_ms == pytest.approx(0.0902)
    assert row.shape.ld is None


def test_row_without_time_is_valid() -> None:
    row = next(r for r in top.load(ROCM0).rows if r.params == "tn_57344_2_8192")
    assert row.time_ms is None and row.solution == "Default"


def test_newer_signatures_with_ld_batch_and_scaled_gemm() -> None:
    rows = {r.family: r for r in top.load(ROCM_HIP).rows}
    gemm = next(r for r in top.load(ROCM_HIP).rows if r.params.startswith("tn_8192_1_28672"))
    assert gemm.shape.ld == (28672, 28672, 8192) and gemm.shape.tokens == 1 and gemm.dtype == "BFloat16"
    batched = rows["GemmStridedBatchedTunableOp"]
    assert (batched.shape.batch, batched.shape.layout, batched.shape.in_features) == (32, "nt", 64)
    scaled = rows["ScaledGemmTunableOp"]
    assert scaled.dtype == "Float8_e4m3fnuz_Float8_e4m3fnuz_BFloat16"
    assert (scaled.shape.rowwise, scaled.shape.bias, scaled.shape.tokens) == (False, "None", 8)
    assert top.load(ROCM_HIP).validators["HIP_VERSION"] == "60342134"


def test_cuda_sample_from_torch_2_11_parses() -> None:
    f = top.load(CUDA)
    assert f.validators == {"PT_VERSION": "2.11.0"}
    assert len(f.rows) == 20 and {r.solution for r in f.rows} == {"Default"}
    assert f.rows[0].shape.as_dict()["out_features"] == 8192


def test_fixture_copy_equals_the_shared_sample() -> None:
    if not SHARED_SAMPLE.exists():
        pytest.skip(f"{SHARED_SAMPLE} is not present on this machine (the copy under tests/data is used)")
    assert CUDA.read_bytes() == SHARED_SAMPLE.read_bytes()


def test_render_round_trips() -> None:
    for path in (ROCM0, ROCM_HIP, CUDA):
        first = top.load(path)
        again = top.parse_text(top.render(first), "again")
        assert again.validators == first.validators
        assert [(r.op, r.params, r.solution, r.time_text) for r in again.rows] == [
            (r.op, r.params, r.solution, r.time_text) for r in first.rows
        ]


@pytest.mark.parametrize(
    ("name", "line", "words"),
    [
        ("malformed_fields.csv", 2, "3 or 4 fields"),
        ("malformed_params.csv", 3, "cannot decode params"),
        ("malformed_time.csv", 2, "not a number"),
        ("malformed_validator.csv", 1, "Validator,KEY,VALUE"),
        ("malformed_duplicate.csv", 3, "appears twice"),
        ("malformed_layout.csv", 2, "differs from op layout"),
        ("malformed_garbage.csv", 2, "3 or 4 fields"),
    ],
)
def test_malformed_files_exit_2_naming_the_line(name: str, line: int, words: str) -> None:
    with pytest.raises(top.MalformedFile, match=words) as err:
        top.load(DATA / name)
    assert f"{name}:{line}:" in str(err.value)
    code, out, errout = run("inspect", str(DATA / name))
    assert code == 2
    assert errout.startswith("error: ") and f"{name}:{line}:" in errout and "Traceback" not in errout


def test_file_without_pt_version_is_malformed() -> None:
    code, _, errout = run("inspect", str(DATA / "malformed_no_pt_version.csv"))
    assert code == 2 and "PT_VERSION" in errout


def test_missing_file_is_a_usage_error() -> None:
    code, _, errout = run("inspect", str(DATA / "nope.csv"))
    assert code == 2 and "no such file" in errout


def test_inspect_text_and_json() -> None:
    code, out, _ = run("inspect", str(ROCM0), str(CUDA))
    assert code == 0
    assert "validator GCN_ARCH_NAME = gfx942:sramecc+:xnack-" in out
    line = next(x for x in out.splitlines() if "Gemm_Rocblas_45475" in x).split()
    assert line == ["GemmTunableOp", "Half", "tn", "7", "28672", "8192", "Gemm_Rocblas_45475", "0.0902"]
    assert next(x for x in out.splitlines() if "tn" in x and "57344" in x).split()[-1] == "-"
    code, out, _ = run("inspect", "--json", str(ROCM0), str(CUDA))
    doc = json.loads(out)
    assert [f["file"] for f in doc["files"]] == [str(ROCM0), str(CUDA)]
    row = doc["files"][0]["rows"][1]
    assert row["shape"]["tokens"] == 7 and row["time_ms"] == pytest.approx(0.0902)
    assert doc["files"][0]["rows"][3]["time_ms"] is None


# --- check ----------------------------------------------------------------------------------------------


def test_check_passes_when_every_expected_value_matches() -> None:
    code, out, _ = run("check", str(ROCM0), *expect_args(ROCM_EXPECT))
    assert code == 0 and out.count("ok ") == 5


def test_check_lists_every_mismatching_and_missing_key() -> None:
    code, out, errout = run(
        "check",
        str(ROCM_HIP),
        *expect_args(["PT_VERSION=2.3.0", "ROCM_VERSION=6.1.0.0-82-5fabb4c", "GCN_ARCH_NAME=gfx942"]),
    )
    assert code == 1
    assert "PT_VERSION: file has '2.6.0', expected '2.3.0'" in out
    assert "ROCM_VERSION: missing from the file" in out
    assert "different features: torch compares the full target ID" in out
    assert all(k in errout for k in ("PT_VERSION", "ROCM_VERSION", "GCN_ARCH_NAME"))


def test_check_pt_version_compares_what_torch_writes() -> None:
    # torch writes TORCH_VERSION (MAJOR.MINOR.PATCH): a torch.__version__ with a local suffix is the same
    assert run("check", str(CUDA), "--expect", "PT_VERSION=2.11.0+cu130")[0] == 0
    assert run("check", str(CUDA), "--expect", "PT_VERSION=2.11.1")[0] == 1


def test_check_unknown_key_suggests_the_closest() -> None:
    code, _, errout = run("check", str(CUDA), "--expect", "PT_VERSON=2.11.0")
    assert code == 2 and "Perhaps you meant PT_VERSION?" in errout


def test_check_needs_image_or_expect() -> None:
    assert run("check", str(CUDA))[0] == 2


def test_check_with_complete_key_set_reports_extra_keys() -> None:
    cuda_torch = top.Expected(values={"PT_VERSION": "2.3.0"}, complete=True, source="a CUDA torch")
    rep = top.check_validators(top.load(ROCM0), cuda_torch)
    assert rep.matched == ["PT_VERSION"] and not rep.ok
    assert rep.extra == ["ROCM_VERSION", "HIPBLASLT_VERSION", "ROCBLAS_VERSION", "GCN_ARCH_NAME"]


def test_check_undetermined_keys_are_reported_not_passed() -> None:
    rocm_no_gpu = top.Expected(
        values={"PT_VERSION": "2.3.0"}, complete=False, source="no GPU", undetermined=["GCN_ARCH_NAME"]
    )
    rep = top.check_validators(top.load(ROCM0), rocm_no_gpu)
    assert not rep.ok and rep.undetermined == ["GCN_ARCH_NAME"]
    assert "GCN_ARCH_NAME: could not be determined from no GPU" in rep.problems()


# --- merge ----------------------------------------------------------------------------------------------


def test_merge_keeps_the_fastest_per_op_and_params(tmp_path: Path) -> None:
    out = tmp_path / "merged.csv"
    code, stdout, _ = run("merge", "--out", str(out), str(ROCM0), str(ROCM1))
    assert code == 0 and "5 result(s) from 8 in 2 file(s)" in stdout
    merged = top.load(out)
    assert merged.validators == top.load(ROCM0).validators
    best = {r.params: (r.solution, r.time_text) for r in merged.rows}
    assert best == {
        "tn_8192_1_28672": ("Gemm_Rocblas_45470", "0.0799"),  # dev1 faster
        "tn_8192_7_28672": ("Gemm_Rocblas_45475", "0.0902"),  # dev0 faster
        "tn_10240_4_8192": ("Gemm_Hipblaslt_TN_8871", "0.0372"),  # dev0 only
        "tn_57344_2_8192": ("Gemm_Hipblaslt_TN_12001", "0.1677"),  # a timed row beats one without time
        "tn_32000_1_8192": ("Gemm_Hipblaslt_TN_9011", "0.1003"),  # dev1 only
    }
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~_umask()


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def test_merge_with_differing_validators_exits_1_naming_them_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "merged.csv"
    out.write_text("previous\n")
    code, _, errout = run("merge", "--out", str(out), str(ROCM0), str(DATA / "rocm_gfx90a_dev0.csv"))
    assert code == 1
    assert "rocm_gfx942_dev0.csv" in errout and "rocm_gfx90a_dev0.csv" in errout and "GCN_ARCH_NAME" in errout
    assert out.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["merged.csv"]  # no temp file left behind


def test_merge_module_raises_typed_errors() -> None:
    with pytest.raises(CheckFailed):
        top.merge([top.load(ROCM0), top.load(CUDA)])
    with pytest.raises(ConfigError):
        top.merge([])


def test_merge_malformed_input_exits_2(tmp_path: Path) -> None:
    code, _, errout = run("merge", "--out", str(tmp_path / "m.csv"), str(CUDA), str(DATA / "malformed_time.csv"))
    assert code == 2 and "malformed_time.csv:2:" in errout and not (tmp_path / "m.csv").exists()


# --- shapes ---------------------------------------------------------------------------------------------


def test_shapes_file_expands_to_gemms() -> None:
    gemms = ts.parse_shapes((DATA / "shapes_llama70b.txt").read_text())
    assert len(gemms) == 20
    assert gemms[0] == {"tokens": 1, "in_features": 28672, "out_features": 8192, "dtype": "float16"}
    assert json.loads(ts.shapes_json(gemms))["gemms"][3]["tokens"] == 7


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("out=1 in=2\n", "missing tokens="),
        ("out=1 in=2 tokens=1 dtype=int8\n", "unknown dtype"),
        ("out=1 in=x tokens=1\n", "integers"),
        ("out=1 in=2 tokens=0\n", "positive"),
        ("out=1 in=2 tokens=1 batch=3\n", "bad field"),
        ("# only a comment\n", "no shapes"),
    ],
)
def test_bad_shapes_are_malformed(text: str, words: str) -> None:
    with pytest.raises(top.MalformedFile, match=words):
        ts.parse_shapes(text, "s.txt")


def test_tune_rejects_a_bad_shapes_file_before_touching_the_engine(tmp_path: Path) -> None:
    bad = tmp_path / "shapes.txt"
    bad.write_text("out=8192 in=28672\n")
    code, _, errout = run("tune", "imagebuild-test/tunableop:any", "--shapes", str(bad))
    assert code == 2 and "shapes.txt:1: missing tokens=" in errout
