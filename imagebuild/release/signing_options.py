"""The signing options of `imagebuild publish` and the hooks it calls (issue 16), kept out of the publish code.

Options are stored on the click context (`expose_value=False`), so the publish command's signature stays as it
is: `@signing_options` adds them, `sign_publish` / `sign_index_digest` / `before_promote` / `sign_promote` read them.
The sign hooks run on the staged, verified digest before any public tag moves (publish_image's and promote's
before_tags): a signing failure (exit 5) leaves every public tag where it was.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from imagecontract.atomic import write_atomic

if TYPE_CHECKING:
    import docker

    from imagebuild.release.publish import PublishResult

F = TypeVar("F", bound=Callable[..., Any])
META = "imagebuild.release.signing"


def _store(ctx: click.Context, param: click.Parameter, value: object) -> object:
    ctx.meta.setdefault(META, {})[param.name or ""] = value
    return value


def signing_options(func: F) -> F:
    """Add the signing options; their values go to the context (see _store), not to the command's arguments."""
    path = click.Path(path_type=Path, dir_okay=False)
    hidden: dict[str, Any] = {"expose_value": False, "callback": _store}
    options = [
        click.option(
            "--sign-key", type=path, help="cosign private key: sign the digest, attach attestations.", **hidden
        ),
        click.option(
            "--key-password-file",
            type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
            help="File holding the key password (- for stdin); never an argument.",
            **hidden,
        ),
        click.option(
            "--keyless", is_flag=True, help="Sign keyless (OIDC; CI on GitHub) instead of with a key.", **hidden
        ),
        click.option(
            "--require-signed", is_flag=True, help="--promote: the staged digest must verify first.", **hidden
        ),
        click.option("--verify-key", type=path, help="Public key for --require-signed.", **hidden),
        click.option("--certificate-identity-regexp", help="Keyless identity for --require-signed.", **hidden),
        click.option("--certificate-oidc-issuer", help="Keyless OIDC issuer for --require-signed.", **hidden),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _opts() -> dict[str, Any]:
    return click.get_current_context().meta.get(META, {})


def _signer() -> Any:
    from imagebuild.release.signing import signer_from

    opts = _opts()
    return signer_from(opts.get("sign_key"), opts.get("key_password_file"), bool(opts.get("keyless")))


def check_options() -> None:
    """Usage errors (and reading the password) before anything is pushed."""
    signer = _signer()
    _opts()["signer"] = signer


def wanted() -> bool:
    """Whether this publish signs (a signer was given): only then do publish and promote take a before_tags hook."""
    return _opts().get("signer") is not None


def _record(out_path: Path, result: PublishResult, signer: Any, attached: list[str]) -> None:
    write_atomic(
        out_path.with_name("signing.json"),
        json.dumps({"digest": result.digest, "signed_by": signer.describe(), "attached": attached}, indent=2) + "\n",
    )
    click.echo(f"signed {result.digest_ref}: {', '.join(attached)}")


def sign_publish(client: docker.DockerClient, result: PublishResult, reports: list[Path], out_path: Path) -> None:
    """Sign the verified staged digest and attach SBOM, provenance and smoke attestations (when a signer was given)."""
    from imagebuild.engine.registry import RepoRef
    from imagebuild.release.signing import sign_published

    signer = _opts().get("signer")
    if signer is None or not result.digest:
        return
    root = click.get_current_context().find_root().obj
    matrix_path = Path(str(root["matrix_path"]))
    context = {"matrix_path": matrix_path, "matrix_display": matrix_path.name}
    repo = RepoRef.parse(result.repository)
    attached = sign_published(
        client, result.image_id, repo, result.digest, reports, signer, context, out_path.parent / "attestations", _log
    )
    _record(out_path, result, signer, attached)


def sign_index_digest(result: PublishResult, out_path: Path) -> None:
    """Sign the staged index digest (its children carry their own attestations: sign_publish / sign_promote)."""
    from imagebuild.engine.registry import RepoRef
    from imagebuild.release.signing import sign_index

    signer = _opts().get("signer")
    if signer is None or not result.digest:
        return
    attached = sign_index(RepoRef.parse(result.repository), result.digest, signer, _log)
    _record(out_path, result, signer, attached)


def before_promote(source: str) -> None:
    """--require-signed: the staged digest must carry a verified signature, SBOM and provenance."""
    from imagebuild.commands.verify import verifier_from
    from imagebuild.release.signing import require_signed

    opts = _opts()
    if not opts.get("require_signed"):
        return
    verifier = verifier_from(
        opts.get("verify_key"), opts.get("certificate_identity_regexp"), opts.get("certificate_oidc_issuer")
    )
    require_signed(source, verifier)


def sign_promote(source: str, result: PublishResult, reports: list[Path], out_path: Path) -> None:
    """Copy the staged attestations, sign the digest in the destination (copied there by digest, no tag yet),
    attest the smoke reports."""
    from imagebuild.engine.registry import RepoRef
    from imagebuild.release.signing import sign_promoted

    signer = _opts().get("signer")
    if signer is None or not result.digest:
        return
    src = RepoRef.parse(source.partition("@")[0])
    dest = RepoRef.parse(result.repository)
    attached = sign_promoted(
        src, dest, result.digest, result.image_id, reports, signer, out_path.parent / "attestations", _log
    )
    _record(out_path, result, signer, attached)


def _log(message: str) -> None:
    click.echo(message, err=True)
