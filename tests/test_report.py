"""`imagebuild report`: rows from the matrix and the evidence under build/, the GPU lookup, history, the page.

Evidence here is written the way the real writers lay it out (build report, smoke reports that fit SmokeReport,
arch-coverage documents that fit ArchCoverage, publish reports with signing.json); the ROCm and CUDA smoke
reports are made up (no AMD GPU here), the local-cpu one is the real report of bench/results/smoke_local_cpu.json.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from imagebuild.matrix import load_matrix
from imagebuild.report import lookup
from imagebuild.report.html import render
from imagebuild.report.model import NOT_RUN
from imagebuild.report.page import make_page
from imagecontract.models import ArchCoverage, SmokeReport

REPO = Path(__file__).resolve().parents[1]
LOCAL_ID = "sha256:" + "a" * 64
ARM_ID = "sha256:" + "b" * 64
ROCM_ID = "sha256:" + "c" * 64
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _write(path: Path, doc: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return path


def real_cpu_report(image_id: str) -> dict:
    """bench/results/smoke_local_cpu.json: a real local-cpu smoke report (runtime passed, 155 tokens/s)."""
    doc = json.loads((REPO / "bench/results/smoke_local_cpu.json").read_text(encoding="utf-8"))
    doc["image_id"] = image_id
    SmokeReport.from_dict(doc)
    return doc


def failed(doc: dict, check: str, reason: str) -> dict:
    doc = json.loads(json.dumps(doc))
    doc["passed"] = False
    doc["exit_code"] = 4
    for c in doc["checks"]:
        if c["name"] == check:
            c["status"], c["reason"] = "failed", reason
    return doc


def build_report(root: Path, entries: dict[str, tuple[bool, str]], keep: bool = False) -> None:
    """build/build-report.json with these (ok, image ID) entries; keep: also the ones already there."""
    path = root / "build/build-report.json"
    old = json.loads(path.read_text())["targets"] if keep and path.is_file() else []
    targets = [t for t in old if t["target"] not in entries] + [
        {
            "target": name,
            "ok": ok,
            "image_id": image_id,
            "tags": [f"imagebuild:{name}"],
            "duration_s": 1.0,
            "failed_step": None if ok else "[final 3/9] RUN pip install",
            "coverage": None,
        }
        for name, (ok, image_id) in entries.items()
    ]
    doc = {"schema_version": 1, "created": "2026-12-01T10:00:00+00:00", "ok": True, "targets": targets}
    _write(path, doc)


def rocm_evidence(root: Path, smoke_passed: bool = True) -> None:
    """A gfx942 smoke of the ROCm image (AMD GPUs mocked: made-up report) and its arch coverage."""
    build_report(root, {"rocm6.1-torch2.3": (True, ROCM_ID)}, keep=True)
    report = {
        "schema_version": 1,
        "passed": smoke_passed,
        "image_id": ROCM_ID,
        "device": "cuda",
        "arch": "gfx942:sramecc+:xnack-",
        "gpu_name": "AMD Instinct MI300X",
        "checks": [
            {"name": "environment", "status": "passed"},
            {
                "name": "attention",
                "status": "passed" if smoke_passed else "failed",
                "reason": None if smoke_passed else "flash attention fell back to math",
                "numbers": {"backends_expected": ["flash", "math"], "sdpa_flash": {}, "sdpa_math": {}},
            },
            {"name": "tunableop", "status": "passed"},
        ],
    }
    _write(root / "build/smoke/rocm6.1-torch2.3/report.json", report)
    coverage = {
        "schema_version": 1,
        "target": "rocm6.1-torch2.3",
        "requested": ["gfx90a", "gfx942"],
        "libraries": [
            {
                "path": "/usr/lib/python3/dist-packages/vllm/_C.abi3.so",
                "kind": "library",
                "files": 1,
                "owner": "python:vllm",
                "component": "vllm-rocm",
                "code_objects": ["gfx90a", "gfx942"],
                "ptx": [],
                "arches": {"gfx90a": "present", "gfx942": "present"},
            },
            {
                "path": "/opt/rocm/lib/librocsparse.so.1",
                "kind": "library",
                "files": 1,
                "owner": "dpkg:rocsparse",
                "component": None,
                "code_objects": ["gfx90a"],
                "ptx": [],
                "arches": {"gfx90a": "present", "gfx942": "absent"},
            },
        ],
        "gaps": [
            {
                "library": "/opt/rocm/lib/librocsparse.so.1",
                "arch": "gfx942",
                "allowed": True,
                "why": "not governed by the matrix: reported",
            }
        ],
        "ok": True,
        "scan": {"files_seen": 10, "files_read": 2, "seconds": None},
    }
    ArchCoverage.from_dict(coverage)
    _write(root / "build/coverage/rocm6.1-torch2.3.json", coverage)


def cpu_evidence(root: Path, amd64_failed: bool = False, published: bool = False) -> None:
    build_report(root, {"local-cpu": (True, LOCAL_ID), "local-cpu-linux-arm64": (True, ARM_ID)})
    doc = real_cpu_report(LOCAL_ID)
    _write(
        root / "build/smoke/local-cpu/report.json", failed(doc, "runtime", "server exited 1") if amd64_failed else doc
    )
    _write(root / "build/smoke/local-cpu/linux-arm64/report.json", real_cpu_report(ARM_ID))
    if published:
        pub = root / "build/publish/local-cpu/linux-amd64/publish-report.json"
        _write(
            pub,
            {
                "schema_version": 1,
                "image": "local-cpu",
                "image_id": LOCAL_ID,
                "repository": "127.0.0.1:5000/imagebuild",
                "ok": True,
                "digest": "sha256:" + "d" * 64,
                "refs": [],
                "created": "2026-12-01T11:00:00+00:00",
            },
        )
        _write(
            pub.with_name("signing.json"),
            {
                "digest": "sha256:" + "d" * 64,
                "signed_by": "key build/keys/cosign.key",
                "attached": ["signature", "sbom", "provenance", "smoke cpu"],
            },
        )
        _write(
            root / "build/publish/local-cpu/publish-report.json",
            {
                "schema_version": 1,
                "ok": True,
                "digest": "sha256:" + "e" * 64,
                "refs": ["127.0.0.1:5000/imagebuild:local-cpu"],
                "platforms": {"linux/amd64": "sha256:" + "d" * 64, "linux/arm64": "sha256:" + "f" * 64},
            },
        )


def page_for(root: Path, **kwargs):
    matrix = load_matrix(REPO / "matrix.yaml")
    kwargs.setdefault("bench_dir", root / "no-bench")
    return make_page(matrix, root, now=NOW, **kwargs)


def row(page, target: str, oci: str = "linux/amd64", arch: str | None = None):
    found = [r for r in page.rows if r.target == target and r.oci == oci and (arch is None or r.arch == arch)]
    assert len(found) == 1, [r.id for r in page.rows]
    return found[0]


def test_no_evidence_every_row_is_not_run(tmp_path: Path) -> None:
    page = page_for(tmp_path)
    ids = {r.id for r in page.rows}
    assert {"rocm6.1-torch2.3|linux/amd64|gfx90a", "rocm6.1-torch2.3|linux/amd64|gfx942"} <= ids
    assert {"cuda12.1-torch2.3|linux/amd64|sm_80", "local-cpu|linux/arm64|cpu"} <= ids
    for r in page.rows:
        assert (r.verdict, r.build, r.smoke.status, r.coverage.status) == (NOT_RUN,) * 4
        assert r.release.signature == "not published"
    html = render(page)
    assert 'v-passed">passed</span>\n' not in html
    assert html.count('data-verdict="not run"') == len(page.rows)
    doc = page.to_dict()
    assert {r["verdict"] for r in doc["rows"]} == {NOT_RUN}


def test_failed_smoke_is_failed_and_names_the_check(tmp_path: Path) -> None:
    cpu_evidence(tmp_path, amd64_failed=True)
    page = page_for(tmp_path)
    amd64, arm64 = row(page, "local-cpu"), row(page, "local-cpu", "linux/arm64")
    assert amd64.verdict == "failed"
    assert amd64.smoke.failed == ["runtime: server exited 1"]
    assert amd64.smoke.tokens_per_s is None  # a failed runtime check measured nothing that counts
    assert arm64.verdict == "passed" and arm64.smoke.tokens_per_s == pytest.approx(155.2777)
    assert arm64.smoke.server_start_s == pytest.approx(4.5618)
    assert 'data-row="local-cpu|linux/amd64|cpu" data-verdict="failed"' in render(page)


def test_smoke_of_another_image_does_not_count(tmp_path: Path) -> None:
    cpu_evidence(tmp_path)
    build_report(tmp_path, {"local-cpu": (True, "sha256:" + "9" * 64)})  # rebuilt since the smoke
    r = row(page_for(tmp_path), "local-cpu")
    assert r.verdict == NOT_RUN and r.smoke.status == NOT_RUN
    assert "ran another image" in (r.smoke.note or "")


def test_failed_build_is_failed(tmp_path: Path) -> None:
    build_report(tmp_path, {"local-cpu": (False, None)})  # type: ignore[dict-item]
    r = row(page_for(tmp_path), "local-cpu")
    assert r.verdict == "failed" and r.build.startswith("failed at [final 3/9]")


def test_rocm_smoke_goes_to_the_row_whose_code_loads_on_the_device(tmp_path: Path) -> None:
    """The MI300X report (gfx942:sramecc+:xnack-) fills the gfx942 row; the gfx90a row stays not run."""
    rocm_evidence(tmp_path)
    page = page_for(tmp_path)
    gfx942, gfx90a = row(page, "rocm6.1-torch2.3", arch="gfx942"), row(page, "rocm6.1-torch2.3", arch="gfx90a")
    assert gfx942.verdict == "passed" and gfx942.smoke.gpu_name == "AMD Instinct MI300X"
    assert gfx942.smoke.backends == ["flash", "math"] and gfx942.smoke.tunableop == "passed"
    assert gfx90a.verdict == NOT_RUN
    assert gfx942.coverage.counts == {"present": 1, "absent": 1}
    assert [(c.library, c.status) for c in gfx942.coverage.libraries] == [("vllm", "present"), ("rocsparse", "absent")]
    assert gfx90a.coverage.counts == {"present": 2}


def test_rocm_failed_attention_fails_the_row(tmp_path: Path) -> None:
    rocm_evidence(tmp_path, smoke_passed=False)
    r = row(page_for(tmp_path), "rocm6.1-torch2.3", arch="gfx942")
    assert r.verdict == "failed" and r.smoke.failed == ["attention: flash attention fell back to math"]


def test_published_index_child_signed_and_attested(tmp_path: Path) -> None:
    cpu_evidence(tmp_path, published=True)
    page = page_for(tmp_path)
    r = row(page, "local-cpu")
    assert r.release.published and r.release.digest == "sha256:" + "d" * 64
    assert r.tag == "127.0.0.1:5000/imagebuild:local-cpu"  # the index's tag
    assert r.release.signature == "signed (key build/keys/cosign.key)"
    assert (r.release.sbom, r.release.provenance, r.release.smoke_attestation) == (
        "attested",
        "attested",
        "attested (cpu)",
    )
    assert row(page, "local-cpu", "linux/arm64").release.signature == "not published"


def test_malformed_evidence_is_a_warning_and_not_run(tmp_path: Path) -> None:
    cpu_evidence(tmp_path)
    (tmp_path / "build/smoke/local-cpu/report.json").write_text('{"schema_version": 1, "passed": "yes"}')
    (tmp_path / "build/coverage").mkdir(parents=True)
    (tmp_path / "build/coverage/local-cpu.json").write_bytes(b"\xff\xfe not json")
    (tmp_path / "build/sbom").mkdir()
    (tmp_path / "build/publish/local-cpu").mkdir(parents=True)
    (tmp_path / "build/publish/local-cpu/publish-report.json").symlink_to("/dev/zero")  # never read whole
    page = page_for(tmp_path)
    r = row(page, "local-cpu")
    assert r.verdict == NOT_RUN and r.coverage.status == NOT_RUN
    assert any("build/smoke/local-cpu/report.json: not a smoke report: passed" in w for w in page.warnings)
    assert any("build/coverage/local-cpu.json: not JSON" in w for w in page.warnings)
    assert any("publish-report.json: not read: is a character device" in w for w in page.warnings)


@pytest.mark.parametrize(
    ("query", "devices"),
    [
        ("gfx942", ["gfx942"]),
        ("MI300X", ["gfx942"]),
        ("AMD Instinct MI300X", ["gfx942"]),
        ("mi250", ["gfx90a"]),
        ("H100", ["sm_90"]),
        ("NVIDIA H200", ["sm_90"]),
        ("sm_90", ["sm_90"]),
        ("9.0", ["sm_90"]),
        ("Hopper", ["sm_90"]),
        ("Ampere", ["sm_80", "sm_86"]),
        ("gfx942:xnack+:sramecc-", ["gfx942:sramecc-:xnack+"]),
        ("tpu", []),
    ],
)
def test_lookup_names(query: str, devices: list[str]) -> None:
    assert lookup.resolve(query) == devices


def test_lookup_verdicts_use_loads_on(tmp_path: Path) -> None:
    page = page_for(tmp_path)
    verdicts = page.lookup["verdicts"]
    runs = {d: sorted(rid for rid, (ok, _) in verdicts[d].items() if ok) for d in ("gfx942", "sm_90", "gfx1100")}
    # the seed image and the MI300 family's vLLM image (issue 32)
    assert runs["gfx942"] == ["rocm6.1-torch2.3|linux/amd64|gfx942", "rocm7.14-gfx942-torch2.12|linux/amd64|gfx942"]
    assert runs["sm_90"] == [
        "cuda12.1-torch2.3|linux/amd64|sm_90",
        "cuda13.0-torch2.14.1-sglang|linux/amd64|sm_90",
        "cuda13.0-torch2.14.1-sglang|linux/arm64|sm_90",
        "cuda13.0-torch2.14|linux/amd64|sm_90",  # one image for both CPU platforms (issue 31)
        "cuda13.0-torch2.14|linux/arm64|sm_90",
    ]
    assert runs["gfx1100"] == ["rocm7.14-gfx110x-torch2.12|linux/amd64|gfx1100"]  # only the RDNA3 family's image
    why = verdicts["gfx1100"]
    assert why["rocm6.1-torch2.3|linux/amd64|gfx942"][1].startswith("no code for gfx1100 in this image")
    assert why["cuda12.1-torch2.3|linux/amd64|sm_90"][1] == "NVIDIA image (sm_80, sm_90); gfx1100 is an AMD GPU"
    assert why["local-cpu|linux/amd64|cpu"][1].startswith("CPU image")
    assert verdicts["gfx942:sramecc+:xnack+"]["rocm6.1-torch2.3|linux/amd64|gfx942"][0]  # a bare build loads on both


def test_history_keeps_points_across_runs(tmp_path: Path) -> None:
    cpu_evidence(tmp_path)
    page_for(tmp_path)
    page_for(tmp_path)  # the same reports: no new point
    hist = json.loads((tmp_path / "build/report/smoke-history.json").read_text())
    assert len(hist["points"]) == 2
    doc = real_cpu_report(LOCAL_ID)
    doc["checks"][-1]["throughput"]["tokens_per_s"] = 170.0
    _write(tmp_path / "build/smoke/local-cpu/report.json", doc)
    page = page_for(tmp_path)
    hist = json.loads((tmp_path / "build/report/smoke-history.json").read_text())
    assert sorted(p["tokens_per_s"] for p in hist["points"]) == [pytest.approx(155.2777)] * 2 + [170.0]
    plot = next(p for p in page.plots if p.id == "plot-runtime")
    assert plot.svg.startswith("<svg") and 'role="img"' in plot.svg and '<title id="plot-runtime-title">' in plot.svg
    assert len(plot.table) == 4


def test_kernel_plot_from_bench_results(tmp_path: Path) -> None:
    page = page_for(tmp_path, bench_dir=REPO / "bench/results")
    plot = next(p for p in page.plots if p.id == "plot-kernels-kernels_h200")
    families = {r[0] for r in plot.table[1:]}
    assert families == {"qkv", "o", "gate_up", "down", "lm_head"}
    assert sum(int(r[2]) for r in plot.table[1:]) == 720
    assert "http" not in plot.svg.replace("http://www.w3.org", "")  # nothing fetched at view time


def test_cli_writes_page_and_json(tmp_path: Path, cli) -> None:
    shutil.copy(REPO / "matrix.yaml", tmp_path / "matrix.yaml")
    cpu_evidence(tmp_path, amd64_failed=True)
    result = cli("--matrix", str(tmp_path / "matrix.yaml"), "report", "--no-engine", "--bench", str(tmp_path))
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    page = tmp_path / "build/report/compat.html"
    assert f"compatibility page: {page}" in result.stdout
    # cuda13.0-torch2.14 adds 8 rows: 4 default arches on 2 OCI platforms
    # 14 rows before issue 31-32: + SGLang (2 platforms x 4 arches) + the 5 ROCm families (7 arches)
    assert "29 rows: 1 passed, 1 failed, 27 not run" in result.stdout
    doc = json.loads((tmp_path / "build/report/compat.json").read_text())
    assert {r["id"]: r["verdict"] for r in doc["rows"]}["local-cpu|linux/amd64|cpu"] == "failed"


def test_cli_key_without_registry_is_usage_error(tmp_path: Path, cli) -> None:
    result = cli(
        "--matrix", str(REPO / "matrix.yaml"), "report", "--no-engine", "--key", "x.pub", "--out", str(tmp_path)
    )
    assert result.exit_code == 2 and result.exception is None


def test_smoke_on_a_gpu_the_image_does_not_cover_is_noted_not_passed(tmp_path: Path) -> None:
    """A report from a gfx1100 run of the gfx90a;gfx942 image (preflight refused: AMD mocked) fits no row."""
    rocm_evidence(tmp_path)
    path = tmp_path / "build/smoke/rocm6.1-torch2.3/report.json"
    doc = json.loads(path.read_text())
    doc.update(arch="gfx1100", passed=False)
    path.write_text(json.dumps(doc))
    page = page_for(tmp_path)
    for arch in ("gfx90a", "gfx942"):
        r = row(page, "rocm6.1-torch2.3", arch=arch)
        assert r.verdict == NOT_RUN
        assert r.notes == [
            "build/smoke/rocm6.1-torch2.3/report.json: a smoke on gfx1100 (failed), not an arch of this image"
        ]
    assert "a smoke on gfx1100 (failed)" in render(page)
