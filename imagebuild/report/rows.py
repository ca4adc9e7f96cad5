"""Matrix x evidence -> rows: one per (target, OCI platform, GPU arch), each fact taken from the document that owns it.

A smoke report counts for a row only when it ran this build's image (its `image_id`) on a device this row's code
loads on (`loads_on`); a publish report only when it pushed this image. Anything else is a note, never a pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from imagebuild.errors import ConfigError
from imagebuild.matrix import Matrix, Target
from imagebuild.matrix.oci import for_oci
from imagebuild.plan.image_key import ImageKey
from imagebuild.report.evidence import Evidence, mtime_utc, said
from imagebuild.report.model import NOT_RUN, CoverageFacts, LibraryCell, ReleaseFacts, Row, SmokeFacts
from imagecontract import kinds
from imagecontract.models import ArchCoverage, SmokeReport
from imagecontract.targets import TargetError, loads_on, parse_list

# image ID -> {"size": bytes, "labels": {...}} from the engine, None when it does not hold that image
Inspect = Callable[[str], dict[str, Any] | None]


def _ids(arches: list[str]) -> list[str]:
    """The target IDs of a list the matrix checked (its default arches): parsed, else as written."""
    try:
        return [t.id for t in parse_list(arches)]
    except TargetError:
        return list(arches)


def _coverage_arches(ev: Evidence, cov: ArchCoverage, where: str) -> list[str] | None:
    """The arches a coverage document says the image was built for, when each is a GPU target ID (LLVM's rule,
    CUDA's SM); None, with a warning, for a list that is not (the document then is not used)."""
    try:
        return [t.id for t in parse_list(cov.requested)]
    except TargetError as exc:
        ev.warnings.append(f"{where}: requested arches are not GPU target IDs ({said(exc)}): not used")
        return None


def smoke_facts(report: SmokeReport, when: str | None) -> SmokeFacts:
    refusal = report.refusal()
    facts = SmokeFacts(
        status="passed" if refusal is None else "failed",
        when=when,
        device=report.device,
        device_arch=report.arch,
        gpu_name=report.gpu_name,
        checks={c.name: c.status for c in report.checks},
        failed=[f"{c.name}: {c.reason or 'failed'}"[:300] for c in report.checks if c.status == "failed"],
        note=None if refusal in (None, "did not pass") else refusal,
    )
    attention = report.check("attention")
    if attention is not None:
        expected = attention.numbers.get("backends_expected")
        facts.backends_expected = [str(b) for b in expected] if isinstance(expected, list) else []
        facts.backends = [b for b in facts.backends_expected if isinstance(attention.numbers.get(f"sdpa_{b}"), dict)]
        package = attention.numbers.get("flash_attn_package")
        if isinstance(package, dict) and package.get("tested") is not False and package:
            facts.backends.append("flash_attn package")
    runtime = report.check("runtime")
    if runtime is not None and runtime.status == "passed":
        facts.server_start_s = _num(runtime.latency.get("server_start_s"))
        facts.ttft_s = _num(runtime.latency.get("ttft_s"))
        facts.tokens_per_s = _num(runtime.throughput.get("tokens_per_s"))
    tunableop = report.check("tunableop")
    facts.tunableop = tunableop.status if tunableop else NOT_RUN
    return facts


def _num(value: Any) -> float | None:
    """A measured number: finite (JSON's NaN and Infinity are no measurement), not a bool."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past float's range
        return None
    return number if math.isfinite(number) else None


def _short_lib(owner: str | None, path: str) -> str:
    return owner.split(":", 1)[-1] if owner else path.rsplit("/", 1)[-1]


def coverage_facts(doc: ArchCoverage | None, why: str | None, where: str, arch: str) -> CoverageFacts:
    if doc is None:
        return CoverageFacts(status=why or NOT_RUN, document=where or None)
    bad = sum(1 for gap in doc.gaps if not gap.allowed)
    facts = CoverageFacts(status="ok" if doc.ok else f"failed: {bad} disallowed gap(s)", document=where)
    column = next((r for r in doc.requested if r.split(":")[0] == arch.split(":")[0]), None)
    if column is None:
        facts.status = facts.status if doc.requested or arch != kinds.CPU_ARCH else "ok: no GPU code to cover"
        return facts
    facts.requested = column
    for lib in doc.libraries:
        status = lib.arches.get(column, "absent")
        facts.libraries.append(LibraryCell(_short_lib(lib.owner, lib.path), lib.path, lib.component, status))
        facts.counts[status] = facts.counts.get(status, 0) + 1
    return facts


def release_facts(ev: Evidence, key: ImageKey, image_id: str | None, arch: str) -> ReleaseFacts:
    doc, path = ev.publish(key)
    if doc is None or path is None:
        return ReleaseFacts(signature="not published", sbom="not published", provenance="not published",
                            smoke_attestation="not published", source="local")  # fmt: skip
    facts = ReleaseFacts(source=ev.rel(path))
    if image_id and doc.get("image_id") != image_id:
        facts.note = f"the publish report is for another image ({str(doc.get('image_id'))[:19]})"
        facts.signature = facts.sbom = facts.provenance = facts.smoke_attestation = "not published"
        return facts
    if not doc.get("ok"):
        facts.note = f"publish failed: {str(doc.get('error') or 'see the report')[:200]}"
        facts.signature = facts.sbom = facts.provenance = facts.smoke_attestation = "failed"
        return facts
    facts.published = True
    facts.repository = doc.get("repository") if isinstance(doc.get("repository"), str) else None
    facts.digest = doc.get("digest") if isinstance(doc.get("digest"), str) else None
    facts.refs = [str(r) for r in doc.get("refs") or [] if isinstance(r, str)]
    facts.when = doc.get("created") if isinstance(doc.get("created"), str) else None
    index, _ = ev.index_report(key)
    if index is not None and index.get("ok") and facts.digest in (index.get("platforms") or {}).values():
        facts.refs = [str(r) for r in index.get("refs") or [] if isinstance(r, str)] or facts.refs
        facts.note = f"a child of the OCI index {str(index.get('digest'))[:19]}"
    signing = ev.signing(path)
    attached = [str(a) for a in (signing or {}).get("attached") or []]
    signer = str((signing or {}).get("signed_by") or "")
    facts.signature = f"signed ({signer})" if "signature" in attached else "not signed"
    facts.sbom = "attested" if "sbom" in attached else "not attested"
    facts.provenance = "attested" if "provenance" in attached else "not attested"
    smoke = [a.removeprefix("smoke ") for a in attached if a.startswith("smoke ")]
    hit = [a for a in smoke if a == arch or (arch != kinds.CPU_ARCH and a != kinds.CPU_ARCH and loads_on(arch, a))]
    facts.smoke_attestation = f"attested ({hit[0]})" if hit else "not attested"
    return facts


def rows_for(matrix: Matrix, ev: Evidence, inspect: Inspect | None = None) -> list[Row]:
    builds = ev.build_entries()
    rows: list[Row] = []
    for target in matrix.targets:
        for oci in target.oci_platforms:
            try:
                plat = for_oci(target, matrix.model.oci_platforms, oci)
            except ConfigError as exc:
                ev.warnings.append(f"{target.name} {oci}: {exc}")
                continue
            key = ImageKey(target.name, oci, tuple(target.oci_platforms))  # the matrix default's image
            rows.extend(_rows_of(ev, plat, key, builds.get(key.name), inspect))
    return rows


def _rows_of(
    ev: Evidence, plat: Target, key: ImageKey, entry: dict[str, Any] | None, inspect: Inspect | None
) -> list[Row]:
    oci = key.oci
    cov, why, where = ev.coverage(key, entry)
    kind = plat.platform.kind
    requested = _coverage_arches(ev, cov, where) if cov is not None else None
    if requested is None:
        cov = None
    arches = requested if requested is not None else _ids(list(plat.platform.default_arches))
    image_arches = arches if kinds.platform(kind).VENDOR is not None else []
    report, smoke_path = ev.smoke_report(key)
    image_id = entry.get("image_id") if entry and isinstance(entry.get("image_id"), str) else None
    build = NOT_RUN
    if entry is not None:
        build = "built" if entry.get("ok") else f"failed at {str(entry.get('failed_step') or 'a step')[:120]}"
    facts_of = inspect(image_id) if inspect and image_id else None
    out = []
    for arch in arches or [kinds.CPU_ARCH]:
        row = Row(
            id=f"{plat.name}|{oci}|{arch}",
            target=plat.name,
            oci=oci,
            arch=arch,
            vendor=kinds.platform(kind).ROW_VENDOR,
            image_arches=image_arches,
            platform=plat.platform_name,
            torch=str(plat.torch.version),
            runtime=plat.runtime_name,
            build=build,
            built_at=entry.get("created") if entry else None,
            tags=[str(t) for t in (entry or {}).get("tags") or []],
            image_id=image_id,
        )
        row.tag = row.tags[0] if row.tags else key.local_tag
        if facts_of is not None:
            row.size_bytes = facts_of.get("size")
            baked = (facts_of.get("labels") or {}).get("io.imagebuild.tunableop.baked")
            row.tunableop_baked = [b for b in str(baked or "").split(",") if b]
        if report is not None and smoke_is_for(row, report):
            if image_id and report.image_id != image_id:
                row.smoke.note = f"{ev.rel(smoke_path)} ran another image ({str(report.image_id)[:19]}): not counted"
            else:
                row.smoke = smoke_facts(report, mtime_utc(smoke_path))
                row.smoke.report = ev.rel(smoke_path)
                row.image_id = row.image_id or report.image_id
        row.coverage = coverage_facts(cov, why, where, arch)
        row.release = release_facts(ev, key, row.image_id, arch)
        if row.release.published and row.release.refs:
            row.tag = row.release.refs[0]
        sbom = ev.sbom(key)
        if sbom is not None and not row.release.sbom.startswith("attested"):
            row.release.sbom = f"in image, {row.release.sbom} ({ev.rel(sbom)})"
        elif sbom is not None:
            row.release.sbom = "attested, in image"
        out.append(row)
    if report is not None and not any(smoke_is_for(row, report) for row in out):
        said = "passed" if report.refusal() is None else "failed"
        note = (
            f"{ev.rel(smoke_path)}: a smoke on {report.arch or 'no detected GPU'} ({said}), not an arch of this image"
        )
        ev.warnings.append(note)
        for row in out:
            row.notes.append(note)
    return out


def smoke_is_for(row: Row, report: SmokeReport) -> bool:
    """The report ran on a device this row's code loads on (a CPU image: a CPU run)."""
    if row.vendor == kinds.NO_GPU.ROW_VENDOR:
        return report.arch in (None, kinds.CPU_ARCH) or report.device == kinds.CPU_ARCH
    return bool(report.arch) and loads_on(row.arch, str(report.arch))
