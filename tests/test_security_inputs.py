"""Issue 12: image references, --shapes files and the docker config, refused in one line with exit 2.

A malformed reference is refused at argument parsing, before any engine or registry is asked: DOCKER_HOST
points at a port nothing listens on, so reaching the engine would print the engine error instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from imagebuild.cli import main
from imagebuild.engine.reference import parse_reference
from imagebuild.engine.registry import Registry, RepoRef
from imagebuild.errors import ConfigError

BAD_REFS = ["UPPER/../x::y", "Repo", "x::y", "a/../b", "", " x", "x ", "-x", "x/", "/x", "x@sha256:12", "a;id"]
BAD_REFS += ["x:" + "t" * 129, "a" * 256, "x\n", "$(id)", "x:-tag", "x@md5", "host:port/x", "a//b", "x\u0131"]
GOOD_REFS = ["local-cpu", "imagebuild:local-cpu", "127.0.0.1:5000/imagebuild/x:t", "[::1]:5000/a/b", "a__b", "a-----b"]
GOOD_REFS += ["ghcr.io/o/r@sha256:" + "a" * 64, "Host.Example:443/x:T_1.2-3", "sha256:" + "b" * 64]
COMMANDS = [
    ["smoke"],
    ["publish", "--registry", "127.0.0.1:5000/x"],
    ["verify", "--key", "k.pub"],
    ["coverage"],
    ["doctor"],
]


@pytest.mark.parametrize("ref", BAD_REFS)
def test_parser_refuses_a_malformed_reference(ref: str) -> None:
    with pytest.raises(ConfigError, match="not a valid image reference"):
        parse_reference(ref)


@pytest.mark.parametrize("ref", GOOD_REFS)
def test_parser_accepts_the_grammar(ref: str) -> None:
    assert parse_reference(ref).name


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("ref", ["UPPER/../x::y", "x::y", "a" * 5000])
def test_commands_refuse_a_malformed_reference_before_the_engine(command: list[str], ref: str) -> None:
    env = {"DOCKER_HOST": "tcp://127.0.0.1:9", "IMAGEBUILD_ENGINE_TIMEOUT": "1"}
    result = CliRunner().invoke(main, [command[0], ref, *command[1:]], env=env)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and "not a valid image reference" in lines[0] and len(lines[0]) < 300, lines


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (bytes(range(256)) * 4, "not UTF-8"),
        (b"\xff\xfeo\x00u\x00t\x00", "not UTF-8"),
        (b"out=" + b"9" * 5000 + b" in=1 tokens=1\n", "sizes must be integers"),
        (b"x" * 100_000 + b"=1\n", "bad field"),
        (b"out=1 in=1 tokens=1 dtype=" + b"q" * 100_000 + b"\n", "unknown dtype"),
        (b"", "no shapes"),
    ],
)
def test_tunableop_tune_refuses_a_bad_shapes_file(tmp_path: Path, content: bytes, says: str) -> None:
    shapes = tmp_path / "shapes.txt"
    shapes.write_bytes(content)
    env = {"DOCKER_HOST": "tcp://127.0.0.1:9"}
    result = CliRunner().invoke(main, ["tunableop", "tune", "local-cpu", "--shapes", str(shapes)], env=env)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and says in lines[0] and len(lines[0]) < 300, lines


@pytest.mark.parametrize(
    "content",
    [
        bytes(range(256)),
        b"{",
        b"[]",
        b'{"auths": []}',
        b'{"auths": {"127.0.0.1:5000": "x"}}',
        b'{"auths": {"127.0.0.1:5000": {"auth": 5}}}',
        b'{"auths": {"127.0.0.1:5000": {"auth": "!!not base64!!"}}}',
        b'{"auths": {"127.0.0.1:5000": {"auth": "/w=="}}}',  # base64 of a byte that is not UTF-8
        b"[" * 100_000,
    ],
)
def test_a_malformed_docker_config_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes) -> None:
    (tmp_path / "config.json").write_bytes(content)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.delenv("IMAGEBUILD_REGISTRY_USER", raising=False)
    with pytest.raises(ConfigError, match="unreadable registry credentials") as caught:
        Registry(RepoRef.parse("127.0.0.1:5000/x"))
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300


def test_a_good_or_absent_docker_config_still_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.delenv("IMAGEBUILD_REGISTRY_USER", raising=False)
    assert Registry(RepoRef.parse("127.0.0.1:5000/x")).basic is None
    (tmp_path / "config.json").write_text('{"auths": {"https://127.0.0.1:5000": {"auth": "dTpw"}}, "credsStore": "x"}')
    assert Registry(RepoRef.parse("127.0.0.1:5000/x")).basic == ("u", "p")
