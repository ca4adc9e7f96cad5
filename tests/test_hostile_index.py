"""Issue 34 (hostile input, round four): OCI indexes, manifests and attestation payloads someone else wrote.

A registry's answers are untrusted: a manifest of any size, an index whose entries claim platforms, media types,
sizes and "attestation" annotations its children do not bear out. Real servers throughout: a small HTTP server
here for answers no real registry gives (a 2 GiB manifest), the registry on 127.0.0.1:5000 for the rest.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from imagebuild.engine.registry import MANIFEST_LIMIT, Registry, RegistryError, RepoRef

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


class _Hostile(http.server.BaseHTTPRequestHandler):
    """Answers every manifest GET as the test's `plan` says; counts the bytes it managed to send."""

    plan: dict[str, Any] = {}
    sent = 0

    def log_message(self, *args: object) -> None:
        pass

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
