"""The signing options of `imagebuild publish` as one value (`Signing`), and the hooks publish calls with it.

`@signing_options` adds the click options and hands the command one `signing: Signing` argument; `check()` makes
the signer (usage errors and the key password read before anything is pushed), and every hook takes the value:
nothing below the command reads click's context. The sign hooks run on the staged, verified digest before any
public tag moves (publish_image's and promote's before_tags): a signing failure (exit 5) leaves every public tag
where it was.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from imagecontract.atomic import write_atomic

if TYPE_CHECKING:
    from imagebuild.engine.cosign import Signer
    from imagebuild.engine.interface import ContainerEngine
    from imagebuild.release.gate import Passed
    from imagebuild.release.publish import PublishResult

F = TypeVar("F", bound=Callable[..., Any])
Log = Callable[[str], None]


@dataclass
class Signing:
    """What publish was asked about signing: sign with a key or keyless, and what a promotion must verify."""

    sign_key: Path | None = None
    key_password_file: Path | None = None
    keyless: bool = False
    require_signed: bool = False
    verify_key: Path | None = None
    identity_regexp: str | None = None
    oidc_issuer: str | None = None
    signer: Signer | None = None  # made by check()

    def check(self) -> Signing:
        """Usage errors (and reading the password) before anything is pushed."""
        from imagebuild.release.signing import signer_from

        self._check_verifier()
        self.signer = signer_from(self.sign_key, self.key_password_file, self.keyless)
        return self

    def _check_verifier(self) -> None:
        """--require-signed names its verifier with publish's own options, and they go with it (issue 34: it
        was refused only after the registry was read, naming verify's `--key`)."""
        from imagebuild.errors import ConfigError

        keyless = self.identity_regexp or self.oidc_issuer
        if not self.require_signed:
            if self.verify_key or keyless:
                raise ConfigError("--verify-key, --certificate-identity-regexp and --certificate-oidc-issuer go with "
                                  "--require-signed")  # fmt: skip
            return
        if self.verify_key and keyless:
            raise ConfigError("--verify-key excludes --certificate-identity-regexp / --certificate-oidc-issuer")
        if not self.verify_key and not (self.identity_regexp and self.oidc_issuer):
            raise ConfigError(
                "--require-signed needs --verify-key PUB, or --certificate-identity-regexp and "
                "--certificate-oidc-issuer (keyless)"
            )
        if self.verify_key and not self.verify_key.is_file():
            raise ConfigError(f"--verify-key {self.verify_key}: not a file")

    @property
    def wanted(self) -> bool:
        """Whether this publish signs: only then do publish and promote take a before_tags hook."""
        return self.signer is not None


OPTION_NAMES = (
    "sign_key",
    "key_password_file",
    "keyless",
    "require_signed",
    "verify_key",
    "certificate_identity_regexp",
    "certificate_oidc_issuer",
)


def signing_options(func: F) -> F:
    """Add the signing options; the command gets them as one `signing` argument."""
    path = click.Path(path_type=Path, dir_okay=False)

    @functools.wraps(func)
    def command(*args: Any, **kwargs: Any) -> Any:
        values = [kwargs.pop(name) for name in OPTION_NAMES]
        return func(*args, signing=Signing(*values), **kwargs)

    options = [
        click.option("--sign-key", type=path, help="cosign private key: sign the digest, attach attestations."),
        click.option(
            "--key-password-file",
            type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
            help="File holding the key password (- for stdin); never an argument.",
        ),
        click.option("--keyless", is_flag=True, help="Sign keyless (OIDC; CI on GitHub) instead of with a key."),
        click.option("--require-signed", is_flag=True, help="--promote: the staged digest must verify first."),
        click.option("--verify-key", type=path, help="Public key for --require-signed."),
        click.option("--certificate-identity-regexp", help="Keyless identity for --require-signed."),
        click.option("--certificate-oidc-issuer", help="Keyless OIDC issuer for --require-signed."),
    ]
    for option in reversed(options):
        command = option(command)
    return command  # type: ignore[return-value]


def _record(out_path: Path, result: PublishResult, signer: Signer, attached: list[str]) -> None:
    write_atomic(
        out_path.with_name("signing.json"),
        json.dumps({"digest": result.digest, "signed_by": signer.describe(), "attached": attached}, indent=2) + "\n",
    )
    click.echo(f"signed {result.digest_ref}: {', '.join(attached)}")


def sign_publish(
    signing: Signing,
    engine: ContainerEngine,
    result: PublishResult,
    passed: Sequence[Passed],
    out_path: Path,
    matrix_path: Path,
    log: Log,
) -> None:
    """Sign the verified staged digest and attach SBOM, provenance and the passing smoke reports."""
    from imagebuild.engine.registry import RepoRef
    from imagebuild.release.signing import sign_published

    if signing.signer is None or not result.digest:
        return
    context = {"matrix_path": matrix_path, "matrix_display": matrix_path.name}
    repo = RepoRef.parse(result.repository)
    attached = sign_published(
        engine,
        result.image_id,
        repo,
        result.digest,
        passed,
        signing.signer,
        context,
        out_path.parent / "attestations",
        log,
    )
    _record(out_path, result, signing.signer, attached)


def sign_index_digest(signing: Signing, result: PublishResult, out_path: Path, log: Log) -> None:
    """Sign the staged index digest (its children carry their own attestations: sign_publish / sign_promote)."""
    from imagebuild.engine.registry import RepoRef
    from imagebuild.release.signing import sign_index

    if signing.signer is None or not result.digest:
        return
    attached = sign_index(RepoRef.parse(result.repository), result.digest, signing.signer, log)
    _record(out_path, result, signing.signer, attached)


def before_promote(signing: Signing, source: str) -> None:
    """--require-signed: the staged digest must carry a verified signature, SBOM and provenance."""
    from imagebuild.release.signing import require_signed, verifier_from

    if not signing.require_signed:
        return
    require_signed(source, verifier_from(signing.verify_key, signing.identity_regexp, signing.oidc_issuer))


def sign_promote(
    signing: Signing,
    source: str,
    result: PublishResult,
    passed: Sequence[Passed],
    out_path: Path,
    log: Log,
    matrix_path: Path | None = None,
) -> None:
    """Copy the staged attestations, sign the digest in the destination (copied there by digest, no tag yet),
    attest the passing smoke reports. With matrix_path, a digest staged unattested gets its SBOM and provenance
    from the registry (the provenance naming the image ID its smoke report names)."""
    from imagebuild.engine.registry import RepoRef
    from imagebuild.release.signing import sign_promoted

    if signing.signer is None or not result.digest:
        return
    src = RepoRef.parse(source.partition("@")[0])
    dest = RepoRef.parse(result.repository)
    smoked = passed[0].report.image_id if passed else result.image_id
    context = (
        {"matrix_path": matrix_path, "matrix_display": matrix_path.name, "image_id": smoked} if matrix_path else None
    )
    attached = sign_promoted(
        src, dest, result.digest, passed, signing.signer, out_path.parent / "attestations", log, context
    )
    _record(out_path, result, signing.signer, attached)
