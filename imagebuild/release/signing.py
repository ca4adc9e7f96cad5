"""Sign a published digest and attach its attestations (SBOM, provenance, one smoke report per arch).

Called by `imagebuild publish` after the push was verified (the digest is the registry's), and by
`publish --promote` after the copy: promotion copies the staging repository's attestations (bound to the same
digest), adds the smoke reports, and signs the digest in the public repository. Every predicate is also kept
as the in-toto statement cosign signed, read back from the registry (`attestations/*.intoto.json`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from imagebuild.engine.cosign import CosignError, Signer, Verifier, envelope_payload, read_password, sign
from imagebuild.engine.cosign import attest as cosign_attest
from imagebuild.engine.registry import Registry, RegistryError, RepoRef
from imagebuild.errors import ConfigError, PublishFailed
from imagebuild.release import attest
from imagebuild.release.ociindex import config_labels
from imagebuild.release.sbom import IMAGE_PATH as SBOM_PATH
from imagebuild.release.sbom import validate
from imagebuild.release.sign_journal import remember_sig_att
from imagecontract.atomic import write_atomic
from imagecontract.models import Manifest

if TYPE_CHECKING:
    from imagebuild.engine.interface import ContainerEngine
    from imagebuild.release.gate import Passed

MANIFEST_PATH = "/opt/imagebuild/manifest.json"


def signer_from(key: Path | None, password_file: Path | None, keyless: bool) -> Signer | None:
    """The Signer the options ask for (None: publish unsigned); usage errors before anything is pushed."""
    if keyless and key:
        raise ConfigError("--sign-key and --keyless exclude each other")
    if keyless:
        return Signer(keyless=True)
    if not key:
        if password_file:
            raise ConfigError("--key-password-file needs --sign-key")
        return None
    if not key.is_file():
        raise ConfigError(f"signing key {key} not found")
    if password_file is None:
        raise ConfigError("--sign-key needs --key-password-file FILE (or - for stdin)", hint="never an argument")
    return Signer(key=key, password=read_password(password_file))


def verifier_from(key: Path | None, identity: str | None, issuer: str | None) -> Verifier:
    """A public key, or a keyless identity (regexp) with its OIDC issuer; exactly one of them."""
    if key and (identity or issuer):
        raise ConfigError("--key excludes --certificate-identity-regexp / --certificate-oidc-issuer")
    if key:
        if not key.is_file():
            raise ConfigError(f"public key {key} not found")
        return Verifier(key=key)
    if identity and issuer:
        return Verifier(identity_regexp=identity, oidc_issuer=issuer)
    raise ConfigError("give --key PUB, or --certificate-identity-regexp and --certificate-oidc-issuer (keyless)")


def _write(out_dir: Path, name: str, predicate_type: str, ref: str, digest: str, predicate: dict[str, Any]) -> Path:
    """The predicate cosign signs (its statement is kept once cosign made it: _keep_statement)."""
    path = out_dir / f"{name}.predicate.json"
    write_atomic(path, attest.dump(predicate))
    return path


ENVELOPE = "application/vnd.dsse.envelope.v1+json"  # cosign's attestation layer in a `.att` manifest
STATEMENT_LIMIT = 64 * 1024 * 1024  # one envelope: an SBOM of thousands of components, base64'd


def _keep_statement(repo: RepoRef, digest: str, predicate_type: str, predicate: Path) -> None:
    """Keep, beside the predicate, the statement cosign signed and attached for it, exactly as the registry holds
    it (the DSSE payload's bytes): `<name>.intoto.json` is then the statement `cosign verify-attestation` returns,
    whatever in-toto version cosign writes (2.x: Statement v0.1 for every `attest --predicate`, see
    release/statements.py), never a second statement of our own making. PublishFailed when no attestation in
    repo's `.att` of digest carries this predicate for this digest."""
    from imagebuild.release.statements import statement_bytes

    registry = Registry(repo)
    wanted = json.loads(predicate.read_bytes())
    tag = digest.replace(":", "-") + ".att"
    try:
        att = registry.digest(repo.repo, tag)
        body, _ = registry.manifest(repo.repo, att or tag)
        layers = json.loads(body).get("layers")
        for layer in reversed(layers if isinstance(layers, list) else []):  # the one cosign just added is last
            annotations = layer.get("annotations") if isinstance(layer, dict) else None
            if layer.get("mediaType") != ENVELOPE or not isinstance(annotations, dict):  # not a dict: AttributeError
                continue
            if annotations.get("predicateType") != predicate_type:
                continue
            payload = envelope_payload(registry.blob(repo.repo, layer, STATEMENT_LIMIT))
            stmt = statement_bytes(payload, f"{repo}:{tag}")
            if (
                stmt.predicateType == predicate_type
                and stmt.predicate == wanted
                and attest.subject_matches(stmt.to_dict(), digest)
            ):
                name = predicate.name.removesuffix(".predicate.json")
                write_atomic(predicate.with_name(f"{name}.intoto.json"), payload.decode("utf-8"))
                return
    except (RegistryError, CosignError, ValueError, AttributeError) as exc:
        raise PublishFailed(f"reading back the {predicate_type} attestation of {repo}@{digest} failed: {exc}") from exc
    raise PublishFailed(f"{repo}:{tag} holds no {predicate_type} attestation of {predicate.name} for {digest}")


def _smoke(passed: Sequence[Passed]) -> list[tuple[str, dict[str, Any]]]:
    """(arch, report) for each smoke report the gate let through for this image."""
    return [(p.arch, p.report.to_dict()) for p in passed]


def _attach(
    repo: RepoRef, digest: str, items: list[tuple[str, str, Path]], signer: Signer, log: Callable[[str], None]
) -> list[str]:
    ref = f"{repo}@{digest}"
    done = []
    remember_sig_att(repo, digest)
    try:
        log(f"sign {ref} ({signer.describe()})")
        sign(ref, signer)
        done.append("signature")
        for name, predicate_type, path in items:
            log(f"attest {name} ({predicate_type})")
            cosign_attest(ref, predicate_type, path, signer)
            _keep_statement(repo, digest, predicate_type, path)
            done.append(name)
    except CosignError as exc:
        raise PublishFailed(f"signing {ref} failed after {', '.join(done) or 'nothing'}: {exc}") from exc
    return done


def sign_published(
    engine: ContainerEngine,
    image_id: str,
    repo: RepoRef,
    digest: str,
    passed: Sequence[Passed],
    signer: Signer,
    context: dict[str, Any],
    out_dir: Path,
    log: Callable[[str], None],
) -> list[str]:
    """Sign repo@digest; attest the image's SBOM, its provenance and each passing smoke report."""
    sbom = engine.read_file(image_id, SBOM_PATH, STATEMENT_LIMIT)
    manifest_bytes = engine.read_file(image_id, MANIFEST_PATH, STATEMENT_LIMIT)
    labels = dict(engine.image(image_id).labels)
    name = str(repo)
    items = _sbom_and_provenance(sbom, manifest_bytes, labels, image_id, context, (name, digest, out_dir))
    for arch, report in _smoke(passed):
        path = _write(out_dir, f"smoke-{arch.replace(':', '_')}", attest.SMOKE_TYPE, name, digest, report)
        items.append((f"smoke {arch}", attest.SMOKE_TYPE, path))
    return _attach(repo, digest, items, signer, log)


def _sbom_and_provenance(
    sbom: bytes | None,
    manifest_bytes: bytes | None,
    labels: dict[str, Any],
    image_id: str,
    context: dict[str, Any],
    where: tuple[str, str, Path],
) -> list[tuple[str, str, Path]]:
    """The SBOM and provenance predicates of one image (its files and labels), written for cosign to attest;
    PublishFailed when the SBOM is missing or not CycloneDX, or the manifest does not fit the contract."""
    from imagebuild.release.sbom_image import component_sources

    name, digest, out_dir = where
    if sbom is None:
        raise PublishFailed(f"{image_id[:19]} has no {SBOM_PATH}", hint="build it with `imagebuild build`")
    error = validate(sbom.decode(errors="replace"))
    if error:
        raise PublishFailed(f"{SBOM_PATH} of {image_id[:19]} is not valid CycloneDX: {error}")
    try:  # read once, through the contract's model
        manifest = Manifest.from_dict(json.loads(manifest_bytes)) if manifest_bytes else None
    except (ValueError, RecursionError) as exc:  # ModelError is a ValueError
        raise PublishFailed(f"{MANIFEST_PATH} of {image_id[:19]} does not fit the contract: {str(exc)[:200]}") from None
    matrix_path = Path(context["matrix_path"])
    sources = component_sources(matrix_path) if matrix_path.is_file() else {}
    items = [("sbom", attest.SBOM_TYPE, _write(out_dir, "sbom", attest.SBOM_TYPE, name, digest, json.loads(sbom)))]
    prov = attest.provenance(
        labels, manifest, str(context["matrix_display"]), sources, context.get("engine"), image_id=image_id
    )
    path = _write(out_dir, "provenance", attest.PROVENANCE_TYPE, name, digest, prov)
    items.append(("provenance", attest.PROVENANCE_TYPE, path))
    return items


def _from_registry(
    registry: Registry, src: RepoRef, digest: str, image_id: str, context: dict[str, Any], where: tuple[str, str, Path]
) -> list[tuple[str, str, Path]]:
    """The SBOM and provenance of a staged digest nobody attested, from its config and its layers (CI: the
    release job promotes digests that other runners built and staged unsigned, and holds no local image)."""
    from imagebuild.release.image_files import read_files

    _, config = registry.config(src.repo, digest)
    labels = config_labels(config)
    files = read_files(registry, src.repo, digest, (SBOM_PATH, MANIFEST_PATH))
    return _sbom_and_provenance(files.get(SBOM_PATH), files.get(MANIFEST_PATH), labels, image_id, context, where)


def sign_index(repo: RepoRef, digest: str, signer: Signer, log: Callable[[str], None]) -> list[str]:
    """Sign an OCI index's digest: what `imagebuild verify` on the bare tag checks before each child."""
    return _attach(repo, digest, [], signer, log)


def sign_promoted(
    src: RepoRef,
    dest: RepoRef,
    digest: str,
    passed: Sequence[Passed],
    signer: Signer,
    out_dir: Path,
    log: Callable[[str], None],
    context: dict[str, Any] | None = None,
) -> list[str]:
    """Copy the staging attestations of digest to dest, then sign there and attest the smoke reports.

    A digest staged without attestations (CI's build jobs stage unsigned; only the release identity signs) gets
    its SBOM and provenance made here from what the registry holds (context: the matrix path and its display,
    and the image ID its smoke named)."""
    tag = digest.replace(":", "-") + ".att"
    registry = Registry(dest)
    items: list[tuple[str, str, Path]] = []
    remember_sig_att(dest, digest)  # before the staged attestations are copied over its `.att`
    try:
        staged = registry.digest(src.repo, tag)
        if staged and src.repo != dest.repo:
            log(f"copy attestations {src}:{tag} -> {dest}:{tag}")
            registry.copy(src.repo, staged, dest.repo, tag)
        elif not staged and context is not None:
            log(f"{src}@{digest[:19]} was staged unattested: its SBOM and provenance from the registry")
            where = (str(dest), digest, out_dir)
            items = _from_registry(registry, src, digest, str(context.get("image_id") or digest), context, where)
    except RegistryError as exc:
        raise PublishFailed(f"copying the attestations of {src}@{digest} failed: {exc}") from exc
    for arch, report in _smoke(passed):
        path = _write(out_dir, f"smoke-{arch.replace(':', '_')}", attest.SMOKE_TYPE, str(dest), digest, report)
        items.append((f"smoke {arch}", attest.SMOKE_TYPE, path))
    return _attach(dest, digest, items, signer, log)


def require_signed(ref: str, verifier: Verifier) -> None:
    """The promotion gate: the staged digest must verify (signature, SBOM and provenance bound to it)."""
    from imagebuild.release.verify import verify_image

    result = verify_image(ref, verifier, need_smoke=False)
    if not result.ok:
        failed = "; ".join(f"{f.what}: {f.detail}" for f in result.findings if not f.ok)
        raise PublishFailed(f"refusing to promote {ref}: not signed as required ({failed})")
    click.echo(f"verified {ref} ({verifier.describe()})", err=True)
