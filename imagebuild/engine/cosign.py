"""Run cosign (Debian trixie's package, installed by scripts/setup.sh) to sign, attest and verify image digests.

Key-based signing works offline: no transparency log (`--tlog-upload=false`, verified with
`--insecure-ignore-tlog`), and `--allow-insecure-registry` only for loopback registries. Keyless signing (OIDC,
Fulcio and Rekor) needs the public sigstore services: the CI workflow on GitHub uses it. The key password comes
from a file the user names (or stdin, `-`) and reaches cosign only as COSIGN_PASSWORD in its environment: never
an argument, never printed, and scrubbed from any output that is shown.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.errors import ConfigError
from imagebuild.signals import interrupts_deferred
from imagecontract.blob import read_bounded

TIMEOUT = 300


class CosignError(Exception):
    """cosign exited non-zero; the message is its last error line."""


def cosign_binary() -> str:
    found = os.environ.get("IMAGEBUILD_COSIGN") or shutil.which("cosign")
    if not found:
        raise ConfigError("cosign is not installed", hint="run scripts/setup.sh (it installs Debian's cosign)")
    return found


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, localhost or [::1], with or without a port."""
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
    return name in {"localhost", "[::1]"} or name.startswith("127.")


def _registry_flags(ref: str) -> list[str]:
    return ["--allow-insecure-registry"] if is_loopback(ref.split("/", 1)[0]) else []


MAX_PASSWORD = 4096  # characters of a key password (cosign's own are 32 random bytes, base64)


def read_password(path: Path) -> str:
    """The key password from a file (`-`: the first line of stdin); one trailing newline is not part of it."""
    try:
        if str(path) == "-":
            text = sys.stdin.readline(MAX_PASSWORD + 1)
        else:  # a FIFO or /dev/zero named here is refused, a huge file read no further than the bound
            text = read_bounded(path, MAX_PASSWORD, what="the key password file").decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the key password file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the key password file {path} is not UTF-8 (byte {exc.start})") from None
    if len(text) > MAX_PASSWORD:
        raise ConfigError(f"the key password from {path} is longer than {MAX_PASSWORD} characters")
    return text[:-1] if text.endswith("\n") else text


@dataclass(frozen=True)
class Signer:
    """How to sign: a private key file and its password, or keyless (OIDC identity of the CI job)."""

    key: Path | None = None
    password: str | None = None
    keyless: bool = False

    def flags(self) -> list[str]:
        if self.keyless:
            return []  # Fulcio certificate from the ambient OIDC token; the signature goes to Rekor
        return ["--key", str(self.key), "--tlog-upload=false"]

    def env(self) -> dict[str, str]:
        return {"COSIGN_PASSWORD": self.password or ""} if self.key else {}

    def describe(self) -> str:
        return "keyless (OIDC)" if self.keyless else f"key {self.key}"


@dataclass(frozen=True)
class Verifier:
    """How to verify: a public key file, or a keyless certificate identity and OIDC issuer."""

    key: Path | None = None
    identity_regexp: str | None = None
    oidc_issuer: str | None = None

    def flags(self) -> list[str]:
        if self.key:
            return ["--key", str(self.key), "--insecure-ignore-tlog=true"]
        return [
            "--certificate-identity-regexp",
            self.identity_regexp or "",
            "--certificate-oidc-issuer",
            self.oidc_issuer or "",
        ]

    def describe(self) -> str:
        return f"key {self.key}" if self.key else f"identity ~ {self.identity_regexp} from {self.oidc_issuer}"


def _run(argv: list[str], env: dict[str, str] | None = None, secret: str | None = None) -> str:
    """cosign with argv; stdout on success, CosignError with its last error line (secret scrubbed) otherwise."""
    binary, process = cosign_binary(), None
    try:  # SIGINT/SIGTERM kill cosign, wherever they land (imagebuild/signals.py): no `.sig` written after we left
        with interrupts_deferred():
            process = subprocess.Popen(
                [binary, *argv],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
                env={**os.environ, **(env or {})},
            )
        stdout, stderr = process.communicate(timeout=TIMEOUT)
    except BaseException as exc:
        if process is not None:
            process.kill()
            process.communicate()
        if isinstance(exc, subprocess.TimeoutExpired):
            raise CosignError(f"cosign {argv[0]} timed out after {TIMEOUT} s") from exc
        raise
    proc = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    if proc.returncode == 0:
        return proc.stdout
    lines = [
        line.removeprefix("Error: ").removeprefix("error during command execution: ")
        for line in proc.stderr.splitlines()
        if line.strip() and not line.startswith("WARNING")
    ]
    message = lines[-1].strip() if lines else f"exit {proc.returncode}"
    if secret:
        message = message.replace(secret, "***")
    raise CosignError(message[:400])


def sign(ref: str, signer: Signer) -> None:
    """Sign ref (HOST/REPO@sha256:...): the signature is stored as `sha256-<hex>.sig` in that repository."""
    _run(["sign", "--yes", *signer.flags(), *_registry_flags(ref), ref], signer.env(), signer.password)


def attest(ref: str, predicate_type: str, predicate: Path, signer: Signer) -> None:
    """Attach a signed in-toto statement (subject: ref's digest) with this predicate, as `sha256-<hex>.att`."""
    argv = ["attest", "--yes", *signer.flags(), *_registry_flags(ref), "--type", predicate_type]
    _run([*argv, "--predicate", str(predicate), ref], signer.env(), signer.password)


def verify_signature(ref: str, verifier: Verifier) -> list[dict[str, Any]]:
    """The verified signature payloads of ref (cosign checks the signed digest is ref's); CosignError if none."""
    out = _run(["verify", *verifier.flags(), *_registry_flags(ref), "--output", "json", ref])
    payloads = json.loads(out or "[]")
    return payloads if isinstance(payloads, list) else [payloads]


def envelope_payload(data: str | bytes) -> bytes:
    """The payload bytes of a DSSE envelope (how cosign stores and prints an attestation: `payloadType`,
    base64 `payload`, `signatures`); CosignError when data is not one."""
    try:
        envelope = json.loads(data)
        payload = envelope.get("payload") if isinstance(envelope, dict) else None
        if not isinstance(payload, str):
            raise ValueError("no payload")
        return base64.b64decode(payload, validate=True)
    except (ValueError, RecursionError):  # JSONDecodeError, binascii.Error
        raise CosignError("an attestation that is not a DSSE envelope with a base64 payload") from None


def verified_statements(ref: str, predicate_type: str, verifier: Verifier) -> list[bytes]:
    """The payloads (in-toto statements, as signed) of this predicate type whose signature verifies; CosignError
    if none does, or when what cosign printed is not DSSE envelopes (release/statements.py reads the payloads)."""
    out = _run(["verify-attestation", *verifier.flags(), *_registry_flags(ref), "--type", predicate_type, ref])
    return [envelope_payload(line) for line in out.splitlines() if line.strip().startswith("{")]


def generate_key_pair(prefix: Path, password: str) -> None:
    """`cosign generate-key-pair` writing PREFIX.key (encrypted with password) and PREFIX.pub."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    _run(["generate-key-pair", "--output-key-prefix", str(prefix)], {"COSIGN_PASSWORD": password}, password)
