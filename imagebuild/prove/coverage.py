"""Arch coverage of a whole image: scan it in the image, judge the gaps against the matrix, add the result as a layer.

Decision: the scanner (imagecontract/coverage.py) runs inside the image, as the image's own `python3` (`--network
none`, user 0, entrypoint bypassed), from a read-only bind mount of this host's contract package: the files, their
owners (pip RECORD files, dpkg lists) and the manifest are all there, nothing of the image is copied out, and it
works for any image with a python3, ours or not, with the scanner version that wrote this host's reader. (Exporting
the filesystem instead would move gigabytes through a tar stream and lose nothing we need; it is the fallback
not built yet for images without python3.) An image without python3 has no torch and no component to judge: the
build records "not scanned: no python3 in the image" and warns instead of failing.

Judging (the table in docs/contracts.md, "Arch coverage"): a library belongs to a matrix component when the
Python distribution that installed it is the component's `distribution`, and to `torch` when torch installed it
and it is torch's own (`libtorch*`, `libc10*`, `_C`). A requested arch absent from a library is a gap; the build
fails (exit 3) on a gap in an arch its component was built for (the manifest's arches of that component: an arch
a component is not built for is already a recorded, allowed choice). Other libraries (the platform's ROCm/CUDA
libraries, BLAS kernel folders bundled in torch's wheel) are tabulated and their gaps reported, not judged, unless
the target names them required (`Required`: a distribution, optionally a file-name pattern, e.g. `nvidia-nccl-cu13`
or `vllm:_C_stable_libtorch*`): a required library must run on every requested arch (CUDA: a cubin of the arch or
an older minor of its major, its family's `f` cubin, or PTX the driver compiles; imagecontract.cuda_fatbin), and
one that cannot fails the build with one line naming it and what it carries. What each covered cell rests on
(`cubin exact`, `cubin compatible from sm_80`, `family from sm_100f`, `ptx-jit from compute_80`: the weaker kind)
is in each row's `via`; imagecontract.coverage.arch_table writes the same as library -> arch -> {kind, from}.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagecontract.cuda_fatbin import describe
from imagecontract.models import Manifest, ModelError
from imagecontract.models.coverage import COVERAGE_SCHEMA_VERSION, ArchCoverage, Gap, LibraryCoverage, ScanInfo
from imagecontract.targets import loads_on

if TYPE_CHECKING:
    from imagebuild.building.buildkit import TargetResult
    from imagebuild.engine.docker import Engine

IMAGE_PATH = "/opt/imagebuild/arch-coverage.json"
LABEL = "io.imagebuild.arch-coverage"
MOUNT = "/tmp/imagebuild-contract"
SCAN_TIMEOUT = 1800
_TORCH_OWN = re.compile(r"^(libtorch|libc10|_C\.)")


class CoverageError(Exception):
    """The scan could not run in the image, or its answer could not be read."""


class NoPython(CoverageError):
    """The image has no python3 to run the scanner: nothing of torch or the matrix components is in it to judge."""


NO_PYTHON = "not scanned: no python3 in the image"


@dataclass(frozen=True)
class Rule:
    """What a component promises: its libraries hold code for these arches."""

    component: str
    distribution: str
    arches: tuple[str, ...]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Required:
    """Libraries the image cannot serve without on any requested arch: those a distribution installed whose file
    name matches `pattern` (fnmatch; `*`: all of them)."""

    distribution: str
    pattern: str = "*"

    @classmethod
    def parse(cls, text: str) -> Required:
        """`nvidia-nccl-cu13` or `vllm:_C_stable_libtorch*` (distribution names compare normalized, PEP 503)."""
        dist, _, pattern = text.partition(":")
        return cls(_norm(dist.strip()), pattern.strip() or "*")

    def matches(self, lib: dict[str, Any]) -> bool:
        owner = lib.get("owner") or ""
        return (
            owner.startswith("python:")
            and _norm(owner.removeprefix("python:")) == _norm(self.distribution)
            and fnmatch.fnmatchcase(Path(lib["path"]).name, self.pattern)
        )

    def __str__(self) -> str:
        return self.distribution if self.pattern == "*" else f"{self.distribution}:{self.pattern}"


def image_manifest(data: Any) -> Manifest | None:
    """The manifest the scan found in the image, read through the contract's model; one line naming the key
    path when it does not fit (exit 2)."""
    from imagebuild.errors import ConfigError

    try:
        return None if data is None else Manifest.from_dict(data)
    except ModelError as exc:
        raise ConfigError(f"the image's manifest does not fit the contract: {exc}") from None


def rules(manifest: Manifest | None, distributions: dict[str, str]) -> list[Rule]:
    """torch (every arch of the image) and each included component with a known distribution (its arches)."""
    if manifest is None:
        return []
    out = [Rule("torch", "torch", tuple(manifest.image_arches()))]
    for name, entry in sorted(manifest.components.items()):
        dist = distributions.get(name)
        if entry.included and dist:
            out.append(Rule(name, _norm(dist), (*entry.arches, *entry.experimental, *entry.fixed_arches)))
    return out


def _rule_for(lib: dict[str, Any], found: list[Rule]) -> Rule | None:
    owner = lib.get("owner") or ""
    if not owner.startswith("python:"):
        return None
    dist = _norm(owner.removeprefix("python:"))
    for rule in found:
        if rule.distribution == dist and (rule.component != "torch" or _TORCH_OWN.match(Path(lib["path"]).name)):
            return rule
    return None


def judge(
    raw: dict[str, Any],
    distributions: dict[str, str],
    target: str | None = None,
    required: Iterable[Required] = (),
) -> ArchCoverage:
    """The arch-coverage.json document from the in-image scan's output; `required`: libraries that must run on
    every requested arch whatever the manifest says (module docstring)."""
    manifest = image_manifest(raw.get("manifest"))
    found = rules(manifest, distributions)
    must = list(required)
    libraries, gaps = [], []
    for lib in raw["libraries"]:
        rule = _rule_for(lib, found)
        need = next((r for r in must if r.matches(lib)), None)
        libraries.append(LibraryCoverage.from_dict({**lib, "component": rule.component if rule else None}))
        for arch, state in lib["arches"].items():
            if state != "absent":
                continue
            if need is not None:
                gaps.append(Gap(lib["path"], arch, False, f"required ({need}) on every requested arch", None))
            elif rule is None:
                gaps.append(Gap(lib["path"], arch, True, "not governed by the matrix: reported"))
            elif not any(loads_on(built, arch) for built in rule.arches):
                gaps.append(Gap(lib["path"], arch, True, f"{rule.component} is not built for {arch}", rule.component))
            else:
                why = f"{rule.component} was built for {arch} but this library holds no code for it"
                gaps.append(Gap(lib["path"], arch, False, why, rule.component))
    return ArchCoverage(
        schema_version=COVERAGE_SCHEMA_VERSION,
        requested=list(raw["requested"]),
        libraries=libraries,
        gaps=gaps,
        ok=all(g.allowed for g in gaps),
        scan=ScanInfo.from_dict(raw["scan"]),
        target=target or (manifest.target if manifest else None),
    )


def distributions_of(matrix_path: Path) -> dict[str, str]:
    """Component name -> the Python distribution its build installs (matrix `components.<name>.distribution`)."""
    from imagebuild.errors import ConfigError
    from imagebuild.matrix import load_matrix

    try:
        components = load_matrix(matrix_path).model.components
    except (ConfigError, OSError):
        return {}
    return {name: dist for name, comp in components.items() if (dist := getattr(comp, "distribution", None))}


def _docker(engine: Engine, *args: str, timeout: int = 600) -> str:
    from imagebuild.engine import cli

    try:
        return cli.docker(engine, *args, timeout=timeout)
    except cli.CliFailed as exc:
        if exc.no_entrypoint and "--entrypoint" in args:
            raise NoPython(NO_PYTHON) from None  # the entrypoint (python3 here) is not in the image
        raise CoverageError(str(exc)) from None
    except cli.CliError as exc:
        raise CoverageError(str(exc)) from None


def scan_image(engine: Engine, image: str, arch: str | None = None) -> dict[str, Any]:
    """Run the scanner in the image from a read-only copy of this host's contract package; its JSON output."""
    import imagecontract

    with tempfile.TemporaryDirectory(prefix="imagebuild-contract-") as tmp:
        os.chmod(tmp, 0o755)
        shutil.copytree(
            Path(imagecontract.__file__).parent,
            Path(tmp) / "imagecontract",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        argv = ["run", "--rm", "--network", "none", "--ulimit", "core=0", "--user", "0", "--entrypoint", "python3"]
        argv += ["--mount", f"type=bind,src={tmp},dst={MOUNT},readonly", image]
        argv += ["-I", f"{MOUNT}/imagecontract/coverage.py", "--skip", MOUNT]
        out = _docker(engine, *argv, *(["--arch", arch] if arch else []), timeout=SCAN_TIMEOUT)
    try:
        data = json.loads(out)
    except ValueError:
        raise CoverageError(f"the scanner in {image} printed no JSON: {out[:200]!r}") from None
    if not isinstance(data, dict) or "libraries" not in data:
        raise CoverageError(f"the scanner in {image} printed an unexpected document")
    return data


def add_layer(engine: Engine, image: str, tags: list[str], doc: ArchCoverage) -> str:
    """`FROM image` + arch-coverage.json + the summary label, under the same tags; the new image ID."""
    from imagebuild.engine import cli

    stable = dataclasses.replace(doc, scan=dataclasses.replace(doc.scan, seconds=None))  # same image, same layer
    files = {"arch-coverage.json": json.dumps(stable.to_dict(), indent=1) + "\n"}
    label = json.dumps(doc.summary())  # a JSON string is a valid Dockerfile LABEL value
    try:
        return cli.add_layer(
            engine, image, tags, files, f"COPY arch-coverage.json {IMAGE_PATH}\nLABEL {LABEL}={label}\n"
        )
    except cli.CliError as exc:
        raise CoverageError(str(exc)) from None


def disallowed(doc: ArchCoverage) -> str:
    """The build's failure line: library, arch, why it must have it and what it carries, for each gap the matrix
    or the target's required list does not allow (first five)."""
    rows = {lib.path: lib for lib in doc.libraries}

    def one(g: Gap) -> str:
        lib = rows.get(g.library)
        carries = describe(lib.code_objects, lib.ptx) if lib else "unknown"
        why = f"{g.component} was built for it" if g.component else g.why
        return f"{g.library} has no {g.arch} code ({why}; it carries {carries})"

    bad = [g for g in doc.gaps if not g.allowed]
    named = "; ".join(one(g) for g in bad[:5])
    return f"arch coverage: {named}" + (f"; and {len(bad) - 5} more" if len(bad) > 5 else "")


def required_libraries(specs: Iterable[Any]) -> dict[str, list[Required]]:
    """Per image name (a BuildSpec's target), the libraries its matrix target requires on every requested arch
    (`coverage_required` in matrix.yaml)."""
    out: dict[str, list[Required]] = {}
    for spec in specs:
        names = spec.plan.target.coverage_required if spec.plan is not None else ()
        if names:
            out[spec.target] = [Required.parse(name) for name in names]
    return out


def add_coverage(
    engine: Engine,
    results: list[TargetResult],
    matrix_path: Path,
    report: Path,
    required: dict[str, list[Required]] | None = None,
) -> list[str]:
    """The build hook: for each built target scan, judge, write `<report dir>/coverage/<target>.json`, then fail
    it (a disallowed gap: the build exits 3 naming library and arch) or add the coverage layer. `required`: per
    target name, the libraries that must run on every requested arch (judge). Each result's `coverage` says where
    the document is or why there is none; the warning lines (an image without python3 is not scanned) are
    returned for the command to print."""
    built = [r for r in results if r.ok and r.image_id and r.tags]
    dists = distributions_of(matrix_path) if built else {}
    warnings: list[str] = []
    for result in built:
        try:
            need = (required or {}).get(result.target, [])
            doc = judge(scan_image(engine, str(result.image_id)), dists, result.target, need)
            path = report.parent / "coverage" / f"{result.target}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc.to_dict(), indent=1) + "\n", encoding="utf-8")
            result.coverage = str(path)
            if not doc.ok:
                result.ok, result.failed_step = False, disallowed(doc)
                result.log_tail = [f"{g.library}: {g.arch}: {g.why}" for g in doc.gaps if not g.allowed]
                continue
            result.image_id = add_layer(engine, result.tags[0], result.tags, doc)
        except NoPython:
            result.coverage = NO_PYTHON
            warnings.append(f"{result.target}: arch coverage {NO_PYTHON}")
        except (CoverageError, OSError, ValueError) as exc:
            result.ok, result.failed_step, result.log_tail = False, f"arch coverage: {exc}", [str(exc)]
    return warnings
