"""Error classes, each carrying the exit code of the CLI contract (see the design's exit-code table)."""

from __future__ import annotations


class ImagebuildError(Exception):
    """Base of every error the CLI turns into one `error: ...` line and an exit code."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class CheckFailed(ImagebuildError):
    """A check found a difference: render drift, validator mismatch, code objects differ."""

    exit_code = 1


class ConfigError(ImagebuildError):
    """Usage or configuration error: bad matrix, unknown or unsupported arch, no engine."""

    exit_code = 2


class BuildFailed(ImagebuildError):
    """An image build failed."""

    exit_code = 3


class SmokeFailed(ImagebuildError):
    """The smoke suite failed (or could not run) inside an image."""

    exit_code = 4


class PublishFailed(ImagebuildError):
    """Pushing or verifying an image in a registry failed, or publishing was refused."""

    exit_code = 5
