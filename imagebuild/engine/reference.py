"""Image references as the distribution grammar defines them, checked before any engine or registry is asked.

An engine answers a malformed reference with its own error (`400 Client Error ... invalid reference format`),
after a connection; we refuse it first, in one line. The grammar is the one of distribution/reference (commit
0965666a6ade, `reference.go` lines 4-26 and `regexp.go` lines 41-146): name [":" tag] ["@" digest], the name
at most 255 characters (`RepositoryNameTotalLengthMax`, reference.go line 62). Go's `\\w` is ASCII, hence
re.ASCII.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import click

from imagebuild.errors import ConfigError

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = _ALNUM + rf"(?:{_SEPARATOR}{_ALNUM})*"
_REMOTE_NAME = _PATH_COMPONENT + rf"(?:/{_PATH_COMPONENT})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[(?:[a-fA-F0-9:]+)\])"
_DOMAIN = _HOST + r"(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"(?P<name>(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_REMOTE_NAME}))(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?",
    re.ASCII,
)
NAME_MAX = 255
_QUOTE_MAX = 80  # characters of the given text an error quotes


@dataclass(frozen=True)
class Reference:
    """A parsed reference: name (with its registry host, if any), tag and digest."""

    name: str
    domain: str | None
    tag: str | None
    digest: str | None


def port_ok(host: str) -> bool:
    """A registry's `HOST[:PORT]`: no port, or a TCP port, 1 to 65535 (`:99999` and `:0` name no server)."""
    _, bracket, rest = host.rpartition("]")
    _, colon, port = (rest if bracket else host).rpartition(":")
    return not colon or (port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535)


def parse_reference(text: str) -> Reference:
    """The reference, or a ConfigError (exit 2) quoting at most a short excerpt of the text."""
    quoted = repr(text if len(text) <= _QUOTE_MAX else text[:_QUOTE_MAX] + "...")
    m = _REFERENCE.fullmatch(text)
    if m is None:
        raise ConfigError(
            f"{quoted} is not a valid image reference",
            hint="[HOST[:PORT]/]name[:tag][@algo:hex], lowercase name",
        )
    if len(m["name"]) > NAME_MAX:
        raise ConfigError(f"{quoted} is not a valid image reference: its name is longer than {NAME_MAX} characters")
    if m["domain"] and not port_ok(m["domain"]):
        raise ConfigError(f"{quoted} is not a valid image reference: its registry port is not 1 to 65535")
    return Reference(name=m["name"], domain=m["domain"], tag=m["tag"], digest=m["digest"])


def image_argument(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """click callback for an IMAGE argument: refused at parse time, before any engine is reached."""
    if value is not None:
        parse_reference(value)
    return value


_TAG_ONLY = re.compile(_TAG, re.ASCII)


def tag_option(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """click callback for a repeatable `--tag`: each one a tag of the reference grammar (`[A-Za-z0-9_]` then
    up to 127 of `[A-Za-z0-9_.-]`; `{target}` is filled in first, as build does), refused at parse time, not at
    the manifest upload."""
    for item in value:
        if not _TAG_ONLY.fullmatch(item.replace("{target}", "t")):
            shown = item if len(item) <= _QUOTE_MAX else item[:_QUOTE_MAX] + "..."
            raise ConfigError(f"--tag {shown!r} is not a tag (letters, digits, '_', '.', '-'; at most 128)")
    return value


def image_or_dash_argument(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """As image_argument, with `-` allowed (publish --promote --index-of takes its images from the option)."""
    return value if value == "-" else image_argument(ctx, param, value)
