"""Issue 31 item 5: an image built for GPUs nobody here has (cuda13.0-torch2.14: sm_80..sm_120) verifies only with
each such arch named by `--accept-unsmoked-arch`, and then only when a smoke of the very image passed somewhere (its
CPU run). Acceptance never covers a failed report, a report about another image, or an arch nobody named. The
statements are built as cosign hands them over (verify's own model); the whole command against a real registry and
cosign is bench/vllm_cuda_publish.sh's run (bench/results/vllm-cuda-index.json)."""

from __future__ import annotations

from typing import Any

import pytest

from imagebuild.release import attest, statements
from imagebuild.release import verify as vf

SHA = "b" * 64
IMAGE = "sha256:" + "c" * 64
GPU_ARCHES = ["sm_80", "sm_90", "sm_100", "sm_120"]


def _smoke(arch: str = "cpu", image_id: str = IMAGE, passed: bool = True) -> Any:
    status = "passed" if passed else "failed"
    report = {
        "schema_version": 1,
        "image_id": image_id,
        "passed": passed,
        "exit_code": 0 if passed else 1,
        "device": "cpu" if arch == "cpu" else "NVIDIA H200",
        "arch": arch,
        "checks": [{"name": "imports", "status": status}, {"name": "runtime", "status": "skipped"}],
    }
    return statements.statement(
        {
            "_type": statements.STATEMENT_V01,
            "subject": [{"name": "r", "digest": {"sha256": SHA}}],
            "predicateType": attest.SMOKE_TYPE,
            "predicate": report,
        },
        "test",
    )


def _findings(found: list[Any], accepted: set[str]) -> dict[str, tuple[bool, str]]:
    v = vf.Verification(ref="r", digest="sha256:" + SHA, image_id=IMAGE, arches=list(GPU_ARCHES))
    vf._check_smoke(v, found, frozenset(accepted))
    return {f.what: (f.ok, f.detail) for f in v.findings}


def test_a_gpu_image_smoked_on_the_cpu_only_fails_without_acceptance() -> None:
    found = _findings([_smoke()], set())
    assert {what: ok for what, (ok, _) in found.items()} == {f"smoke {a}": False for a in GPU_ARCHES}


def test_every_accepted_arch_passes_saying_it_was_not_smoked_and_where_smoke_passed() -> None:
    found = _findings([_smoke()], set(GPU_ARCHES))
    assert all(ok for ok, _ in found.values()) and set(found) == {f"smoke {a}" for a in GPU_ARCHES}
    assert all("NOT smoked" in detail and "cpu (cpu)" in detail for _, detail in found.values())


def test_an_arch_not_named_still_fails() -> None:
    found = _findings([_smoke()], {"sm_80", "sm_90", "sm_100"})
    assert found["smoke sm_120"] == (False, "no smoke attestation for sm_120")
    assert found["smoke sm_90"][0]


@pytest.mark.parametrize(
    ("reports", "why"),
    [
        ([], "no smoke at all"),
        ([_smoke(passed=False)], "the CPU smoke failed"),
        ([_smoke(image_id="sha256:" + "d" * 64)], "the CPU smoke is about another image"),
    ],
)
def test_acceptance_needs_a_passing_smoke_of_this_very_image(reports: list[Any], why: str) -> None:
    found = _findings(reports, set(GPU_ARCHES))
    assert not any(ok for ok, _ in found.values()), why
    assert all("no smoke of this image passed anywhere" in detail for _, detail in found.values())


def test_acceptance_never_covers_a_failed_report_of_that_arch() -> None:
    found = _findings([_smoke(), _smoke("sm_90", passed=False)], set(GPU_ARCHES))
    assert found["smoke sm_90"] == (False, "smoke report did not pass")
    assert found["smoke sm_80"][0] is True


def test_a_gpu_report_that_passed_counts_as_smoked_not_accepted() -> None:
    found = _findings([_smoke("sm_90")], set(GPU_ARCHES))
    assert found["smoke sm_90"] == (True, "passed (1 checks passed, device NVIDIA H200)")
    assert "NOT smoked" in found["smoke sm_80"][1] and "sm_90 (NVIDIA H200)" in found["smoke sm_80"][1]


def test_the_command_refuses_an_accepted_arch_the_image_does_not_claim(cli: Any, tmp_path: Any) -> None:
    """A typo would accept nothing: exit 2 with one line. Against the loopback registry's local-cpu image when it
    is there (the quick start publishes it), else skipped with that reason."""
    from imagebuild.engine.registry import Registry, RepoRef

    repo = RepoRef.parse("127.0.0.1:5000/imagebuild")
    try:
        present = Registry(repo).digest(repo.repo, "local-cpu") is not None
    except Exception:  # noqa: BLE001 - no registry here: nothing to ask
        present = False
    if not present:
        pytest.skip("127.0.0.1:5000/imagebuild:local-cpu is not published here (scripts/quickstart.sh does it)")
    key = tmp_path / "k.pub"
    key.write_text("-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n")
    result = cli("verify", "127.0.0.1:5000/imagebuild:local-cpu", "--key", str(key), "--accept-unsmoked-arch", "sm_9O")
    assert result.exit_code == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: --accept-unsmoked-arch sm_9O: ") and "claims only cpu" in line, line
