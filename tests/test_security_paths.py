"""Paths from the matrix stay in the repository, sources are of the kind their template renders, and target
names fit an image tag (issue 12). Each case goes through the real CLI: exit 2, one located `error:` line, and
nothing written."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def data() -> dict[str, Any]:
    return yaml.safe_load((REPO / "matrix.yaml").read_text())


def rocm(d: dict[str, Any]) -> dict[str, Any]:
    return d["torch"]["2.3"]["builds"]["rocm"]


def set_kernels_path(value: str):
    return lambda d: d["components"]["imagebuild-kernels"]["source"].update(path=value)


CASES: list[tuple[str, Any, str]] = [
    ("kernels-path-dotdot", set_kernels_path("../../etc"), r"components\.imagebuild-kernels\.source\.path"),
    ("kernels-path-absolute", set_kernels_path("/etc"), r"components\.imagebuild-kernels\.source\.path"),
    ("kernels-path-inner-dotdot", set_kernels_path("kernels/../../x"), r"imagebuild-kernels\.source\.path"),
    ("kernels-path-symlink-out", set_kernels_path("escape"), r"leaves the repository"),
    (
        "pip-requirements-symlink-out",
        lambda d: d["runtimes"]["transformers-serve"].update(requirements="escape/requirements.txt"),
        r"runtimes\.transformers-serve\.requirements: 'escape/requirements\.txt' leaves the repository",
    ),
    (
        "patch-path",
        lambda d: rocm(d).update(patches=[{"name": "p", "path": "kernels"}]),
        r"patches\[0\]: a patch is a url .* or a git commit",
    ),
    (
        "patch-git-without-commit",
        lambda d: rocm(d).update(patches=[{"name": "p", "git": "https://github.com/x/y", "ref": "main"}]),
        r"patches\[0\]: a patch is a url",
    ),
    (
        "patch-dotdot-name",
        lambda d: rocm(d).update(patches=[{"name": "../p", "url": "https://example.org/p.patch"}]),
        r"patches\[0\]\.name",
    ),
    (
        "torch-source-by-path",
        lambda d: rocm(d).update(source={"path": "kernels"}),
        r"builds\.rocm\.source: needs a git source",
    ),
    (
        "kernels-component-from-git",
        lambda d: d["components"]["imagebuild-kernels"].update(
            source={"git": "https://github.com/x/y", "commit": "1" * 40}
        ),
        r"imagebuild-kernels\.source: needs a path source",
    ),
    (
        "python-ext-from-url",
        lambda d: d["components"]["vllm-rocm"].update(source={"url": "https://example.org/x.tar.gz"}),
        r"vllm-rocm\.source: needs a git source",
    ),
    (
        "tgi-from-path",
        lambda d: d["runtimes"]["text-generation-inference"].update(source={"path": "kernels"}),
        r"text-generation-inference\.source: needs a git source",
    ),
    (
        "tgi-requirements-dotdot",
        lambda d: d["runtimes"]["text-generation-inference"]["server"]["rocm"].update(requirements="../../etc/passwd"),
        r"server\.rocm\.requirements",
    ),
    (
        "tunableop-results-relative",
        lambda d: d["tunableop"].update(results_dir="../data"),
        r"tunableop\.results_dir",
    ),
    (
        "subdir-dotdot",
        lambda d: d["components"]["vllm-rocm"]["source"].update(subdir="../x"),
        r"vllm-rocm\.source\.subdir",
    ),
    (
        "target-name-129",
        lambda d: d["targets"][1].update(name="x" * 129),
        r"targets\[1\]\.name: target name 'x{20,}\.\.\. is not a valid image tag \(at most 128",
    ),
    (
        "target-name-from-long-parts",
        lambda d: d["targets"][0].update(name="{platform}-torch{torch}-" + "y" * 120),
        r"targets\[0\]\.name: .* is not a valid image tag \(at most 128",
    ),
]


@pytest.mark.parametrize("case,mutate,expected", CASES, ids=[c[0] for c in CASES])
def test_refused_with_a_located_line_and_nothing_written(tmp_path: Path, cli, case, mutate, expected) -> None:
    d = data()
    mutate(d)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "runtimes" / "transformers-serve").mkdir(parents=True)
    (tmp_path / "runtimes" / "transformers-serve" / "requirements.txt").write_text("x==1\n")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    os.symlink(outside, tmp_path / "escape")  # a path inside the checkout that resolves outside it
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(d, sort_keys=False))
    out = tmp_path / "out"
    result = cli("--matrix", str(matrix), "render", "--out", str(out))
    assert result.exception is None, repr(result.exception)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1, result.stderr
    assert re.match(rf"error: {re.escape(str(matrix))}:\d+:\d+: ", lines[0]), lines[0]
    assert re.search(expected, lines[0]), lines[0]
    assert len(lines[0]) < 400
    assert not out.exists()


def test_a_name_of_exactly_128_characters_is_a_tag(tmp_path: Path, cli) -> None:
    d = data()
    old, d["targets"][1]["name"] = d["targets"][1]["name"], "l" * 128
    if old in d.get("size_budgets", {}):  # a budget names its target (checked at load)
        d["size_budgets"]["l" * 128] = d["size_budgets"].pop(old)
    (tmp_path / "kernels").mkdir()
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(d, sort_keys=False))
    result = cli("--matrix", str(matrix), "matrix", "list", "--json")
    assert result.exit_code == 0, result.stderr
    assert "l" * 128 in result.stdout
