"""In-image preflight: refuse, with one line, to start a server on a GPU this image holds no code for.

Run by the image entrypoint before the server (and as `python3 /opt/imagebuild/imagecontract/preflight.py`).
Stdlib only, no GPU runtime: it reads the driver (imagecontract.driver), the image's manifest and the
environment, and compares with the contract's covers (LLVM's target ID rule; CUDA's cubin, `a`/`f` and PTX rules).
Exit 0 (go on, maybe after warnings), EXIT_REFUSED (78, sysexits' EX_CONFIG: the container is misconfigured for
this GPU; docs/contracts.md). `IMAGEBUILD_SKIP_PREFLIGHT=1` skips it, saying so. The HSA_OVERRIDE_GFX_VERSION
rules are the table in docs/preflight.md.
"""

from __future__ import annotations

import sys

if not __package__:  # run as a file: the folder holding imagecontract/ goes on the path (image: /opt/imagebuild)
    from pathlib import Path as _Path

    sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import errno
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from imagecontract import kinds
from imagecontract.blob import UnreadableFile, read_bounded
from imagecontract.driver import Gpu, Identity, Query, driver_version, min_driver, nodes_for, nvidia_smi_query, visible
from imagecontract.numbers import shown
from imagecontract.targets import covers  # the one rule: LLVM's target ID rule, CUDA's cubin/PTX rules

EXIT_REFUSED = 78
MANIFEST = Path("/opt/imagebuild/manifest.json")
ROOT = Path("/")  # where the driver is read: tests point it at a simulated tree
SKIP_VARIABLE = "IMAGEBUILD_SKIP_PREFLIGHT"
# MAJOR.MINOR.STEPPING, each 1-3 ASCII digits (re.ASCII: `\d` would take other scripts' digits, which the HSA
# runtime's parser does not; int() of thousands of digits raises). MAX_OVERRIDE bounds what is read at all.
_OVERRIDE = re.compile(r"([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})", re.ASCII)
MAX_OVERRIDE = 32
MAX_MANIFEST = 1 << 20


@dataclass(frozen=True)
class Finding:
    level: str  # "refuse" or "warn"
    message: str


def override_arch(value: str) -> str | None:
    """HSA_OVERRIDE_GFX_VERSION `9.4.2` -> gfx942, `11.0.0` -> gfx1100 (stepping in hex, as gfx90a); None if
    malformed."""
    if len(value) > MAX_OVERRIDE:
        return None
    m = _OVERRIDE.fullmatch(value.strip(" \t"))
    return f"gfx{int(m.group(1))}{int(m.group(2))}{int(m.group(3)):x}" if m else None


def _major(arch: str) -> str:
    """gfx942 -> 9, gfx1100 -> 11 (the ISA family: the last two characters are minor and stepping)."""
    return arch[3:-2]


def _instead(target: str, arch: str) -> str:
    return f"use an image built for it (imagebuild build {target} --arch {arch})"


def check_override(value: str | None, gpus: list[Gpu], arches: list[str]) -> tuple[str | None, list[Finding]]:
    """The arch the runtime will report (the override's, else None: each GPU's own) and what the override earns."""
    if value is None:
        return None, []
    if not value.strip(" \t"):
        return None, [Finding("warn", "HSA_OVERRIDE_GFX_VERSION is set but empty: unset it (checked as unset)")]
    forced = override_arch(value)
    if forced is None:
        return None, [
            Finding(
                "refuse",
                f"HSA_OVERRIDE_GFX_VERSION={shown(value)} is not MAJOR.MINOR.STEPPING in ASCII digits "
                "(at most 3 each): unset it",
            )
        ]
    findings: list[Finding] = []
    for gpu in gpus:
        native = gpu.arch or ""
        if _major(native) != _major(forced):
            findings.append(
                Finding(
                    "refuse",
                    f"HSA_OVERRIDE_GFX_VERSION={value} makes {gpu.describe()} run {forced} code of "
                    f"another ISA family: unset it",
                )
            )
        elif native == forced:
            findings.append(
                Finding(
                    "warn",
                    f"HSA_OVERRIDE_GFX_VERSION={value} names {gpu.describe()}'s own arch: it changes nothing, unset it",
                )
            )
        elif covers(arches, native):
            findings.append(
                Finding(
                    "refuse",
                    f"HSA_OVERRIDE_GFX_VERSION={value} makes {gpu.describe()} load {forced} code "
                    f"although the image has {native} code: a stale override, unset it",
                )
            )
        else:
            findings.append(
                Finding(
                    "warn",
                    f"{gpu.describe()} runs {forced} code by HSA_OVERRIDE_GFX_VERSION={value} "
                    "(same ISA family, not supported by AMD)",
                )
            )
    return forced, findings


