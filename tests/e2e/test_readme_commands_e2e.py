"""Issue 30: the README commands that read what the quick start published (`verify` and `report --registry` on
127.0.0.1:5000/imagebuild with the key pair under build/keys/) run against a publish of this test's own: local-cpu
built, smoked and published signed, as the quick start does, to a repository of its own in the loopback registry,
with a key pair of its own. The commands are read from the README (tests/test_readme_commands.py parses it); only
the repository and the key path are substituted, and `report` gets `--out` so the checkout's build/report is left
alone. Each must exit 0."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import imagebuild, unique

from tests.test_readme_commands import (
    QUICKSTART_KEYS,
    QUICKSTART_REPOSITORY,
    README_COMMANDS,
    failure,
    needs_quickstart,
    run,
    skip_reason,
)

PUBLISHED = [c for c in README_COMMANDS if skip_reason(c) is None and needs_quickstart(c)]


@pytest.fixture(scope="module")
def published(
    smoked_local_cpu: tuple[Any, Path], registry: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path]:
    """(repository, key folder): local-cpu's amd64 image published signed as `<repository>:local-cpu`."""
    if shutil.which("cosign") is None:
        pytest.fail("cosign is not installed (scripts/setup.sh installs it)")
    keys = tmp_path_factory.mktemp("keys")
    (keys / "password").write_text("readme-e2e only\n")
    gen = subprocess.run(
        ["cosign", "generate-key-pair", "--output-key-prefix", str(keys / "cosign")],
        env={**os.environ, "COSIGN_PASSWORD": "readme-e2e only"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert gen.returncode == 0, gen.stderr
    repository = f"{registry}/{unique('e2e-readme')}"
    out = tmp_path_factory.mktemp("publish") / "publish-report.json"
    sign = ("--sign-key", str(keys / "cosign.key"), "--key-password-file", str(keys / "password"))
    where = ("--registry", repository, "--tag", "local-cpu", "--out", str(out), "--platform", "linux/amd64")
    proc = imagebuild("publish", "local-cpu", *where, "--report", str(smoked_local_cpu[1]), *sign)
    assert proc.returncode == 0, proc.output[-3000:]
    return repository, keys


def test_the_readme_shows_commands_on_the_quick_starts_publish() -> None:
    assert {c.argv[1] for c in PUBLISHED} >= {"verify", "report"}, [str(c) for c in PUBLISHED]


@pytest.mark.parametrize("command", PUBLISHED, ids=[f"line{c.line}" for c in PUBLISHED])
def test_a_readme_command_on_the_published_image_runs(
    command: Any, published: tuple[str, Path], tmp_path: Path
) -> None:
    repository, keys = published
    argv = tuple(
        w.replace(QUICKSTART_REPOSITORY, repository).replace(QUICKSTART_KEYS, f"{keys}/") for w in command.argv
    )
    if argv[:2] == ("imagebuild", "report"):
        argv += ("--out", str(tmp_path / "report"), "--no-history")
    proc = run(command, argv)
    assert proc.returncode == 0, failure(command, proc)
