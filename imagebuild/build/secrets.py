"""BuildKit secrets for a build run: `--secret` flags checked before anything is written, values turned into
0600 files in a private directory, and every value scrubbed from the log lines we keep.

Secrets never become build args, layers or log lines (the CA bundle and PIP_INDEX_URL go in as `pipcert` and
`pipindex`).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import ConfigError

DEFAULT_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
REDACTED = "***"
SECRET_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")  # also a BuildKit mount id: no path characters
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
BUILTIN_SECRETS = ("pipcert", "pipindex")


@dataclass(frozen=True)
class SecretFlag:
    """One validated `--secret`: an id and exactly one source (a file, or a variable holding the value)."""

    secret_id: str
    src: Path | None = None
    env: str | None = None


def _excerpt(text: str, limit: int = 60) -> str:
    """A short, printable excerpt of user input for an error message (never megabytes of it)."""
    shown = text if len(text) <= limit else text[:limit] + "..."
    return shown.encode("unicode_escape").decode("ascii")


def parse_secret_flag(flag: str) -> SecretFlag:
    """`id=NAME,src=FILE` or `id=NAME,env=VARIABLE`; anything else is a usage error before any file is written.

    The id is a BuildKit mount id and never a path here: a strict charset, so `id=/tmp/x` or `id=../x` fail.
    """
    usage = "use id=NAME,src=FILE or id=NAME,env=VARIABLE (NAME: letters, digits, '-', '_')"
    parts: dict[str, str] = {}
    for item in flag.split(","):
        key, sep, value = item.partition("=")
        if not sep or key not in {"id", "src", "env"} or key in parts or not value:
            raise ConfigError(f"bad --secret '{_excerpt(flag)}'", hint=usage)
        parts[key] = value
    secret_id = parts.get("id", "")
    if not SECRET_ID.match(secret_id):
        raise ConfigError(f"bad --secret id '{_excerpt(secret_id)}'", hint=usage)
    if ("src" in parts) == ("env" in parts):
        raise ConfigError(f"--secret id={secret_id} needs exactly one of src=FILE or env=VARIABLE", hint=usage)
    if "env" in parts:
        if not ENV_NAME.match(parts["env"]):
            raise ConfigError(f"--secret id={secret_id}: bad variable name '{_excerpt(parts['env'])}'", hint=usage)
        return SecretFlag(secret_id, env=parts["env"])
    return SecretFlag(secret_id, src=Path(parts["src"]))


def check_secret_flags(env: Mapping[str, str], flags: Iterable[str]) -> list[SecretFlag]:
    """Parse and check every `--secret` (syntax, unique ids, files present, variables set); writes nothing."""
    parsed: list[SecretFlag] = []
    for flag in flags:
        secret = parse_secret_flag(flag)
        if secret.secret_id in BUILTIN_SECRETS or any(p.secret_id == secret.secret_id for p in parsed):
            raise ConfigError(
                f"--secret id={secret.secret_id} given twice or reserved",
                hint=f"{', '.join(BUILTIN_SECRETS)} come from PIP_CERT and PIP_INDEX_URL",
            )
        if secret.src is not None and not secret.src.is_file():
            raise ConfigError(f"secret file for '{secret.secret_id}' not found or not a regular file: {secret.src}")
        if secret.env is not None and secret.env not in env:
            raise ConfigError(f"secret '{secret.secret_id}': variable {secret.env} is not set")
        parsed.append(secret)
    return parsed


class Secrets:
    """Secret files for one build run: real files stay where they are, values become 0600 temp files.

    A value's file is named by its position (`secret-N`), never by its id, inside a private 0700 directory
    that cleanup() removes; no caller-controlled text becomes a path.
    """

    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="imagebuild-secrets-"))
        os.chmod(self._dir, 0o700)
        self.files: dict[str, Path] = {}
        self.values: list[str] = []

    def add_file(self, secret_id: str, path: Path) -> None:
        self.files[secret_id] = path
        try:
            if path.stat().st_size <= 4096:  # short files are tokens: scrub them from logs too
                text = path.read_text(errors="ignore").strip()
                if len(text) >= 6:
                    self.values.append(text)
        except OSError as exc:
            raise ConfigError(f"cannot read the secret file for '{secret_id}': {exc.strerror or exc}") from None

    def add_value(self, secret_id: str, value: str) -> None:
        if not SECRET_ID.match(secret_id):  # callers validate; this guards the invariant
            raise ConfigError(f"bad secret id '{_excerpt(secret_id)}'")
        path = self._dir / f"secret-{len(self.files)}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(value)
        self.files[secret_id] = path
        self.values.append(value)
        # A URL's password alone must not leak either.
        match = re.match(r"^[a-z+]+://[^:/@]+:([^@]+)@", value)
        if match:
            self.values.append(match.group(1))

    def scrub(self, line: str) -> str:
        for value in self.values:
            if value and value in line:
                line = line.replace(value, REDACTED)
        return line

    def cleanup(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


def collect_secrets(env: Mapping[str, str], extra: Iterable[str] = ()) -> Secrets:
    """pipcert (CA bundle), pipindex (index URL with its token) and `--secret id=X,src=F|env=V` flags.

    Every flag is validated before anything is written; a failure while writing removes what was written.
    """
    flags = check_secret_flags(env, extra)
    secrets = Secrets()
    try:
        ca = Path(env.get("PIP_CERT") or DEFAULT_CA_BUNDLE)
        if ca.is_file():
            secrets.add_file("pipcert", ca)
        if env.get("PIP_INDEX_URL"):
            secrets.add_value("pipindex", env["PIP_INDEX_URL"])
        for flag in flags:
            if flag.src is not None:
                secrets.add_file(flag.secret_id, flag.src)
            else:
                secrets.add_value(flag.secret_id, env[str(flag.env)])
    except BaseException:
        secrets.cleanup()
        raise
    return secrets
