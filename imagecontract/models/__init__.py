"""Typed models of the documents that cross the host/image seam; each exports a JSON Schema to schema/."""

from __future__ import annotations

from imagecontract.models._base import Model, ModelError
from imagecontract.models.coverage import ArchCoverage
from imagecontract.models.kernels import KernelsReport
from imagecontract.models.manifest import Manifest
from imagecontract.models.smoke_report import SmokeReport

# schema file name -> model; tests/test_contract.py keeps schema/*.schema.json equal to these.
SCHEMAS: dict[str, type[Model]] = {
    "manifest.schema.json": Manifest,
    "kernels.schema.json": KernelsReport,
    "smoke-report.schema.json": SmokeReport,
    "arch-coverage.schema.json": ArchCoverage,
}

__all__ = ["SCHEMAS", "ArchCoverage", "KernelsReport", "Manifest", "Model", "ModelError", "SmokeReport"]
