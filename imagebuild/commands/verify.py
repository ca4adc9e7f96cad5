"""`imagebuild verify IMAGE_REF`: signature, attestations bound to the digest, a passing smoke per arch.

Exit 0 verified, 1 verification failed (the first failure on the `error:` line), 2 usage (bad reference, no
key, no cosign, registry unreachable).
"""

from __future__ import annotations

from pathlib import Path

import click

from imagebuild.commands.common import echo_json
from imagebuild.engine.reference import image_argument
from imagebuild.errors import CheckFailed
from imagebuild.release.signing import verifier_from as verifier_from  # commands/report.py reads it here


@click.command("verify")
@click.argument("image_ref", callback=image_argument)
@click.option("--key", type=click.Path(path_type=Path, dir_okay=False), help="cosign public key (key-based signing).")
@click.option("--certificate-identity-regexp", "identity", help="Keyless: the signer identity (e.g. the workflow).")
@click.option("--certificate-oidc-issuer", "issuer", help="Keyless: the OIDC issuer of that identity.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
def command(image_ref: str, key: Path | None, identity: str | None, issuer: str | None, as_json: bool) -> None:
    """Verify HOST/REPO[:TAG|@DIGEST]: signed, SBOM and provenance bound to its digest, smoke passed per arch."""
    from imagebuild.release.verify import verify_image

    verifier = verifier_from(key, identity, issuer)
    result = verify_image(image_ref, verifier)
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
    click.echo(f"verified {image_ref} ({result.digest})", err=as_json)
