#!/usr/bin/env python3
"""Image entrypoint: put a baked, validated TunableOp results file in place, then `exec "$@"`.

Installed as /opt/imagebuild/bin/tunableop-entrypoint (image side: stdlib, torch only when needed). torch
rejects a results file whose validators differ from its own and then tunes again from nothing, so a baked
file from /opt/imagebuild/tunableop/ is copied to where PYTORCH_TUNABLEOP_FILENAME points (one file per
device ordinal, under the mounted /data/tunableop/) only when its validators equal the live torch's, and
only when no file is there yet: results users tuned themselves are never overwritten. Any failure here is a
warning: the serving command always starts. Before that, the preflight (imagecontract/preflight.py) refuses, exit
78, a GPU the image holds no code for, an unopenable device node or a stale HSA_OVERRIDE_GFX_VERSION.

Options before `--` (set in ENTRYPOINT by the image, never by users): `--default-command PROG` makes arguments
that start with `-` (or none) flags of PROG, so `docker run IMAGE --model-id X` runs `PROG --model-id X` while
`docker run IMAGE python3 -m smoke` runs that command; `--ldconfig` refreshes the loader cache first (driver
libraries the container runtime mounted), as TGI's tgi-entrypoint.sh does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path


def _contract_on_path() -> None:
    """Run as a file (/opt/imagebuild/bin/tunableop-entrypoint, or from the repo): put imagecontract/ on the path."""
    for folder in Path(__file__).resolve().parents:
        if (folder / "imagecontract" / "__init__.py").is_file():
            sys.path.insert(0, str(folder))
            return


_contract_on_path()
from imagecontract import preflight, tunableop_csv  # noqa: E402
from imagecontract.atomic import write_atomic  # noqa: E402
from imagecontract.tunableop_csv import resolve_filename  # noqa: E402

BAKED_DIR = Path(os.environ.get("IMAGEBUILD_TUNABLEOP_BAKED_DIR", "/opt/imagebuild/tunableop"))


def log(msg: str) -> None:
    print(f"tunableop-entrypoint: {msg}", file=sys.stderr, flush=True)


def read_validators(path: Path) -> dict[str, str]:
    """The validators torch reads from a results file (the contract's reader: lines split where torch splits)."""
    return tunableop_csv.validators(tunableop_csv.read_text(path))


def pick_baked(baked_dir: Path, live: dict[str, str]) -> Path | None:
    """The first baked file whose validators equal the live ones exactly (torch's own test)."""
    for candidate in sorted(baked_dir.glob("*.csv")):
        try:
            if read_validators(candidate) == live:
                return candidate
        except (OSError, UnicodeDecodeError) as exc:
            log(f"skipping {candidate}: {exc}")
    return None


def install(source: Path, targets: list[str]) -> list[str]:
    """Copy source to each target that does not exist yet (temp file + rename); return those written."""
    written = []
    for target in targets:
        if os.path.exists(target):
            continue
        write_atomic(target, source.read_bytes())  # temp file + rename, mode 0644
        written.append(target)
    return written


PROBE = """
import json, torch
out = None
if torch.cuda.is_available():
    torch.cuda.set_device(0)
    live = dict(torch.cuda.tunable.get_validators())
    arch = live.get("GCN_ARCH_NAME")
    same = [i for i in range(torch.cuda.device_count())
            if arch is None or getattr(torch.cuda.get_device_properties(i), "gcnArchName", arch) == arch]
    out = {"validators": live, "ordinals": same}
print("TUNABLEOP-PROBE " + json.dumps(out))
"""


def live_validators() -> tuple[dict[str, str], list[int]] | None:
    """The validators this image's torch registers on this GPU, and the ordinals of same-arch devices.

    Asked in a child process with TunableOp switched off, so that torch opens no results file here.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTORCH_TUNABLEOP_")}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    for line in proc.stdout.splitlines():
        if line.startswith("TUNABLEOP-PROBE "):
            found = json.loads(line.removeprefix("TUNABLEOP-PROBE "))
            return (found["validators"], found["ordinals"]) if found else None
    raise RuntimeError(f"torch probe failed: {proc.stderr.strip().splitlines()[-1:]}")


Live = tuple[dict[str, str], list[int]]


def prepare(
    env: dict[str, str], baked_dir: Path = BAKED_DIR, probe: Callable[[], Live | None] = live_validators
) -> list[str]:
    """Make the results folder and, when there is none yet, install the matching baked file.

    probe: what asks torch for the live validators (tests on GPU-less machines pass their own).
    """
    pattern = env.get("PYTORCH_TUNABLEOP_FILENAME")
    if not pattern:
        return []
    folder = os.path.dirname(pattern)
    if folder:
        os.makedirs(folder, exist_ok=True)  # torch does not create it, and would then save nothing
    if env.get("PYTORCH_TUNABLEOP_ENABLED") != "1" or not baked_dir.is_dir() or not any(baked_dir.glob("*.csv")):
        return []
    if os.path.exists(resolve_filename(pattern, 0)):
        return []
    found = probe()
    if found is None:
        log("no GPU visible; baked TunableOp results not installed")
        return []
    live, ordinals = found
    source = pick_baked(baked_dir, live)
    if source is None:
        log(f"no baked results in {baked_dir} match this GPU and software ({live}); torch will tune anew")
        return []
    written = install(source, [resolve_filename(pattern, i) for i in ordinals])
    for target in written:
        log(f"installed {source} -> {target}")
    return written


def command_line(args: list[str]) -> tuple[list[str], bool]:
    """Split `[--default-command PROG] [--ldconfig] [--] ARGS` into the command to exec and the ldconfig wish."""
    default: str | None = None
    ldconfig = False
    rest = list(args)
    while rest:
        if rest[0] == "--default-command" and len(rest) > 1:
            default, rest = rest[1], rest[2:]
        elif rest[0] == "--ldconfig":
            ldconfig, rest = True, rest[1:]
        elif rest[0] == "--":
            rest = rest[1:]
            break
        else:
            break
    if default is not None and (not rest or rest[0].startswith("-")):
        rest = [default, *rest]
    return rest, ldconfig


def refresh_loader_cache() -> None:
    """Run ldconfig when it exists and may write the cache (root); a failure is no reason not to start."""
    path = shutil.which("ldconfig")
    if path is None or os.geteuid() != 0:
        return
    proc = subprocess.run([path], capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        log(f"ldconfig exited {proc.returncode}; the loader cache was not refreshed")


def main(argv: list[str]) -> int:
    command, ldconfig = command_line(argv[1:])
    if not command:
        log("usage: tunableop-entrypoint [--default-command PROG] [--ldconfig] [--] COMMAND [ARG...]")
        return 2
    try:  # right image, right GPU: refuse (exit 78) before the server starts, not with a kernel error later
        refused = preflight.run(dict(os.environ))
    except Exception as exc:  # noqa: BLE001 - the GPU was not checked: never start the server unchecked
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        print(f"preflight: refused: the check could not decide ({reason})", file=sys.stderr, flush=True)
        refused = preflight.EXIT_REFUSED
    if refused:
        return refused
    try:
        if ldconfig:
            refresh_loader_cache()
        prepare(dict(os.environ))
    except Exception as exc:  # never keep the server from starting
        log(f"warning: {type(exc).__name__}: {exc}")
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        log(f"cannot run {command[0]!r}: {exc.strerror}")
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv))
