"""Issue 34 (hostile input, round four): OCI indexes, manifests and attestation payloads someone else wrote.

A registry's answers are untrusted: a manifest of any size, an index whose entries claim platforms, media types,
sizes and "attestation" annotations its children do not bear out. Real servers throughout: a small HTTP server
here for answers no real registry gives (a 2 GiB manifest), the registry on 127.0.0.1:5000 for the rest.
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from imagebuild.engine.registry import MANIFEST_LIMIT, Registry, RegistryError, RepoRef
from imagebuild.release.ociindex import OCI_INDEX, IndexMismatch, checked_index, index_children, media_types, read_index

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


class _Hostile(http.server.BaseHTTPRequestHandler):
    """Answers every manifest GET as the test's `plan` says; counts the bytes it managed to send."""

    plan: dict[str, Any] = {}
    sent = 0

    def log_message(self, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:  # noqa: N802 (http.server's name): every tag exists
        self.send_response(200)
        self.send_header("Content-Type", OCI_MANIFEST)
        self.send_header("Docker-Content-Digest", "sha256:" + "1" * 64)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        plan = type(self).plan
        self.send_response(200)
        self.send_header("Content-Type", OCI_MANIFEST)
        for key, value in plan.get("headers", {}).items():
            self.send_header(key, value)
        body = plan.get("body")
        if body is not None:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if "length" in plan:  # a claimed length, then as many bytes as the client takes
            self.send_header("Content-Length", str(plan["length"]))
        else:
            self.send_header("Connection", "close")
        self.end_headers()
        chunk = b" " * (1 << 20)
        try:
            for _ in range(256):  # 256 MiB, if anyone read it all (the claim above may say more)
                self.wfile.write(chunk)
                type(self).sent += len(chunk)
        except OSError:  # the client stopped reading and closed: what a bounded read does
            return


@pytest.fixture
def hostile() -> Iterator[tuple[Registry, type[_Hostile]]]:
    handler = type("Handler", (_Hostile,), {"plan": {}, "sent": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Registry(RepoRef.parse(f"127.0.0.1:{server.server_address[1]}/h2-hostile")), handler
    finally:
        server.shutdown()
        server.server_close()


def test_a_manifest_claiming_2_gib_is_refused_before_its_body(hostile: tuple[Registry, type[_Hostile]]) -> None:
    registry, handler = hostile
    handler.plan = {"length": 2 << 30}
    with pytest.raises(RegistryError, match=f"answers {2 << 30} bytes, over the {MANIFEST_LIMIT}"):
        registry.manifest("h2-hostile", "latest")


def test_a_manifest_without_a_length_is_read_only_to_the_cap(hostile: tuple[Registry, type[_Hostile]]) -> None:
    registry, handler = hostile
    handler.plan = {}  # no Content-Length: read until the connection closes, 256 MiB if unbounded
    with pytest.raises(RegistryError, match=f"over the {MANIFEST_LIMIT} bytes"):
        registry.manifest("h2-hostile", "latest")
    # what the server got out before the client closed: the cap plus what the socket buffers held, not 2 GiB
    assert handler.sent < 16 * MANIFEST_LIMIT


@pytest.mark.parametrize("claim", ["length", "none"])
def test_verify_reads_a_hostile_registry_s_manifest_only_to_the_cap(
    hostile: tuple[Registry, type[_Hostile]], claim: str
) -> None:
    registry, handler = hostile
    handler.plan = {"length": 2 << 30} if claim == "length" else {}
    proc = subprocess.run(
        [*CLI, "verify", f"{registry.ref}:latest", "--key", __file__], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("error: cannot read") and f"over the {MANIFEST_LIMIT}" in line, line
    assert handler.sent < 16 * MANIFEST_LIMIT


def test_a_manifest_lying_small_in_its_length_is_not_read_past_it(hostile: tuple[Registry, type[_Hostile]]) -> None:
    registry, handler = hostile
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST}).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    handler.plan = {"body": body}
    assert registry.manifest("h2-hostile", digest)[0] == body  # the honest answer reads
    handler.plan = {"body": body.replace(b"2", b"3")}  # other bytes for that digest
    with pytest.raises(RegistryError, match="hash to"):
        registry.manifest("h2-hostile", digest)
    other = "sha256:" + "0" * 64
    handler.plan = {"body": body, "headers": {"Docker-Content-Digest": other}}  # a tag whose digest is not its bytes
    with pytest.raises(RegistryError, match="hash to"):
        registry.manifest("h2-hostile", "latest")


# --- indexes in the real registry (127.0.0.1:5000): each entry held to what its child really is -----------------

REGISTRY = os.environ.get("IMAGEBUILD_TEST_REGISTRY", "127.0.0.1:5000")
CLI = [sys.executable, "-c", "import sys; from imagebuild.cli import main; sys.exit(main())"]
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
ATTESTATION = {"vnd.docker.reference.type": "attestation-manifest"}
AMD64 = {"os": "linux", "architecture": "amd64"}
ARM64 = {"os": "linux", "architecture": "arm64"}
UNKNOWN = {"os": "unknown", "architecture": "unknown"}


@dataclass(frozen=True)
class Pushed:
    digest: str
    body: bytes
    media_type: str = OCI_MANIFEST

    def entry(self, platform: dict[str, str] | None, **annotations: str) -> dict[str, object]:
        entry: dict[str, object] = {"mediaType": self.media_type, "digest": self.digest, "size": len(self.body)}
        if platform is not None:
            entry["platform"] = platform
        if annotations:
            entry["annotations"] = {k.replace("_", "."): v for k, v in annotations.items()}
        return entry


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _put_blob(repo: str, data: bytes) -> dict[str, object]:
    base = f"http://{REGISTRY}"
    started = requests.post(f"{base}/v2/{repo}/blobs/uploads/", timeout=30)
    assert started.status_code == 202, started.text
    location = started.headers["Location"]
    location = location if location.startswith("http") else base + location
    done = requests.put(
        location,
        params={"digest": _sha(data)},
        data=data,
        headers={"Content-Type": "application/octet-stream"},
        timeout=30,
    )
    assert done.status_code == 201, done.text
    return {"digest": _sha(data), "size": len(data)}


_PUSHED: set[str] = set()  # digests this module pushed; deleted from every h2-hostile repository at the end


def _put_manifest(repo: str, reference: str, doc: dict[str, object], media_type: str) -> Pushed:
    body = json.dumps(doc).encode()
    _PUSHED.add(_sha(body))
    answer = requests.put(
        f"http://{REGISTRY}/v2/{repo}/manifests/{reference}",
        data=body,
        headers={"Content-Type": media_type},
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    return Pushed(_sha(body), body, media_type)


def _image(repo: str, platform: dict[str, str], text: str, media_type: str = OCI_MANIFEST) -> Pushed:
    """A one-layer image whose config says platform (a real tar.gz layer holding /which)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("which")
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text.encode()))
    layer = gzip.compress(raw.getvalue(), mtime=0)
    config = json.dumps(
        {
            **platform,
            "config": {"Labels": {"io.imagebuild.target": "h2-hostile"}},
            "rootfs": {"type": "layers", "diff_ids": [_sha(raw.getvalue())]},
        }  # fmt: skip
    ).encode()
    docker = media_type == DOCKER_MANIFEST
    doc = {
        "schemaVersion": 2,
        "mediaType": media_type,
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json"
            if docker
            else "application/vnd.oci.image.config.v1+json",
            **_put_blob(repo, config),
        },
        "layers": [
            {
                "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip"
                if docker
                else "application/vnd.oci.image.layer.v1.tar+gzip",
                **_put_blob(repo, layer),
            }
        ],
    }
    return _put_manifest(repo, f"img-{text}", doc, media_type)


def _attestation(repo: str, about: str) -> Pushed:
    """What BuildKit attaches: an unknown/unknown config and one in-toto statement layer about `about`."""
    statement = json.dumps(
        {"_type": "https://in-toto.io/Statement/v0.1", "subject": [{"digest": {"sha256": about[7:]}}]}
    )
    config = json.dumps({"architecture": "unknown", "os": "unknown", "config": {}, "rootfs": {"type": "layers"}})
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **_put_blob(repo, config.encode())},
        "layers": [
            {
                "mediaType": "application/vnd.in-toto+json",
                **_put_blob(repo, statement.encode()),
                "annotations": {"in-toto.io/predicate-type": "https://slsa.dev/provenance/v0.2"},
            }
        ],
    }
    return _put_manifest(repo, f"att-{about[7:19]}", doc, OCI_MANIFEST)


@dataclass(frozen=True)
class Staged:
    repo: RepoRef
    amd64: Pushed
    arm64: Pushed
    unsmoked: Pushed  # another linux/amd64 image: never smoked, never signed
    arm64_v7: Pushed  # an arm image whose config says variant v7
    attestation: Pushed  # BuildKit-style, about amd64
    outside: Pushed  # an attestation about an image that is in the repository but not in the index
    docker: Pushed  # amd64 in Docker schema 2


def _remove_what_was_pushed(run: str) -> None:
    """Every manifest of the repositories this run made (h2-hostile-*-<run>...): tags, signatures, copies."""
    catalog = requests.get(f"http://{REGISTRY}/v2/_catalog", params={"n": 1000}, timeout=30).json()
    for repo in [r for r in catalog.get("repositories") or [] if r.startswith("h2-hostile-") and run in r]:
        digests = set(_PUSHED)
        for tag in _tags(repo):
            head = requests.head(
                f"http://{REGISTRY}/v2/{repo}/manifests/{tag}",
                headers={"Accept": ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_MANIFEST))},
                timeout=30,
            )
            digests.add(head.headers.get("Docker-Content-Digest", ""))
        for digest in sorted(d for d in digests if d):
            requests.delete(f"http://{REGISTRY}/v2/{repo}/manifests/{digest}", timeout=30)


RUN = uuid.uuid4().hex[:6]  # in every repository name this module makes


@pytest.fixture(scope="module")
def staged() -> Iterator[Staged]:
    try:
        requests.get(f"http://{REGISTRY}/v2/", timeout=5)
    except requests.RequestException:
        pytest.skip(f"no registry on {REGISTRY} (scripts/setup.sh starts it)")
    repo = RepoRef.parse(f"{REGISTRY}/h2-hostile-index-{RUN}")
    try:
        yield _staged(repo)
    finally:
        _remove_what_was_pushed(RUN)


def _staged(repo: RepoRef) -> Staged:
    amd64 = _image(repo.repo, AMD64, "amd64")
    return Staged(
        repo,
        amd64,
        _image(repo.repo, ARM64, "arm64"),
        _image(repo.repo, AMD64, "unsmoked"),
        _image(repo.repo, {"os": "linux", "architecture": "arm", "variant": "v7"}, "armv7"),
        _attestation(repo.repo, amd64.digest),
        _attestation(repo.repo, _image(repo.repo, AMD64, "elsewhere").digest),
        _image(repo.repo, AMD64, "docker", DOCKER_MANIFEST),
    )


def _index(s: Staged, name: str, manifests: list[dict[str, object]]) -> str:
    return _put_manifest(
        s.repo.repo, name, {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}, OCI_INDEX
    ).digest


def _lie(entry: dict[str, object], **fields: object) -> dict[str, object]:
    return {**entry, **fields}


# Each: the entries of an index, and words of the one refusal. The first is the case of issue 34 (HIGH).
HOSTILE: dict[str, tuple[Callable[[Staged], list[dict[str, object]]], str]] = {
    "annotated-attestation-before-the-real-child": (
        lambda s: [
            s.unsmoked.entry(AMD64, **{"vnd_docker_reference_type": "attestation-manifest"}),
            s.amd64.entry(AMD64),
            s.arm64.entry(ARM64),
        ],
        "is not an attestation manifest: listed for linux/amd64",
    ),
    "annotated-with-the-sibling-digest-too": (
        lambda s: [
            s.unsmoked.entry(AMD64, **ATTESTATION_OF(s.amd64)),
            s.amd64.entry(AMD64),
        ],
        "is not an attestation manifest: listed for linux/amd64",
    ),
    "reference-digest-alone": (  # another annotation key: not BuildKit's type, but names a sibling
        lambda s: [
            s.unsmoked.entry(AMD64, vnd_docker_reference_digest=s.amd64.digest),
            s.amd64.entry(AMD64),
        ],
        "is not an attestation manifest: not annotated",
    ),
    "a-near-miss-annotation-value": (  # not a claim at all: a second linux/amd64 image
        lambda s: [s.unsmoked.entry(AMD64, vnd_docker_reference_type="Attestation-Manifest "), s.amd64.entry(AMD64)],
        "two entries for linux/amd64",
    ),
    "an-unrelated-annotation": (
        lambda s: [s.unsmoked.entry(AMD64, org_opencontainers_image_ref_name="attestation"), s.amd64.entry(AMD64)],
        "two entries for linux/amd64",
    ),
    "a-real-image-listed-unknown": (  # unknown/unknown and annotated, but its layers are a filesystem
        lambda s: [s.unsmoked.entry(UNKNOWN, **ATTESTATION_OF(s.amd64)), s.amd64.entry(AMD64)],
        "its layers are not all application/vnd.in-toto+json",
    ),
    "unknown-without-the-annotation": (
        lambda s: [s.attestation.entry(UNKNOWN, vnd_docker_reference_digest=s.amd64.digest), s.amd64.entry(AMD64)],
        "not annotated",
    ),
    "attestation-of-an-image-outside-the-index": (
        lambda s: [s.amd64.entry(AMD64), s.outside.entry(UNKNOWN, **ATTESTATION_OF(s.outside))],
        "names no platform image of this index",
    ),
    "attestation-of-an-attestation": (
        lambda s: [s.amd64.entry(AMD64), s.attestation.entry(UNKNOWN, **ATTESTATION_OF(s.attestation))],
        "names no platform image of this index",
    ),
    "a-variant-listed-as-another-platform": (
        lambda s: [s.amd64.entry(AMD64), s.arm64_v7.entry({"os": "linux", "architecture": "arm", "variant": "v6"})],
        "listed for linux/arm/v6, its config says linux/arm/v7",
    ),
    "a-variant-dropped": (
        lambda s: [s.amd64.entry(AMD64), s.arm64_v7.entry({"os": "linux", "architecture": "arm"})],
        "listed for linux/arm, its config says linux/arm/v7",
    ),
    "a-second-amd64-under-another-variant": (
        lambda s: [s.unsmoked.entry({**AMD64, "variant": "v3"}), s.amd64.entry(AMD64)],
        "listed for linux/amd64/v3, its config says linux/amd64",
    ),
    "amd64-and-arm64-swapped": (  # MEDIUM: a signed index of swapped platforms verified and was promoted
        lambda s: [s.amd64.entry(ARM64), s.arm64.entry(AMD64)],
        "listed for linux/arm64, its config says linux/amd64",
    ),
    "a-size-larger-than-the-manifest": (
        lambda s: [_lie(s.amd64.entry(AMD64), size=len(s.amd64.body) + 1), s.arm64.entry(ARM64)],
        "bytes, sha256:",
    ),
    "a-size-smaller-than-the-manifest": (
        lambda s: [s.amd64.entry(AMD64), _lie(s.arm64.entry(ARM64), size=len(s.arm64.body) - 1)],
        "bytes, sha256:",
    ),
    "a-media-type-lie": (  # the entry says Docker schema 2, the child is OCI
        lambda s: [_lie(s.amd64.entry(AMD64), mediaType=DOCKER_MANIFEST), s.arm64.entry(ARM64)],
        f"the entry says {DOCKER_MANIFEST}",
    ),
    "a-media-type-lie-the-other-way": (
        lambda s: [_lie(s.docker.entry(AMD64), mediaType=OCI_MANIFEST), s.arm64.entry(ARM64)],
        f"the entry says {OCI_MANIFEST}",
    ),
    "an-index-in-an-index": (
        lambda s: [_lie(s.amd64.entry(AMD64), mediaType=OCI_INDEX)],
        "is not one image's manifest",
    ),
    "too-many-entries": (
        lambda s: [s.amd64.entry(AMD64)] + [s.attestation.entry(UNKNOWN, **ATTESTATION_OF(s.amd64))] * 64,
        "65 index entries, over the 64",
    ),
}


def ATTESTATION_OF(image: Pushed) -> dict[str, str]:  # noqa: N802 (reads as the constant it extends)
    return {"vnd_docker_reference_type": "attestation-manifest", "vnd_docker_reference_digest": image.digest}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_index_is_refused_entry_by_entry(staged: Staged, case: str) -> None:
    entries, words = HOSTILE[case]
    _index(staged, case, entries(staged))
    reg = Registry(staged.repo)
    with pytest.raises(IndexMismatch, match=re.escape(words)):
        read_index(reg, staged.repo.repo, case)
    with pytest.raises(IndexMismatch, match=re.escape(words)):  # what verify and promote read it through
        index_children(reg, staged.repo, case)


def test_a_real_index_with_buildkit_attestations_reads(staged: Staged) -> None:
    s = staged
    entries = [
        s.amd64.entry(AMD64),
        s.arm64.entry({**ARM64, "variant": "v8"}),
        s.attestation.entry(UNKNOWN, **ATTESTATION_OF(s.amd64)),
    ]
    digest = _index(s, "real", entries)
    reg = Registry(s.repo)
    index = checked_index(reg, s.repo.repo, digest)
    assert index is not None
    assert index.children == {"linux/amd64": s.amd64.digest, "linux/arm64": s.arm64.digest}
    assert index.attestations == [s.attestation.digest]
    assert media_types(reg, s.repo.repo, digest).children == dict.fromkeys(index.children, OCI_MANIFEST)
    assert read_index(reg, s.repo.repo, "real") == index.children
    # one image is no index, and an arm variant listed as its config says reads
    assert checked_index(reg, s.repo.repo, s.amd64.digest) is None
    _index(s, "armv7", [s.arm64_v7.entry({"os": "linux", "architecture": "arm", "variant": "v7"})])
    assert read_index(reg, s.repo.repo, "armv7") == {"linux/arm/v7": s.arm64_v7.digest}


@pytest.mark.parametrize(
    "case",
    [
        "annotated-attestation-before-the-real-child",
        "amd64-and-arm64-swapped",
        "a-size-larger-than-the-manifest",
        "a-media-type-lie",
    ],
)
def test_verify_refuses_a_hostile_index_before_any_signature(staged: Staged, case: str, tmp_path: Path) -> None:
    _index(staged, case, HOSTILE[case][0](staged))
    key = tmp_path / "cosign.pub"
    key.write_text("-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n")  # never reached
    proc = subprocess.run(
        [*CLI, "verify", f"{staged.repo}:{case}", "--key", str(key)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "index" in errors[0], proc.stderr
    assert "signature" not in proc.stdout  # refused before cosign was asked about any child


@pytest.mark.parametrize("case", ["annotated-attestation-before-the-real-child", "amd64-and-arm64-swapped"])
def test_promote_refuses_a_hostile_index_and_moves_no_tag(staged: Staged, case: str, tmp_path: Path) -> None:
    digest = _index(staged, case, HOSTILE[case][0](staged))
    dest = f"{REGISTRY}/h2-hostile-public-{RUN}-{uuid.uuid4().hex[:8]}"
    proc = subprocess.run(
        [*CLI, "publish", f"{staged.repo}@{digest}", "--promote", "--registry", dest, "--tag", "v1",
         "--allow-unsmoked", "--allow-unlocked", "--out", str(tmp_path / "report.json")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 5, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and HOSTILE[case][1] in errors[0], proc.stderr
    assert Registry(RepoRef.parse(dest)).digest(dest.split("/", 1)[1], "v1") is None


# --- SIGTERM during a signed promote: no `.sig`/`.att` tag left, as for SIGINT ------------------------------------


def _tags(repo: str) -> list[str]:
    answer = requests.get(f"http://{REGISTRY}/v2/{repo}/tags/list", timeout=30)
    return [] if answer.status_code == 404 else sorted(answer.json().get("tags") or [])


def _session_processes(sid: int) -> list[str]:
    ps = subprocess.run(["ps", "-e", "-o", "sid=,pid=,args="], capture_output=True, text=True, check=True)
    return [line for line in ps.stdout.splitlines() if line.split(None, 1)[0] == str(sid)]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_a_signed_promote_leaves_no_signature_tag(
    staged: Staged, tmp_path: Path, signum: signal.Signals
) -> None:
    if shutil.which("cosign") is None:
        pytest.skip("cosign is not installed (scripts/setup.sh installs it)")
    from imagebuild.engine.cosign import generate_key_pair

    generate_key_pair(tmp_path / "cosign", "h2 password")
    (tmp_path / "password").write_text("h2 password\n")
    s = staged
    for image in (s.amd64, s.arm64):  # staged attestations, which a promote copies before it signs
        _put_manifest(
            s.repo.repo, image.digest.replace(":", "-") + ".att", json.loads(s.attestation.body), OCI_MANIFEST
        )
    digest = _index(s, f"signal-{signum.name}", [s.amd64.entry(AMD64), s.arm64.entry(ARM64)])
    dest = f"h2-hostile-signal-{RUN}-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [*CLI, "publish", f"{s.repo}@{digest}", "--promote", "--registry", f"{REGISTRY}/{dest}", "--tag", "v1",
         "--allow-unsmoked", "--allow-unlocked", "--sign-key", str(tmp_path / "cosign.key"),
         "--key-password-file", str(tmp_path / "password"), "--out", str(tmp_path / "report.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=tmp_path,
    )  # fmt: skip
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # the second child's signing has begun: the first one's `.sig` is written
        seen.append(line)
        if line.startswith("sign ") and sum(x.startswith("sign ") for x in seen) == 2:
            break
    else:
        pytest.fail("".join(seen))
    written = _tags(dest)
    assert f"{s.amd64.digest.replace(':', '-')}.sig" in written, written  # what there is to clean up
    proc.send_signal(signum)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 128 + signum, "".join(seen) + rest
    assert ("error: terminated (SIGTERM)" if signum == signal.SIGTERM else "error: interrupted") in rest, rest
    assert "Traceback" not in rest
    assert _tags(dest) == [], "".join(seen) + rest  # no .sig, no .att, no public tag
    assert _session_processes(proc.pid) == []  # no cosign left writing after it


# --- attestations with the real cosign: the statement kept is the registry's; a hostile one is one finding -------


@pytest.fixture(scope="module")
def cosign_keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    if shutil.which("cosign") is None:
        pytest.skip("cosign is not installed (scripts/setup.sh installs it)")
    from imagebuild.engine.cosign import Signer, generate_key_pair

    root = tmp_path_factory.mktemp("cosign")
    generate_key_pair(root / "cosign", "h2 password")
    return Signer(key=root / "cosign.key", password="h2 password"), root / "cosign.pub"


def test_the_kept_statement_is_the_one_cosign_verify_attestation_returns(
    staged: Staged, cosign_keys: tuple[Any, Path], tmp_path: Path
) -> None:
    from imagebuild.engine.cosign import Verifier, verified_statements
    from imagebuild.release import attest, signing

    signer, pub = cosign_keys
    image = _image(staged.repo.repo, AMD64, f"kept-{uuid.uuid4().hex[:6]}")  # an image of its own: one .att
    predicate = {"buildDefinition": {"buildType": attest.BUILD_TYPE, "externalParameters": {"target": "h2"}}}
    path = signing._write(tmp_path, "provenance", attest.PROVENANCE_TYPE, str(staged.repo), image.digest, predicate)
    signing._attach(staged.repo, image.digest, [("provenance", attest.PROVENANCE_TYPE, path)], signer, print)
    [payload] = verified_statements(f"{staged.repo}@{image.digest}", attest.PROVENANCE_TYPE, Verifier(key=pub))
    kept = (tmp_path / "provenance.intoto.json").read_bytes()
    assert kept == payload  # the same statement, byte for byte: what cosign signed
    statement = json.loads(kept)
    assert statement["predicate"] == predicate and statement["predicateType"] == attest.PROVENANCE_TYPE
    assert statement["subject"][0]["digest"] == {"sha256": image.digest.split(":")[1]}


BUILD = "urn:imagebuild:build:v1"


@pytest.mark.parametrize(
    ("predicate", "words"),
    [
        ({"buildDefinition": "a string", "runDetails": {}}, "buildDefinition: expected an object"),
        ({"buildDefinition": {"buildType": BUILD, "externalParameters": ["x"]}}, "externalParameters: expected"),
        ({"buildDefinition": {"buildType": BUILD, "externalParameters": {}}, "runDetails": 1}, "runDetails: expected"),
    ],
)
def test_verify_of_a_signed_provenance_of_another_shape_is_one_line(
    staged: Staged, cosign_keys: tuple[Any, Path], tmp_path: Path, predicate: dict[str, Any], words: str
) -> None:
    from imagebuild.engine.cosign import attest as cosign_attest
    from imagebuild.engine.cosign import sign
    from imagebuild.release import attest

    signer, pub = cosign_keys
    image = _image(staged.repo.repo, AMD64, f"prov-{uuid.uuid4().hex[:6]}")
    ref = f"{staged.repo}@{image.digest}"
    (tmp_path / "p.json").write_text(json.dumps(predicate))
    sign(ref, signer)
    cosign_attest(ref, attest.PROVENANCE_TYPE, tmp_path / "p.json", signer)
    proc = subprocess.run([*CLI, "verify", ref, "--key", str(pub)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    [line] = [x for x in proc.stdout.splitlines() if x.split()[1:2] == ["provenance:"]]
    assert line.startswith("FAILED") and "not SLSA v1 provenance" in line and words in line, line
    errors = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1, proc.stderr


# --- --require-signed names its verifier with publish's options, refused before anything is read ---------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--promote", "--require-signed"], "--require-signed needs --verify-key PUB"),
        (["--promote", "--require-signed", "--certificate-oidc-issuer", "x"], "--require-signed needs --verify-key"),
        (["--promote", "--require-signed", "--verify-key", "/nonexistent/cosign.pub"], "not a file"),
        (["--promote", "--verify-key", "cosign.pub"], "go with --require-signed"),
        (["--require-signed", "--verify-key", "cosign.pub"], "--require-signed goes with --promote"),
    ],
)
def test_require_signed_without_its_verifier_is_a_usage_error_before_any_read(
    tmp_path: Path, args: list[str], words: str
) -> None:
    (tmp_path / "cosign.pub").write_text("-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n")
    source = "127.0.0.1:9/h2-nothing-listens@sha256:" + "0" * 64  # a read would say 'unreachable'
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [*CLI, "publish", source, "--registry", "127.0.0.1:9/h2-public", "--allow-unsmoked", *args, "--out", str(out)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ") and words in proc.stderr, proc.stderr
    assert "unreachable" not in proc.stderr and not out.exists()
