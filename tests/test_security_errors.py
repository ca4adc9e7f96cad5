"""Faults are one `error:` line with the contract's exit code, and leave nothing half done (issue 12): output
paths under a file or at a folder, render's all-or-nothing write, the tool's numeric environment variables,
undecodable input, the publish report's folder checked before a push, and a smoke container that fails to start."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from imagebuild.commands.common import check_writable, one_line, write_all
from imagebuild.envvars import env_int
from imagebuild.errors import ConfigError, SmokeFailed

TARGETS = ("rocm6.1-torch2.3", "cuda12.1-torch2.3", "local-cpu", "cuda13.0-torch2.14")


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not line.startswith("warning:")]


def assert_one_error(result: Any, code: int = 2) -> str:
    assert result.exception is None, repr(result.exception)
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = error_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) < 400, result.stderr
    return lines[0]


def test_render_writes_every_target_or_none(tmp_path: Path, cli) -> None:
    """The last target's folder is a file: the first two targets must not be written either."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "local-cpu").write_text("a file where a folder goes")
    line = assert_one_error(cli("render", "--out", str(out)))
    assert "local-cpu" in line
    assert sorted(p.name for p in out.iterdir()) == ["local-cpu"], "a target was written before the failure"


def test_render_refuses_a_folder_where_the_dockerfile_goes(tmp_path: Path, cli) -> None:
    out = tmp_path / "out"
    (out / "local-cpu" / "Dockerfile").mkdir(parents=True)
    line = assert_one_error(cli("render", "--out", str(out)))
    assert "Dockerfile: is a directory" in line
    assert sorted(p.name for p in out.iterdir()) == ["local-cpu"]
    assert [p.name for p in (out / "local-cpu").iterdir()] == ["Dockerfile"]


def test_render_out_under_a_file(tmp_path: Path, cli) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert_one_error(cli("render", "--out", str(blocker / "out")))
    assert blocker.read_text() == "x"


def test_write_all_stages_everything_before_renaming(tmp_path: Path) -> None:
    first, blocked = tmp_path / "a" / "one.txt", tmp_path / "b" / "two.txt"
    first.parent.mkdir()
    first.write_text("old")
    (tmp_path / "b").write_text("a file where a folder goes")
    with pytest.raises(OSError, match="is a file, not a folder"):
        write_all({first: "new", blocked: "x"})
    assert first.read_text() == "old"
    assert sorted(p.name for p in first.parent.iterdir()) == ["one.txt"], "a temp file stayed behind"
    assert write_all({first: "new", tmp_path / "c" / "d" / "three.txt": "3"}) == {first, tmp_path / "c/d/three.txt"}
    assert write_all({first: "new"}) == set()  # unchanged content: nothing rewritten


