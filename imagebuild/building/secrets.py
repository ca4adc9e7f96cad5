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
from imagecontract.blob import read_bounded

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
    """Parse and check every `--secret` (syntax, unique ids, files present, variables set) and PIP_CERT (when
    set, a regular file: a missing one used to be dropped without a word); writes nothing."""
    cert = env.get("PIP_CERT")
    if cert and not Path(cert).is_file():
        why = "does not exist" if not Path(cert).exists() else "is not a regular file"
        raise ConfigError(f"PIP_CERT={_excerpt(cert)} {why}", hint="point it at a CA bundle file, or unset it")
    parsed: list[SecretFlag] = []
    for flag in flags:
        secret = parse_secret_flag(flag)
        if secret.secret_id in BUILTIN_SECRETS or any(p.secret_id == secret.secret_id for p in parsed):
            raise ConfigError(
                f"--secret id={secret.secret_id} given twice or reserved",
                hint=f"{', '.join(BUILTIN_SECRETS)} come from PIP_CERT and PIP_INDEX_URL",
            )
        if secret.src is not None and not secret.src.is_file():
            raise ConfigError(
                f"secret file for '{secret.secret_id}' not found or not a regular file: {_excerpt(str(secret.src))}"
            )
        if secret.src is not None and secret.src.stat().st_size > MAX_SECRET_FILE:
            raise ConfigError(
                f"secret file for '{secret.secret_id}' is larger than {MAX_SECRET_FILE >> 10} KiB: "
                "it could not be redacted from the build log"
            )
        if secret.env is not None and secret.env not in env:
            raise ConfigError(f"secret '{secret.secret_id}': variable {secret.env} is not set")
        parsed.append(secret)
    return parsed


MIN_NEEDLE = 4  # shorter pieces (a `}` line, a 3-letter user name) are not redacted: they would blank logs
MAX_SECRET_FILE = 512 << 10  # a `src=` secret is read whole to redact it; BuildKit's own secrets are this small
_URL_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/?#@\s]+)@")


def needles(value: str) -> set[str]:
    """Every piece of a secret that may reach a log line on its own: the value, each of its lines (a log is
    read line by line, so a multi-line `.netrc` or PEM never appears whole), and for each URL with credentials
    its user info, password and user (a token given as `https://TOKEN@host`), also percent-decoded; pieces
    shorter than MIN_NEEDLE are left out."""
    from urllib.parse import unquote

    pieces = {value, value.strip()}
    for line in value.splitlines():
        pieces |= {line, line.strip()}
    for match in _URL_USERINFO.finditer(value):
        info = match.group(1)
        user, _, password = info.partition(":")
        for piece in (info, user, password):
            pieces |= {piece, unquote(piece)}
    return {p for p in pieces if len(p.strip()) >= MIN_NEEDLE}


class Secrets:
    """Secret files for one build run: real files stay where they are, values become 0600 temp files.

    A value's file is named by its position (`secret-N`), never by its id, inside a private 0700 directory
    that cleanup() removes; no caller-controlled text becomes a path. Every value (a `src=` file's content
    too, up to MAX_SECRET_FILE) gives its `needles`, all scrubbed from each kept log line by one pattern.
    """

    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="imagebuild-secrets-"))
        os.chmod(self._dir, 0o700)
        self.files: dict[str, Path] = {}
        self.values: list[str] = []
        self._pattern: re.Pattern[str] | None = None

    def _remember(self, value: str) -> None:
        self.values.extend(sorted(needles(value) - set(self.values), key=lambda p: (-len(p), p)))
        self._pattern = None

    def add_file(self, secret_id: str, path: Path, *, public: bool = False) -> None:
        """A secret read from a file; `public` (the CA bundle: certificates, not keys) is mounted, not scrubbed."""
        self.files[secret_id] = path
        if public:
            return
        try:
            data = read_bounded(path, MAX_SECRET_FILE, what="a secret file")
        except OSError as exc:
            raise ConfigError(f"cannot read the secret file for '{secret_id}': {exc.strerror or exc}") from None
        self._remember(data.decode("utf-8", "replace"))

    def add_value(self, secret_id: str, value: str) -> None:
        if not SECRET_ID.match(secret_id):  # callers validate; this guards the invariant
            raise ConfigError(f"bad secret id '{_excerpt(secret_id)}'")
        path = self._dir / f"secret-{len(self.files)}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(value)
        self.files[secret_id] = path
        self._remember(value)

    def scrub(self, line: str) -> str:
        """line with every needle replaced, longest first at each place, until none is left (a replacement that
        joins into another needle is caught by the next pass; each pass shortens the line)."""
        if not self.values:
            return line
        if self._pattern is None:
            self._pattern = re.compile("|".join(map(re.escape, self.values)))
        for _ in range(len(line) + 1):
            scrubbed = self._pattern.sub(REDACTED, line)
            if scrubbed == line:
                break
            line = scrubbed
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
        if ca.is_file():  # PIP_CERT, when set, was checked to be one (check_secret_flags)
            secrets.add_file("pipcert", ca, public=True)
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
