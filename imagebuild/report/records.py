"""The build, publish and signing records as the page reads them: pydantic models of the fields the page takes,
each of the type its writer gives it (build/buildkit.py TargetResult, release/publish.py PublishResult,
release/signing.py's signing.json). Other keys are the writers' and are left unread; a field of another type makes
the record (or the build report's entry) not used, with a warning: never a traceback, never a pass.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

Text = Annotated[str, StringConstraints(max_length=4096)]
Texts = Annotated[list[Text], Field(max_length=1024)]


class _Record(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")


class BuildEntry(_Record):
    """One image's line in build/build-report.json."""

    target: Text
    ok: bool = False
    image_id: Text | None = None
    tags: Texts = Field(default_factory=list)
    failed_step: Text | None = None
    coverage: Text | None = None


class BuildReport(_Record):
    created: Text | None = None
    targets: Annotated[list[Any], Field(max_length=4096)]


class PublishReport(_Record):
    """A publish report: one image's (no `platforms`) or an OCI index's (`platforms`: OCI platform -> digest)."""

    ok: bool = False
    image_id: Text | None = None
    error: Text | None = None
    repository: Text | None = None
    digest: Text | None = None
    refs: Texts = Field(default_factory=list)
    created: Text | None = None
    platforms: Annotated[dict[Text, Text], Field(max_length=64)] | None = None


class SigningRecord(_Record):
    """signing.json beside a publish report: who signed and what was attached."""

    signed_by: Text | None = None
    attached: Texts = Field(default_factory=list)


def checked(model: type[_Record], doc: Any) -> dict[str, Any]:
    """The document as `model` takes it (a dict of the model's fields); ValidationError when it does not fit."""
    return model.model_validate(doc).model_dump()


__all__ = ["BuildEntry", "BuildReport", "PublishReport", "SigningRecord", "ValidationError", "checked"]