def check(
    manifest: dict[str, object],
    env: dict[str, str],
    root: Path = Path("/"),
    who: Identity | None = None,
    query: Query = nvidia_smi_query,
) -> list[Finding]:
    """Every finding for this container: GPU arches vs the image's, device nodes, the override."""
    platform = manifest.get("platform")
    name = platform.get("kind") if isinstance(platform, dict) else None
    kind = kinds.PLATFORMS.get(name) if isinstance(name, str) else None
    if kind is None or kind.VENDOR is None:
        return []
    arches = [str(a) for a in [*manifest.get("gpu_arches", []), *manifest.get("experimental_arches", [])]]  # type: ignore[misc]
    target = str(manifest.get("target", "TARGET"))
    flags = kind.RUN_HINT
    if kind.REQUIRED_NODE and not (root / kind.REQUIRED_NODE.lstrip("/")).exists():
        return [
            Finding(
                "warn", f"no {kind.LABEL} GPU passed to this container (no {kind.REQUIRED_NODE}): run it with {flags}"
            )
        ]
    gpus = kind.own_gpus(root, visible(kind.gpus(root, query), env, kind.VISIBLE_VARIABLES))
    if not gpus:
        return [Finding("warn", f"no {kind.LABEL} GPU visible: run it with {flags}")]
    findings: list[Finding] = []
    forced = None
    if kind.OVERRIDE_VARIABLE:
        forced, findings = check_override(env.get(kind.OVERRIDE_VARIABLE), gpus, arches)
    for gpu in gpus:
        device = forced or gpu.arch
        if device is None and kind.ARCH_ALWAYS_KNOWN:  # the driver always says it: a value we cannot read
            findings.append(Finding("refuse", f"{gpu.describe()}: its arch cannot be read, so it cannot be checked"))
        elif device is None:
            findings.append(Finding("warn", f"{gpu.describe()}: the driver does not say its arch; not checked"))
        elif not covers(arches, device):
            findings.append(
                Finding(
                    "refuse",
                    f"{gpu.describe()} is not covered: this image ({target}) holds code for "
                    f"{', '.join(arches) or 'no GPU'}; {_instead(target, device.split(':')[0])}",
                )
            )
    findings += _driver(platform, kind, root) if isinstance(platform, dict) else []
    for node in nodes_for(root, kind.device_paths(gpus), who):
        if not node.exists:
            findings.append(Finding("refuse", f"{node.path} is not in the container: run it with {flags}"))
        elif not node.openable:
            findings.append(
                Finding(
                    "refuse",
                    f"cannot open {node.path} ({node.error}; owned by group {node.gid}, {node.mode}): "
                    f"run it with --group-add {node.gid}",
                )
            )
    return findings


def _driver(platform: dict[str, object], kind: kinds.PlatformKind, root: Path) -> list[Finding]:
    """The manifest's platform.min_driver against the loaded driver (imagecontract.driver.min_driver, the check
    doctor and the smoke suite run too): older is a refusal, unreadable a warning."""
    minimum = platform.get("min_driver")
    live = driver_version(root, kind.DRIVER_FILE, kind.DRIVER_VERSION)
    said = min_driver(str(minimum) if minimum else None, live, kind.LABEL)
    if said is None:
        return []
    return [Finding("refuse" if said[0] == "fail" else "warn", said[1])]


def run(
    env: dict[str, str], root: Path | None = None, manifest_path: Path | None = None, out: TextIO | None = None
) -> int:
    """Print the findings (one line each) and return 0 or EXIT_REFUSED; a missing manifest is no reason to stop."""
    root, manifest_path, out = root or ROOT, manifest_path or MANIFEST, out or sys.stderr
    if env.get(SKIP_VARIABLE) == "1":
        print(f"preflight: skipped ({SKIP_VARIABLE}=1)", file=out, flush=True)
        return 0
    started = time.monotonic()
    try:
        manifest = json.loads(read_bounded(manifest_path, MAX_MANIFEST).decode("utf-8"))
    except FileNotFoundError:
        return 0  # not an imagebuild image: nothing promised, nothing to check
    except UnreadableFile as exc:
        if exc.errno == errno.ENOENT:
            return 0
        findings = [Finding("refuse", f"cannot decide: {exc}")]
    except (OSError, ValueError, RecursionError) as exc:
        reason = " ".join(str(exc).split())[:200]
        findings = [Finding("refuse", f"cannot decide: the manifest {manifest_path} is not JSON ({reason})")]
    else:
        findings = _decide(manifest, env, root)
    refused = [f for f in findings if f.level == "refuse"]
    for finding in findings:
        word = "refused" if finding.level == "refuse" else "warning"
        print(f"preflight: {word}: {finding.message}", file=out, flush=True)
    if refused:
        print(
            f"preflight: the server was not started ({SKIP_VARIABLE}=1 skips this check); "
            f"{time.monotonic() - started:.3f} s",
            file=out,
            flush=True,
        )
        return EXIT_REFUSED
    return 0


def _decide(manifest: object, env: dict[str, str], root: Path) -> list[Finding]:
    """check(), where a manifest of the wrong shape or a check that raises is a refusal (it cannot decide),
    never a server started unchecked."""
    if not isinstance(manifest, dict):
        return [Finding("refuse", "the image's manifest is not a JSON object; cannot decide")]
    try:
        return check(manifest, env, root)
    except Exception as exc:  # noqa: BLE001 - whatever it was, the GPU was not checked
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        return [Finding("refuse", f"the check could not decide ({reason})")]


def main() -> int:
    return run(dict(os.environ))


if __name__ == "__main__":
    sys.exit(main())
