"""`build --secret`: an id never becomes a path, every flag is checked before a value is written, and no
value is left on disk or printed, whichever way the command ends (issue 12, security)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagebuild.building.secrets import collect_secrets, parse_secret_flag
from imagebuild.cli import main
from imagebuild.errors import ConfigError

TOKEN = "tok-s3cr3t-value-123"
INDEX = "https://user:idx-s3cr3t-456@index.example/simple"


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp root of our own, so leftovers of this test (and only these) can be counted."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def build(*flags: str, env: dict[str, str]) -> tuple[int, str]:
    # One platform: the secrets of one build command (every platform's build writes its own).
    args = [
        "build",
        "local-cpu",
        "--platform",
        "linux/amd64",
        "--dry-run",
        *[a for f in flags for a in ("--secret", f)],
    ]
    result = CliRunner().invoke(main, args, env=env)
    return result.exit_code, result.output


def bad_ids(tmp_path: Path) -> list[str]:
    return [
        str(tmp_path / "victim"),  # an absolute path
        "../victim",
        "a/../../victim",
        "..",
        ".hidden",
        "-leading-dash",
        "has space",
        "x" * 65,
        "ünïcode",
        "tab\tid",
        "nul\0id",
    ]


def test_bad_ids_are_refused_before_anything_is_written(tmp_path: Path, private_tmp: Path) -> None:
    victim = tmp_path / "victim"
    for secret_id in bad_ids(tmp_path):
        victim.write_text("untouched")
        code, output = build(f"id={secret_id},env=MYTOKEN", env={"MYTOKEN": TOKEN, "PIP_INDEX_URL": INDEX})
        assert code == 2, (secret_id, output)
        assert "bad --secret" in output and TOKEN not in output and "idx-s3cr3t" not in output
        assert victim.read_text() == "untouched", secret_id
        assert leftovers(private_tmp) == [], secret_id
        assert len(output.strip().splitlines()) == 1 and "Traceback" not in output


@pytest.mark.parametrize(
    "flag",
    [
        "bogus",  # the example: a usage error after PIP_INDEX_URL was written
        "id=ok",  # no source
        "id=ok,src=/etc/hostname,env=MYTOKEN",  # two sources
        "id=ok,env=MYTOKEN,env=OTHER",  # a key twice
        "id=ok,type=file,src=/etc/hostname",  # an option we do not pass on
        "id=ok,env=",  # an empty value
        "id=ok,env=NOT-A-NAME",
        "id=ok,env=UNSET_VARIABLE_XYZ",
        "id=ok,src=/nonexistent/file",
        "id=ok,src=/",  # a directory
        "id=pipindex,env=MYTOKEN",  # reserved: comes from PIP_INDEX_URL
    ],
)
def test_every_usage_error_leaves_no_secret_on_disk(flag: str, private_tmp: Path) -> None:
    code, output = build("id=first,env=MYTOKEN", flag, env={"MYTOKEN": TOKEN, "PIP_INDEX_URL": INDEX})
    assert code == 2, output
    assert output.startswith("error: ") and len(output.strip().splitlines()) == 1
    assert TOKEN not in output and "idx-s3cr3t" not in output
    assert leftovers(private_tmp) == []
    with pytest.raises(ConfigError):
        collect_secrets({"MYTOKEN": TOKEN, "PIP_INDEX_URL": INDEX}, ["id=first,env=MYTOKEN", flag])
    assert leftovers(private_tmp) == []


@pytest.fixture
def native_buildkit_host() -> Iterator[str]:
    """DOCKER_HOST of an engine whose builds run without buildx (Docker 20.10, which scripts/setup.sh starts beside
    the current one): there `--builder` is a usage error found while forming the argv. On the current engine
    (buildx) it is not an error at all, so the test needs this engine, not whichever is the default."""
    from imagebuild.engine.docker import find_engine

    sock = os.environ.get("IMAGEBUILD_DOCKER20_SOCK", "/var/run/imagebuild-docker20.sock")
    host = f"unix://{sock}"
    find_engine.cache_clear()
    try:
        if not Path(sock).is_socket():
            raise ConfigError(f"no {sock}")
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("DOCKER_HOST", host)
            mode = find_engine().mode
    except ConfigError as exc:
        why = f"no Docker 20.10 engine (scripts/setup.sh starts one): {exc}"
        if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":
            pytest.fail(why)
        pytest.skip(why)
    finally:
        find_engine.cache_clear()
    assert mode == "buildkit", f"{host} builds with {mode}, not native BuildKit"
    yield host
    find_engine.cache_clear()


def test_a_usage_error_found_after_the_plan_leaves_nothing(private_tmp: Path, native_buildkit_host: str) -> None:
    """--builder without buildx fails while forming the argv: that check now runs before secrets are written."""
    result = CliRunner().invoke(
        main,
        ["build", "local-cpu", "--dry-run", "--builder", "remote", "--secret", "id=tok,env=MYTOKEN"],
        env={"MYTOKEN": TOKEN, "PIP_INDEX_URL": INDEX, "DOCKER_HOST": native_buildkit_host},
    )
    assert result.exit_code == 2 and TOKEN not in result.output
    assert leftovers(private_tmp) == []


def test_value_files_are_named_by_position_and_removed(private_tmp: Path) -> None:
    code, output = build("id=tok,env=MYTOKEN", "id=tok2,env=MYTOKEN", env={"MYTOKEN": TOKEN, "PIP_INDEX_URL": INDEX})
    assert code == 0, output
    assert TOKEN not in output and "idx-s3cr3t" not in output
    sources = [part.split("src=", 1)[1].split()[0] for part in output.split("--secret id=")[1:]]
    names = [Path(s).name for s in sources if str(private_tmp) in s]
    assert names == ["secret-1", "secret-2", "secret-3"]  # pipindex, tok, tok2: never the id
    assert leftovers(private_tmp) == []  # dry run: written for the printed command, then removed


def test_secret_files_are_private(private_tmp: Path) -> None:
    secrets = collect_secrets({"MYTOKEN": TOKEN}, ["id=tok,env=MYTOKEN"])
    try:
        path = secrets.files["tok"]
        assert path.parent.parent == private_tmp and path.read_text() == TOKEN
        assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    finally:
        secrets.cleanup()
    assert leftovers(private_tmp) == []


@pytest.mark.parametrize("good", ["a", "registry-token", "REG_TOKEN_2", "x" * 64])
def test_good_ids_parse(good: str) -> None:
    assert parse_secret_flag(f"id={good},env=X").secret_id == good
