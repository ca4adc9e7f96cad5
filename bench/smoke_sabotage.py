"""Sabotage the ops the smoke suite checks, one op and one dtype at a time, and show the suite fails each one.

Each sabotaged op returns its correct output off by 2% (``scale``: times 1.02; ``noise``: each element times
1 +/- 0.02 at random) for inputs of one dtype and is correct for the others. The check that covers the op (silu,
linear, attention; throughput parts skipped) must fail, with failures naming that dtype (and, for attention,
every backend the manifest promises). Each check also runs unsabotaged first and must pass.

    python3 bench/smoke_sabotage.py --device cuda|cpu [--manifest PATH] [--kernels-json PATH] --out sabotage.json

Exit 0: every control passed and every sabotage was caught; 1 otherwise; 2 usage (manifest unreadable).
Run by bench/gpu_smoke.sh (GPU and CPU mode) and by tests/test_smoke_tolerance.py (CPU).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from smoke import manifest as manifest_mod  # noqa: E402
from smoke.checks import attention, linear, silu  # noqa: E402
from smoke.context import Context  # noqa: E402
from smoke.device import probe  # noqa: E402
from smoke.result import CheckResult  # noqa: E402

ERROR = 0.02
CHECK_MODULES = {"silu": silu, "linear": linear, "attention": attention}
# op -> (the check that covers it, how it is reached: a torch.nn.functional name or a kernels op name)
OPS: dict[str, tuple[str, str]] = {
    "F.silu": ("silu", "functional:silu"),
    "silu_and_mul": ("silu", "kernel:silu_and_mul"),
    "F.linear": ("linear", "functional:linear"),
    "skinny_linear": ("linear", "kernel:skinny_linear"),
    "sdpa": ("attention", "functional:scaled_dot_product_attention"),
}
MODES = ("scale", "noise")
DTYPE_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}


def perturb(out: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "scale":
        return out * (1 + ERROR)
    sign = torch.randint(0, 2, out.shape, device=out.device).to(out.dtype) * 2 - 1
    return out * (1 + ERROR * sign)


def sabotaged(fn: Callable[..., Any], dtype: torch.dtype, mode: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        if isinstance(out, torch.Tensor) and out.dtype == dtype:
            return perturb(out, mode)
        return out

    return wrapper


@contextmanager
def patched(how: str, dtype: torch.dtype, mode: str) -> Iterator[None]:
    """Replace one op for the duration: a torch.nn.functional function, or the kernels op the checks look up."""
    kind, name = how.split(":", 1)
    saved: list[tuple[Any, str, Any]] = []
    if kind == "functional":
        saved.append((F, name, getattr(F, name)))
        setattr(F, name, sabotaged(getattr(F, name), dtype, mode))
    else:
        for module in (silu, linear):
            original = module.op_for_check

            def op_for_check(ctx: Context, res: CheckResult, op_name: str, _orig: Any = original) -> Any:
                op = _orig(ctx, res, op_name)
                return sabotaged(op, dtype, mode) if op is not None and op_name == name else op

            saved.append((module, "op_for_check", original))
            module.op_for_check = op_for_check  # type: ignore[assignment]
    try:
        yield
    finally:
        for owner, attr, value in reversed(saved):
            setattr(owner, attr, value)


@contextmanager
def no_throughput() -> Iterator[None]:
    saved = [(m, m._throughput) for m in CHECK_MODULES.values()]
    for module in CHECK_MODULES.values():
        module._throughput = lambda *a, **k: None  # type: ignore[assignment]
    try:
        yield
    finally:
        for module, fn in saved:
            module._throughput = fn  # type: ignore[assignment]


def check_dtypes(check: str, on_gpu: bool) -> list[torch.dtype]:
    if check == "attention":
        return attention.dtypes_for(on_gpu)
    return [torch.float16, torch.bfloat16] if on_gpu else [torch.float16, torch.bfloat16, torch.float32]


def op_available(ctx: Context, op: str) -> bool:
    how = OPS[op][1]
    if how.startswith("functional:"):
        return True
    from smoke.ops import find_op

    return find_op(ctx, how.split(":", 1)[1])[0] is not None


def run(ctx: Context, modes: tuple[str, ...] = MODES, ops: tuple[str, ...] = tuple(OPS)) -> dict[str, Any]:
    backends, _ = ctx.manifest.attention_backends(ctx.info.arch, ctx.info.vendor)
    doc: dict[str, Any] = {"device": ctx.info.device, "arch": ctx.info.arch, "error": ERROR, "controls": {}}
    rows: list[dict[str, Any]] = []
    with no_throughput():
        for name, module in CHECK_MODULES.items():
            res = module.run(ctx)
            doc["controls"][name] = {"status": res.status, "reason": res.reason}
        for op in ops:
            check, how = OPS[op]
            if not op_available(ctx, op):
                rows.append({"op": op, "check": check, "available": False})
                continue
            for dtype in check_dtypes(check, ctx.on_gpu):
                if op == "skinny_linear" and dtype == torch.float32:
                    continue  # skinny_linear's contract is half types only (smoke/checks/linear.py)
                dname = DTYPE_NAMES[dtype]
                for mode in modes:
                    with patched(how, dtype, mode):
                        res = CHECK_MODULES[check].run(ctx)
                    naming = [f for f in res.failures if re.search(rf"(?<![a-z]){dname}\b", f)]
                    row: dict[str, Any] = {
                        "op": op,
                        "check": check,
                        "dtype": dname,
                        "mode": mode,
                        "status": res.status,
                        "failures": len(res.failures),
                        "failures_naming_dtype": len(naming),
                        "first_failure": naming[0][:300] if naming else (res.reason or "")[:300],
                    }
                    caught = res.status == "failed" and bool(naming)
                    if check == "attention":
                        missed = [b for b in backends if not any(f.startswith(f"{b} {dname} ") for f in naming)]
                        row["backends"] = backends
                        row["backends_missed"] = missed
                        caught = caught and not missed
                    row["caught"] = caught
                    rows.append(row)
    doc["sabotages"] = rows
    tried = [r for r in rows if r.get("available", True)]
    doc["controls_passed"] = all(c["status"] == "passed" for c in doc["controls"].values())
    doc["caught"] = sum(r["caught"] for r in tried)
    doc["tried"] = len(tried)
    doc["all_caught"] = bool(tried) and all(r["caught"] for r in tried)
    doc["not_available"] = [r["op"] for r in rows if not r.get("available", True)]
    return doc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cuda", "cpu"], required=True)
    p.add_argument("--manifest")
    p.add_argument("--kernels-json")
    p.add_argument("--out", type=Path)
    p.add_argument("--modes", default=",".join(MODES), help=f"comma separated subset of {', '.join(MODES)}")
    p.add_argument("--ops", default=",".join(OPS), help=f"comma separated subset of {', '.join(OPS)}")
    args = p.parse_args(argv)
    try:
        manifest = manifest_mod.load(args.manifest, args.kernels_json)
    except manifest_mod.ManifestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    modes = tuple(m for m in args.modes.split(",") if m)
    ops = tuple(o for o in args.ops.split(",") if o)
    unknown = [m for m in modes if m not in MODES] + [o for o in ops if o not in OPS]
    if unknown or not modes or not ops:
        print(f"error: unknown or empty --modes/--ops: {', '.join(unknown) or 'none given'}", file=sys.stderr)
        return 2
    ctx = Context(info=probe(args.device), manifest=manifest, debug=False)
    doc = run(ctx, modes, ops)
    for r in doc["sabotages"]:
        if not r.get("available", True):
            print(f"n/a     {r['op']:14} (not registered here)")
            continue
        verdict = "caught" if r["caught"] else "MISSED"
        print(f"{verdict:7} {r['op']:14} {r['dtype']:9} {r['mode']:6} {r['first_failure'][:110]}")
    print(
        f"sabotage: controls {'passed' if doc['controls_passed'] else 'FAILED ' + json.dumps(doc['controls'])}, "
        f"{doc['caught']}/{doc['tried']} caught"
    )
    if args.out:
        args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0 if doc["controls_passed"] and doc["all_caught"] else 1


if __name__ == "__main__":
    sys.exit(main())