def test_write_all_removes_folders_it_made_when_it_fails(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("file")
    with pytest.raises(OSError):
        write_all({tmp_path / "new" / "deep" / "f.txt": "1", tmp_path / "x" / "g.txt": "2"})
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("raw", ["abc", "1e3", "-5", "0", "0x10", "x" * 5000])
def test_numeric_environment_variables_are_usage_errors(monkeypatch, raw: str) -> None:
    monkeypatch.setenv("IMAGEBUILD_SMOKE_TIMEOUT", raw)
    with pytest.raises(ConfigError, match=r"IMAGEBUILD_SMOKE_TIMEOUT=.*: not a whole number >= 1") as info:
        env_int("IMAGEBUILD_SMOKE_TIMEOUT", 1800, minimum=1)
    assert info.value.exit_code == 2 and len(str(info.value)) < 120


def test_environment_variables_are_read_when_used_not_at_import(monkeypatch) -> None:
    """`IMAGEBUILD_SMOKE_TIMEOUT=abc imagebuild smoke` was a traceback at import time."""
    monkeypatch.setenv("IMAGEBUILD_SMOKE_TIMEOUT", "abc")
    monkeypatch.setenv("IMAGEBUILD_PUBLISH_ATTEMPTS", "many")
    import imagebuild.prove.smoke
    import imagebuild.release.publish

    importlib.reload(imagebuild.prove.smoke)
    importlib.reload(imagebuild.release.publish)
    with pytest.raises(ConfigError, match="IMAGEBUILD_PUBLISH_ATTEMPTS"):
        imagebuild.release.publish.attempts()
    monkeypatch.setenv("IMAGEBUILD_PUBLISH_ATTEMPTS", "")
    assert imagebuild.release.publish.attempts() == 3


def test_source_date_epoch_is_checked(monkeypatch, tmp_path: Path) -> None:
    from imagebuild.building.buildkit import GitInfo

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(ConfigError, match="SOURCE_DATE_EPOCH"):
        GitInfo.read(tmp_path)  # not a git checkout: the epoch is what dates the image


def test_undecodable_and_malformed_input_is_one_short_line() -> None:
    try:
        (b"\xff" * 10_000).decode()
    except UnicodeDecodeError as exc:
        assert one_line(exc) == "not UTF-8 text (byte 0: invalid start byte)"
    try:
        json.loads("{" + "x" * 1_000_000)
    except json.JSONDecodeError as exc:
        line = one_line(exc)
        assert line is not None and line.startswith("not valid JSON (line 1, column 2") and len(line) < 120
    long = one_line(OSError(28, "No space left on device", "/out/" + "d" * 5000))
    assert long is not None and len(long) <= 300 and "\n" not in long
    assert one_line(KeyError("a bug")) is None  # anything else stays a traceback: a bug must show


def test_one_line_reaches_the_command_layer(tmp_path: Path, cli, monkeypatch) -> None:
    """An uncaught UnicodeDecodeError or JSONDecodeError in a command is one line, exit 2 (not a traceback)."""
    import imagebuild.commands.render as render_command

    def broken(*_: object, **__: object) -> None:
        json.loads("{not json")

    monkeypatch.setattr(render_command, "write_all", broken)
    line = assert_one_error(cli("render", "--out", str(tmp_path / "o")))
    assert line.startswith("error: not valid JSON")


def test_publish_report_folder_is_checked_before_anything_is_pushed(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        check_writable(blocker / "publish-report.json")
    with pytest.raises(ConfigError, match="is a directory"):
        check_writable(tmp_path)
    check_writable(tmp_path / "new" / "report.json")
    assert list((tmp_path / "new").iterdir()) == []  # the probe is gone


def test_a_report_that_fails_after_the_push_does_not_mask_the_outcome(tmp_path: Path, monkeypatch, capsys) -> None:
    """Stand-in for a disk that fills between the check and the write: the publish still succeeds."""
    from imagebuild.commands.publish import _recorded
    from imagebuild.release.publish import PublishResult

    result = PublishResult(image="x", image_id="sha256:" + "0" * 64, repository="127.0.0.1:5000/r")

    def full_disk(path: Path) -> None:
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(result, "write", full_disk)
    with _recorded(result, tmp_path / "report.json"):
        pass
    assert result.ok
    assert "warning: the publish report was not written" in capsys.readouterr().err


class StandInContainer:
    """Stand-in for a docker container whose start fails (a GPU device the host lacks)."""

    def __init__(self) -> None:
        self.removed = False

    def start(self) -> None:
        from docker.errors import APIError

        raise APIError("error gathering device information", explanation="no such device: /dev/kfd")

    def remove(self, force: bool = False, v: bool = False) -> None:
        self.removed = force and v  # with its anonymous volumes (issue 21: the image's VOLUME /data)


class StandInClient:
    def __init__(self) -> None:
        self.container = StandInContainer()
        self.containers = self

    def create(self, *_: object, **__: object) -> StandInContainer:
        return self.container


def test_a_container_that_fails_to_start_is_removed(tmp_path: Path) -> None:
    pytest.importorskip("docker")
    from imagebuild.engine.interface import LocalImage
    from imagebuild.engine.sdk import DockerEngine
    from imagebuild.prove.smoke import run_smoke

    client = StandInClient()  # the SDK's client stood in for: DockerEngine's own removal on a failed start is tested
    image = LocalImage("sha256:" + "1" * 64)
    with pytest.raises(SmokeFailed, match="could not start the smoke container"):
        run_smoke(DockerEngine(client), image, "none", tmp_path / "report.json", tmp_path / "junit.xml", "x")
    assert client.container.removed
    assert [p.name for p in tmp_path.iterdir()] == [], "the container's output folder stayed behind"
