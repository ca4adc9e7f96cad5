"""Where code comes from: a git commit, a URL with a checksum, or a path in this repository (and the patches
applied to torch, which are sources too), and `Strict`, the base of every matrix model (unknown keys are errors).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from imagebuild.matrix.fields import Commit, GitRef, Name, RepoPath, Sha256, Text, Url


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(Strict):
    """Where a source comes from: a git commit, a URL with a checksum, or a path in this repository."""

    git: Url | None = Field(default=None, description="Git repository URL to check out (give commit to pin it).")
    ref: GitRef | None = Field(
        default=None,
        description="Branch or tag to fetch when no commit is given (unpinned: render warns).",
    )
    commit: Commit | None = Field(default=None, description="Full 40-hex commit to check out: the pin of a git source.")
    url: Url | None = Field(default=None, description="URL of an archive or file to download (give sha256 to pin it).")
    sha256: Sha256 | None = Field(default=None, description="Checksum of the file at url: the pin of a url source.")
    path: RepoPath | None = Field(
        default=None,
        description="A file or folder of this repository (confined to it at load).",
    )
    # The directory of the checkout that holds the setup.py to build (flash-attention's csrc/rotary): relative,
    # segments that cannot start with `.` (so no `..`, no absolute path), so the build stays inside the checkout.
    subdir: Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*$")] | None = (
        Field(
            default=None,
            description="Folder of the checkout holding the setup.py to build (relative; no `..`).",
        )
    )

    @model_validator(mode="after")
    def _one_kind(self) -> Source:
        given = [k for k in ("git", "url", "path") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"expected exactly one of git, url, path (got {', '.join(given) or 'none'})")
        if self.git is None and (self.ref or self.commit or self.subdir):
            raise ValueError("ref, commit and subdir belong to a git source")
        if self.url is None and self.sha256:
            raise ValueError("sha256 belongs to a url source")
        return self

    @property
    def pinned(self) -> bool:
        return self.path is not None or self.commit is not None or self.sha256 is not None

    def describe(self) -> str:
        if self.git:
            where = f" ({self.subdir})" if self.subdir else ""
            return f"{self.git}@{self.commit or self.ref or 'HEAD'}{where}"
        return self.url or f"./{self.path}"


class Patch(Source):
    name: Name = Field(description="Name of the patch (listed in the io.imagebuild.patches label).")
    description: Text = Field(default="", description="What the patch fixes, for readers.")
