"""The matrix loader against hostile YAML: alias bombs, alias cycles and deep nesting are refused fast with a
location and exit 2; a legitimate merge key with an override loads (issue 12)."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagebuild.errors import ConfigError
from imagebuild.matrix import MAX_DEPTH, MAX_NODES, load_matrix, load_text

REPO = Path(__file__).resolve().parents[1]
MATRIX = (REPO / "matrix.yaml").read_text()


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The classic "billion laughs": each level lists the previous one `width` times (9^9 leaves, ~1.4 KB)."""
    lines = ["a0: &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def merge_bomb(levels: int = 12) -> str:
    """Merge keys that double at every level: flattening them would build 2^levels pairs."""
    lines = ["m0: &m0 {k: v}"]
    for i in range(1, levels):
        lines.append(f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}], k{i}: v}}")
    return "\n".join(lines) + "\n"


def run_cli(matrix: Path, timeout: float = 10) -> tuple[subprocess.CompletedProcess[str], float]:
    """`imagebuild matrix list` in a child bounded in time and memory (the old loader took 53 s and 3.6 GB)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "imagebuild.cli", "--matrix", str(matrix), "matrix", "list"],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit,
        cwd=REPO,
    )
    return done, time.monotonic() - started


HOSTILE = [
    ("alias-bomb", alias_bomb(), f"expands to more than {MAX_NODES} nodes"),
    ("merge-bomb", merge_bomb(levels=20), "expands to more than"),
    ("wide-bomb", alias_bomb(levels=5, width=40), "expands to more than"),
    ("nesting-flow", "x: " + "[" * 500 + "]" * 500 + "\n", f"nested deeper than {MAX_DEPTH} levels"),
    ("nesting-map", "x: " + "{a: " * 500 + "1" + "}" * 500 + "\n", "nested deeper than"),
    ("nesting-block", "".join("  " * i + "a:\n" for i in range(500)) + "  " * 500 + "a: 1\n", "nested deeper than"),
    ("nesting-compact", "- " * 500 + "1\n", "nested deeper than"),
    (
        "nesting-through-aliases",
        "".join(f"a{i}: &a{i} {'[' * 10}{f'*a{i - 1}' if i else 1}{']' * 10}\n" for i in range(20)),
        "nested deeper than",
    ),  # noqa: E501
    ("alias-cycle", "a: &a [*a]\n", "an alias refers to a node that contains it"),
    ("merge-cycle", "a: &a {<<: *a}\n", "an alias refers to a node that contains it"),
    ("bad-timestamp", "schema_version: 2020-13-45\n", "cannot read this value"),
    ("control-character", "schema_version: 1\x07\n", "special characters are not allowed"),
    ("nul-byte", "schema_version: 1\n\x00\n", "special characters"),
    ("merge-of-a-scalar", "a: {<<: 1}\n", "merge key (<<) takes a mapping"),
]


@pytest.mark.parametrize(("name", "text", "message"), HOSTILE, ids=[case[0] for case in HOSTILE])
def test_hostile_yaml_is_refused_fast_with_a_location(tmp_path: Path, cli, name: str, text: str, message: str) -> None:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    started = time.monotonic()
    with pytest.raises(ConfigError):
        load_text(text, path)
    assert time.monotonic() - started < 0.5, f"{name}: the loader took {time.monotonic() - started:.2f} s"
    done = cli("--matrix", str(path), "matrix", "list")
    assert done.exit_code == 2 and done.exception is None, done.stderr[-2000:]
    assert done.stderr.startswith(f"error: {path}:") and message in done.stderr, done.stderr[-500:]
    line, column = done.stderr.split(f"{path}:", 1)[1].split(":")[:2]
    assert line.isdigit() and column.isdigit()
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["alias-bomb", "nesting-flow"])
def test_the_issues_examples_through_the_real_entry_point(tmp_path: Path, name: str) -> None:
    """In a child bounded in time and memory: the old loader took 53 s and 3.6 GB, or crashed its stack."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(dict((case[0], case[1]) for case in HOSTILE)[name])
    done, elapsed = run_cli(path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.startswith(f"error: {path}:") and len(done.stderr.strip().splitlines()) == 1
    assert elapsed < 8  # mostly the CLI's imports; the loader alone is timed in the test above


def test_alias_bomb_is_small() -> None:
    assert len(alias_bomb()) < 1500  # the issue's 1.4 KB


def test_huge_or_endless_files_are_refused_unread(tmp_path: Path) -> None:
    """A device is refused before any read (not a regular file); a regular file past the limit by its size."""
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (2 << 20) + "\n")
    for path, why in ((Path("/dev/zero"), "not a regular file"), (big, "larger than")):
        started = time.monotonic()
        with pytest.raises(ConfigError, match=why):
            load_matrix(path)
        assert time.monotonic() - started < 1


def test_merge_key_with_an_override_loads(tmp_path: Path) -> None:
    """`<<: *base` then a key set again: the key written in the mapping wins (YAML's merge key rule)."""
    text = MATRIX.replace("  cuda12.1:\n    kind: cuda\n", "  cuda12.1: &cuda_platform\n    kind: cuda\n", 1)
    cpu_start = text.index("  cpu:\n    kind: cpu\n")
    cpu_end = text.index("\n\n", cpu_start)
    cpu = text[cpu_start:cpu_end].replace("  cpu:\n", "  cpu:\n    <<: *cuda_platform\n", 1)
    cpu = cpu.replace("    python: python3\n", "", 1)  # comes from the merge now
    text = text[:cpu_start] + cpu + text[cpu_end:]
    matrix = load_text(text, tmp_path / "matrix.yaml")
    platform = matrix.model.platforms["cpu"]
    assert platform.kind == "cpu" and platform.python == "python3"  # overridden, and merged
    assert platform.arches == [] and platform.base_image == "local/debian:bookworm"
    assert [t.name for t in matrix.targets] == [t.name for t in load_text(MATRIX, tmp_path / "m.yaml").targets]


def test_a_key_written_twice_is_still_a_duplicate(tmp_path: Path) -> None:
    text = MATRIX.replace("schema_version: 1\n", "schema_version: 1\nschema_version: 1\n", 1)
    with pytest.raises(ConfigError, match=r"matrix.yaml:5:1: schema_version: duplicate key"):
        load_text(text, tmp_path / "matrix.yaml")


def test_earlier_merge_sources_win_and_own_keys_win_over_all(tmp_path: Path) -> None:
    from imagebuild.matrix import _BoundedLoader, _build, _check_expansion, _Positions

    text = "a: &a {x: 1, y: 1}\nb: &b {x: 2, z: 2}\nc: {<<: [*a, *b], y: 3}\n"
    loader = _BoundedLoader(text, Path("t.yaml"))
    node = loader.get_single_node()
    _check_expansion(node, Path("t.yaml"))
    data = _build(loader, node, (), _Positions(), Path("t.yaml"))
    assert data["c"] == {"x": 1, "z": 2, "y": 3}
