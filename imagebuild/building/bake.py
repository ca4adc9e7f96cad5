"""Write a docker-bake.json from the same plan `build` uses, so a fleet of BuildKit builders
(`docker buildx bake --builder REMOTE`) builds the matrix with identical args, labels, tags and secrets.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from imagebuild.building.buildkit import BuildSpec
from imagebuild.building.secrets import DEFAULT_CA_BUNDLE
from imagecontract.atomic import write_atomic


def bake_file(specs: list[BuildSpec], root: Path) -> dict[str, Any]:
    """The bake definition; paths relative to the repository root (run bake from there)."""
    targets: dict[str, Any] = {}
    for spec in specs:
        entry: dict[str, Any] = {
            "context": ".",
            "dockerfile": os.path.relpath(spec.dockerfile, root),
            "tags": spec.tags,
            "args": dict(sorted(spec.build_args.items())),
            "labels": dict(sorted(spec.labels.items())),
            # Secrets by reference only: the CA bundle file and the index URL variable, never values.
            "secret": ["id=pipcert,src=${PIP_CERT}", "id=pipindex,env=PIP_INDEX_URL"],
            "network": "host",
        }
        if spec.cache_from:
            entry["cache-from"] = spec.cache_from
        if spec.cache_to:
            entry["cache-to"] = spec.cache_to
        targets[spec.target] = entry
    return {
        "variable": {"PIP_CERT": {"default": DEFAULT_CA_BUNDLE}},
        "group": {"default": {"targets": [spec.target for spec in specs]}},
        "target": targets,
    }


def write_bake(specs: list[BuildSpec], root: Path, out: Path) -> None:
    write_atomic(out, json.dumps(bake_file(specs, root), indent=2) + "\n")
