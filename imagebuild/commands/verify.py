"""`imagebuild verify IMAGE_REF`: signature, attestations bound to the digest, a passing smoke per arch.

Exit 0 verified, 1 verification failed (the first failure on the `error:` line), 2 usage (bad reference, no
key, no cosign, registry unreachable, an --accept-unsmoked-arch the image does not claim). An image built for GPUs
that nobody at hand has verifies only with each such arch named by --accept-unsmoked-arch, and then only when a smoke
of the very image passed somewhere (its CPU run); the last line says which arches were not smoked.
"""

from __future__ import annotations

from pathlib import Path

import click

from imagebuild.commands.common import echo_json
from imagebuild.engine.reference import image_argument
from imagebuild.errors import CheckFailed, ConfigError
from imagebuild.release.signing import verifier_from as verifier_from  # commands/report.py reads it here


@click.command("verify")
@click.argument("image_ref", callback=image_argument)
@click.option("--key", type=click.Path(path_type=Path, dir_okay=False), help="cosign public key (key-based signing).")
@click.option("--certificate-identity-regexp", "identity", help="Keyless: the signer identity (e.g. the workflow).")
@click.option("--certificate-oidc-issuer", "issuer", help="Keyless: the OIDC issuer of that identity.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.option(
    "--accept-unsmoked-arch",
    "accept",
    multiple=True,
    metavar="ARCH",
    help="An arch the image claims that no GPU smoked (none at hand); still needs a passing smoke of the image.",
)
def command(
    image_ref: str, key: Path | None, identity: str | None, issuer: str | None, as_json: bool, accept: tuple[str, ...]
) -> None:
    """Verify HOST/REPO[:TAG|@DIGEST]: signed, SBOM and provenance bound to its digest, smoke passed per arch."""
    from imagebuild.release.attest import arch_base
    from imagebuild.release.verify import verify_image

    verifier = verifier_from(key, identity, issuer)
    accepted = frozenset(arch_base(a) for a in accept)
    result = verify_image(image_ref, verifier, accepted=accepted)
    unknown = sorted(accepted - {arch_base(a) for a in result.arches}) if result.digest else []
    if unknown:  # a typo would otherwise accept nothing and look like a pass of the flag
        claimed = ", ".join(result.arches) or "no arch"
        raise ConfigError(f"--accept-unsmoked-arch {', '.join(unknown)}: {image_ref} claims only {claimed}")
    if as_json:
        echo_json(result.to_json())
    else:
        click.echo(f"image      {image_ref} -> {result.digest or 'not found'}")
        if result.image_id:
            click.echo(f"config     {result.image_id} (target {result.target}, arches {', '.join(result.arches)})")
        for finding in result.findings:
            click.echo(f"{'ok' if finding.ok else 'FAILED':<10} {finding.what}: {finding.detail}")
    if not result.ok:
        failed = [f for f in result.findings if not f.ok]
        raise CheckFailed(f"{image_ref} is not verified: {failed[0].what}: {failed[0].detail}")
    unsmoked = [f.what.rsplit(" ", 1)[-1] for f in result.findings if "NOT smoked" in f.detail]
    said = f", NOT smoked on {', '.join(dict.fromkeys(unsmoked))} (accepted)" if unsmoked else ""
    click.echo(f"verified {image_ref} ({result.digest}){said}", err=as_json)
