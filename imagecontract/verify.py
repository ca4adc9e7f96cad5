"""Compare the code objects a library holds with the requested arch list; write kernels.json.

Runs on the host (`imagebuild kernels verify`) and in the image's kernel builder stage
(`python3 /opt/imagebuild/imagecontract/verify.py FILE --arch LIST --json-out PATH`). The request is parsed by
the contract's target parser, so every ID the host renders into a build reads back unchanged here.
"""

from __future__ import annotations

import sys

if not __package__:  # run as a file: the folder holding imagecontract/ goes on the path (image: /opt/imagebuild)
    from pathlib import Path as _Path

    sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

from imagecontract.atomic import check_output, write_atomic
from imagecontract.codeobjects import Listing, VerifyError, list_code_objects
from imagecontract.models.kernels import KernelsReport
from imagecontract.targets import TargetError, device_configs, loads_on, parse_list


@dataclass(frozen=True)
class Requested:
    """A parsed arch request: target IDs (features kept, LLVM order) and the PTX wanted (`compute_90`)."""

    code_objects: tuple[str, ...]
    ptx: tuple[str, ...] = ()


def parse_arch_list(text: str) -> Requested:
    """Any list the host accepts (`gfx942:sramecc+:xnack-`, `sm_90+PTX`, `9.0`, `Hopper`) -> code objects + PTX."""
    try:
        targets = parse_list(text, variants=True)
    except TargetError as exc:
        raise VerifyError(str(exc)) from None
    if not targets:
        raise VerifyError("empty arch list (give e.g. 'gfx90a;gfx942' or 'sm_80,sm_90' or '8.0;9.0')")
    code = tuple(t.id if t.vendor == "amd" else t.processor for t in targets)
    return Requested(code, tuple(p for t in targets if (p := t.ptx_id)))


@dataclass(frozen=True)
class Comparison:
    """Targets missing from / code objects not asked for in the library; empty both means it matches."""

    missing: list[str]
    unexpected: list[str]

    @property
    def ok(self) -> bool:
        return not self.missing and not self.unexpected


# AMD: LLVM's isCompatibleTargetID (imagecontract.targets.loads_on). A device always has a concrete setting, so
# a request leaving a feature unspecified asks for code that loads on both settings (device_configs).
def _satisfied(want: str, have: list[str]) -> bool:
    if not want.startswith("gfx"):
        return want in have  # CUDA: sm_90, sm_90a and compute_90 are each their own target
    devices = device_configs(want)
    return devices is not None and all(any(loads_on(c, d) for c in have) for d in devices)


def _wanted(have: str, wants: list[str]) -> bool:
    if not have.startswith("gfx"):
        return have in wants
    return any(loads_on(have, d) for w in wants for d in device_configs(w) or [])


def compare(listing: Listing, requested: Requested) -> Comparison:
    """Missing: a requested target some device of which no code object loads on (LLVM's target ID rules).
    Unexpected: a code object that loads on no requested device. PTX entries compare exactly."""
    have = [*listing.code_objects, *listing.ptx]
    want = [*requested.code_objects, *requested.ptx]
    missing = [w for w in want if not _satisfied(w, have)]
    unexpected = [h for h in have if not _wanted(h, want)]
    return Comparison(sorted(dict.fromkeys(missing)), sorted(dict.fromkeys(unexpected)))


def report(listing: Listing, requested: Requested) -> dict[str, object]:
    """The kernels.json document of the contract (imagecontract.models.kernels)."""
    return KernelsReport(
        library=listing.library,
        requested=list(requested.code_objects),
        code_objects=list(listing.code_objects),
        ptx=list(listing.ptx),
    ).to_dict()


def describe(listing: Listing, requested: Requested, result: Comparison) -> list[str]:
    """Human-readable lines: what the library holds, and the verdict."""
    lines = [f"{listing.library}:"]
    lines += [f"  code object  {c}" for c in listing.code_objects] or ["  (no device code objects)"]
    lines += [f"  ptx          {p}" for p in listing.ptx]
    asked = " ".join(list(requested.code_objects) + list(requested.ptx))
    lines.append(f"requested: {asked}")
    if result.ok:
        lines.append("ok: code objects match the requested arches")
    return lines


def mismatch_message(result: Comparison) -> str:
    parts = []
    if result.missing:
        parts.append(f"missing {', '.join(result.missing)}")
    if result.unexpected:
        parts.append(f"not requested {', '.join(result.unexpected)}")
    return "code objects differ from the requested arches: " + "; ".join(parts)


def write_report(path: str | Path, doc: dict[str, object]) -> None:
    """kernels.json, written atomically at mode 0644 (it is copied into the final image)."""
    import json

    write_atomic(path, json.dumps(doc, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Standalone entry point: 0 match, 1 difference, 2 bad input."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--arch", required=True, help="requested arches, e.g. 'gfx90a;gfx942' or '8.0;9.0+PTX'")
    parser.add_argument("--json-out", help="write the kernels.json document here")
    parser.add_argument(
        "--installed-as",
        metavar="PATH",
        help="the library's path in the final image, recorded in kernels.json when FILE is a staged copy",
    )
    args = parser.parse_args(argv)
    if args.json_out:  # a device, FIFO or folder there is refused before the library is read
        try:
            check_output(args.json_out)
        except OSError as exc:
            print(f"error: cannot write {args.json_out}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    try:
        requested = parse_arch_list(args.arch)
        listing = list_code_objects(args.file)
        if args.installed_as:
            listing = replace(listing, library=args.installed_as)
    except VerifyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = compare(listing, requested)
    print("\n".join(describe(listing, requested, result)))
    if not result.ok:
        print(f"error: {mismatch_message(result)}", file=sys.stderr)
        return 1
    if args.json_out:
        try:
            write_report(args.json_out, report(listing, requested))
        except OSError as exc:
            print(f"error: cannot write {args.json_out}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
