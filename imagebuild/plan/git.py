"""The revision a build is of (commit with -dirty, short sha for the tag, commit time for `created`).

Kept in plan/ because the plan's tags and build labels are made from it; build/ reads it when it plans builds.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from imagebuild.envvars import env_int


@dataclass(frozen=True)
class GitInfo:
    """The revision labels: commit (with -dirty), short sha for the tag, commit time for `created`."""

    revision: str
    short: str
    created: str

    @property
    def epoch(self) -> int:
        """The commit time in seconds: SOURCE_DATE_EPOCH of its builds (reproducible timestamps)."""
        return int(datetime.fromisoformat(self.created).timestamp())

    @classmethod
    def read(cls, repo: Path) -> GitInfo:
        def git(*args: str) -> str:
            out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
            return out.stdout.strip() if out.returncode == 0 else ""

        head = git("log", "-1", "--format=%H%n%h%n%ct").splitlines()  # one process: every build runs this
        if len(head) != 3:
            epoch = env_int("SOURCE_DATE_EPOCH", 0)
            return cls("unknown", "nogit", datetime.fromtimestamp(epoch, UTC).isoformat())
        sha, short, commit_time = head
        dirty = "-dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
        created = datetime.fromtimestamp(int(commit_time), UTC).isoformat()
        return cls(sha + dirty, short + dirty, created)
