"""``python -m smoke``: run the checks, print a summary, write the reports.

Exit codes: 0 nothing failed, 1 a check failed, 2 usage error (bad option, unreadable manifest or baseline).
"""

from __future__ import annotations

import argparse
import difflib
import re
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from imagecontract.atomic import check_output, write_atomic
from imagecontract.models import SmokeReport
from imagecontract.models.smoke_report import ManifestSeen
from smoke import baseline as baseline_mod
from smoke import manifest as manifest_mod
from smoke import report as report_mod
from smoke import torch_names
from smoke.result import FAILED, CheckResult

if TYPE_CHECKING:  # smoke.context imports torch: only once torch has imported (main)
    from smoke.context import Context

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
CHECK_NAMES = ["environment", "imports", "silu", "linear", "attention", "tunableop", "runtime"]


class UsageError(Exception):
    """Printed as one ``error:`` line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(prog="python -m smoke", description="In-image smoke suite for imagebuild images.")
    p.add_argument("--device", choices=torch_names.DEVICES, default="auto")
    p.add_argument("--report", metavar="PATH", help="write the JSON report here")
    p.add_argument("--junit", metavar="PATH", help="write JUnit XML here")
    p.add_argument("--baseline", metavar="FILE", help="a previous report: throughput drops fail")
    p.add_argument("--baseline-tolerance", type=float, default=0.10, metavar="FRACTION")
    p.add_argument("--only", metavar="NAMES", help=f"comma/space separated subset of: {', '.join(CHECK_NAMES)}")
    p.add_argument("--manifest", metavar="PATH", help="image manifest (default $IMAGEBUILD_MANIFEST or /opt/...)")
    p.add_argument("--kernels-json", metavar="PATH", help="kernels.json (default /opt/imagebuild/kernels.json)")
    p.add_argument("--debug", action="store_true", help="print tracebacks of checks that raised")
    args = p.parse_args(argv)
    if not 0 <= args.baseline_tolerance < 1:
        raise UsageError("--baseline-tolerance must be in [0, 1)")
    args.only_list = select(args.only)
    for path in (args.report, args.junit):  # a device, FIFO or folder there: refused before any check runs
        if path:
            try:
                check_output(path)
            except OSError as exc:
                raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return args


def select(only: str | None) -> list[str]:
    if only is None:
        return list(CHECK_NAMES)
    names = [n for n in re.split(r"[,;\s]+", only) if n]
    if not names:  # `--only ','` or an unset variable: running nothing is not a pass
        raise UsageError(f"--only names no check; give one or more of: {', '.join(CHECK_NAMES)}")
    for name in names:
        if name not in CHECK_NAMES:
            close = difflib.get_close_matches(name, CHECK_NAMES, n=1)
            hint = f" Perhaps you meant {close[0]!r}?" if close else f" Known: {', '.join(CHECK_NAMES)}."
            raise UsageError(f"--only: unknown check {name!r}.{hint}")
    return [n for n in CHECK_NAMES if n in names]


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        manifest = manifest_mod.load(args.manifest, args.kernels_json)
        base = baseline_mod.load(args.baseline) if args.baseline else None
    except (UsageError, manifest_mod.ManifestError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return run_suite(args, manifest, base)


def run_suite(args: argparse.Namespace, manifest: manifest_mod.Manifest, base: SmokeReport | None) -> int:
    # torch is imported only here, so usage errors answer fast and without it.
    try:
        import torch  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a broken torch is the image's failure, reported as such
        return _no_torch(args, manifest, f"import torch failed: {type(exc).__name__}: {exc}")
    from smoke.checks import CHECKS
    from smoke.context import Context
    from smoke.device import probe

    ctx = Context(info=probe(args.device), manifest=manifest, debug=args.debug)
    if not manifest.present:
        print(f"smoke: no manifest at {manifest.path}: running with defaults")
    where = f"{ctx.info.device} {ctx.info.arch}" + (f" ({ctx.info.name})" if ctx.info.name else "")
    print(f"smoke: device {where}, torch {ctx.info.versions['torch']}")
    results: list[CheckResult] = []
    gpu_down = False
    for name in args.only_list:
        start = time.perf_counter()
        if gpu_down and name not in ("environment", "runtime"):
            res = CheckResult(name).skip("no usable GPU (see the environment check)")
        else:
            res = _run_one(name, CHECKS[name], ctx)
        res.duration_s = time.perf_counter() - start
        if name == "environment" and args.device == torch_names.GPU and not ctx.on_gpu:
            gpu_down = True
        results.append(res)
    extra: dict[str, Any] = {
        "command": " ".join(["python -m smoke", *(shlex.quote(a) for a in args.argv)]),
        "options": {"device": args.device, "only": args.only_list},
    }
    if base is not None:
        extra["baseline"] = {
            "file": args.baseline,
            **baseline_mod.apply(results, base, ctx.info.arch, args.baseline_tolerance),
        }
    for res in results:
        _print_result(res)
    rep = report_mod.build(ctx, results, extra)
    return _finish(args, rep, results)


def _no_torch(args: argparse.Namespace, manifest: manifest_mod.Manifest, reason: str) -> int:
    results = [CheckResult(n).skip("torch is not importable") for n in args.only_list]
    if results and results[0].name == "environment":
        results[0] = CheckResult("environment", status=FAILED, reason=reason)
    else:
        results.insert(0, CheckResult("environment", status=FAILED, reason=reason))
    info = ManifestSeen(manifest.present, manifest.path, manifest.target)
    rep = report_mod.without_torch(info, results, {"options": {"device": args.device, "only": args.only_list}})
    for res in results:
        _print_result(res)
    return _finish(args, rep, results)


def _finish(args: argparse.Namespace, rep: SmokeReport, results: list[CheckResult]) -> int:
    for path, render in ((args.report, report_mod.to_json), (args.junit, report_mod.to_junit)):
        if not path:
            continue
        try:
            write_atomic(path, render(rep))
        except OSError as exc:
            print(f"error: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_USAGE
    passed, why = report_mod.verdict(results)
    print(f"smoke: {'passed' if passed else 'FAILED: ' + why}")
    return EXIT_OK if passed else EXIT_FAILED


def _run_one(name: str, fn: Callable[[Context], CheckResult], ctx: Context) -> CheckResult:
    try:
        return fn(ctx)
    except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
        if ctx.debug:
            traceback.print_exc()
        res = CheckResult(name)
        res.fail(f"raised {type(exc).__name__}: {exc}")
        return res.finish()


def _print_result(res: CheckResult) -> None:
    line = f"{res.status.upper():7} {res.name:12} {res.duration_s:6.1f}s"
    if res.reason:
        line += f"  {res.reason[:400]}"
    print(line)
    for warning in res.warnings:
        print(f"        warning: {warning}")
