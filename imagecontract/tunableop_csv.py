"""The TunableOp results file as torch reads and writes it: the one splitter and writer of host and image.

torch reads it in TuningContext::ReadFile (pytorch/pytorch b89ba381d63b, aten/src/ATen/cuda/tunable/Tunable.cpp):
lines come from `std::getline(file, line)`, so only `\\n` ends a line (a `\\r`, form feed or U+2028 stays in it,
where Python's str.splitlines would split); an empty line is skipped; fields come from
`std::getline(line_as_stream, part, ',')`, which drops one trailing empty field. `Validator,KEY,VALUE[,...]`
sets validators[KEY] = VALUE (a later line wins); other lines of 3+ fields are `Op,Params,Solution[,ms]`
(the first result for an op and params wins). WriteFile writes validators first, then one line per result.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence

from imagecontract.blob import read_bounded


def split_fields(line: str) -> list[str]:
    """Fields as torch's getline on ',' gives them: `a,b,` is two fields, `a,,b` three."""
    parts = line.split(",")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return parts


def records(text: str) -> Iterator[tuple[int, str, list[str]]]:
    """(line number, line, fields) of every non-empty line, split exactly where torch splits."""
    for lineno, line in enumerate(text.split("\n"), start=1):
        if line:
            yield lineno, line, split_fields(line)


def validators(text: str) -> dict[str, str]:
    """The validators torch would read from the file."""
    found: dict[str, str] = {}
    for _, _, parts in records(text):
        if parts[0] == "Validator" and len(parts) >= 3:
            found[parts[1]] = parts[2]
    return found


def results(text: str) -> list[list[str]]:
    """The result lines torch would load (3+ fields, not a validator), first one per (op, params)."""
    seen: set[tuple[str, str]] = set()
    rows = []
    for _, _, parts in records(text):
        if parts[0] != "Validator" and len(parts) >= 3 and (parts[0], parts[1]) not in seen:
            seen.add((parts[0], parts[1]))
            rows.append(parts)
    return rows


MAX_RESULTS = 64 << 20  # one results file (torch's: one line per tuned GEMM, a few KiB to MiB)


def read_text(path: str | os.PathLike[str]) -> str:
    """The text with no newline translation: Python's text mode turns `\\r\\n` into `\\n`, torch does not."""
    return read_bounded(path, MAX_RESULTS, what="a TunableOp results file").decode("utf-8")


def render(validator_values: Mapping[str, str], rows: Sequence[Sequence[str]]) -> str:
    """The file as torch writes it: validators first, then one line per result."""
    lines = [f"Validator,{k},{v}" for k, v in validator_values.items()]
    lines += [",".join(row) for row in rows]
    return "\n".join(lines) + "\n"


def resolve_filename(pattern: str, device: int) -> str:
    """The per-device file name (torch's SetFilename, same file): the ordinal replaces `%d`, else goes before the
    extension of the file name (torch looks for the last `.` of the whole path; a dotted folder differs)."""
    if "%d" in pattern:
        return pattern.replace("%d", str(device))
    head, tail = os.path.split(pattern)
    stem, dot, ext = tail.rpartition(".")
    return os.path.join(head, f"{stem}{device}.{ext}" if dot and stem else f"{tail}{device}")
