"""Matrix references checked at load (issue 30, item 4): a size budget for no target, a budget naming one OCI
platform's image, a serve placeholder nothing fills and limits without the port the guard takes are each one located
error line (file:line:column: key.path: ...), exit 2, nothing written: before, the first two were found only after
the builds (build/sizes.py) and the last two only when the smoke suite started the server.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from imagebuild.matrix import load_text

REPO = Path(__file__).resolve().parents[1]
GOOD = (REPO / "matrix.yaml").read_text()

BUDGET = "  local-cpu: {unpacked_mb: 1700}"
CPU_SERVE = 'serve: [serve, --host, 127.0.0.1, --port, "{port}", --device, cpu, --dtype, float32, "{model}"]'
TGI_PORT = '--port, "{port}", --hostname'

# (id, old, new, the error's text, the line the error must point at)
CASES = [
    (
        "budget-typo",
        BUDGET,
        "  local-cpux: {unpacked_mb: 1700}",
        "size_budgets.local-cpux: unknown target 'local-cpux'; did you mean 'local-cpu'?",
        "local-cpux:",
    ),
    (
        "budget-for-no-close-target",
        BUDGET,
        "  zzz: {unpacked_mb: 1700}",
        "size_budgets.zzz: unknown target 'zzz'; expected one of: rocm6.1-torch2.3, cuda12.1-torch2.3, local-cpu",
        "zzz:",
    ),
    (
        "budget-names-a-platform-image",
        BUDGET,
        "  local-cpu-linux-arm64: {unpacked_mb: 1700}",
        "unknown target 'local-cpu-linux-arm64': a budget is per target and holds on every OCI platform it is built "
        "for (linux/arm64 included); name 'local-cpu'",
        "local-cpu-linux-arm64:",
    ),
    (
        "serve-placeholder-typo",
        CPU_SERVE,
        CPU_SERVE.replace('"{model}"', '"{modle}"'),
        "runtimes.transformers-serve.serve[9]: unknown placeholder '{modle}'; did you mean '{model}'?",
        '"{modle}"',
    ),
    (
        "upstream-port-without-limits",
        TGI_PORT,
        '--port, "{upstream_port}", --hostname',
        "runtimes.text-generation-inference.serve[3]: unknown placeholder '{upstream_port}' (the guard of a runtime "
        "with limits fills it)",
        '"{upstream_port}"',
    ),
    (
        "limits-without-port",
        CPU_SERVE,
        CPU_SERVE.replace(' --port, "{port}",', ""),
        "runtimes.transformers-serve.limits: limits put the guard on '{port}' and the runtime behind it, but serve "
        "never names '{port}'",
        "limits: {max_new_tokens",
    ),
]


@pytest.mark.parametrize(("case", "old", "new", "expected", "line_text"), CASES, ids=[c[0] for c in CASES])
def test_a_dangling_reference_is_one_located_error(tmp_path: Path, cli, case, old, new, expected, line_text) -> None:  # type: ignore[no-untyped-def]
    assert GOOD.count(old) == 1, f"fixture drift: {old!r}"
    text = GOOD.replace(old, new)
    bad = tmp_path / "matrix.yaml"
    bad.write_text(text)
    out = tmp_path / "out"
    result = cli("--matrix", str(bad), "render", "--out", str(out))
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.exception is None, f"traceback instead of an error line: {result.exception!r}"
    lines = [line for line in result.stderr.splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}:"), result.stderr
    assert expected in lines[0], lines[0]
    line_no = next(i for i, line in enumerate(text.splitlines(), 1) if line_text in line)
    assert re.match(rf"error: {re.escape(str(bad))}:{line_no}:\d+: ", lines[0]), (line_no, lines[0])
    assert not out.exists(), "nothing may be written for a bad matrix"


def test_the_matrix_references_resolve_and_the_guard_placeholder_is_known_with_limits() -> None:
    matrix = load_text(GOOD, REPO / "matrix.yaml")
    assert set(matrix.model.size_budgets) <= {t.name for t in matrix.targets}
    # a runtime with limits may name the guard's port itself (the guard fills it)
    text = GOOD.replace(CPU_SERVE, CPU_SERVE.replace('"{model}"]', '"{model}", --x, "{upstream_port}"]'))
    assert load_text(text, REPO / "matrix.yaml").model.runtimes["transformers-serve"].serve[-1] == "{upstream_port}"
