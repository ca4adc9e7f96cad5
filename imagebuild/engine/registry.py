"""A small client of the registry HTTP API (distribution v2): read digests, tag manifests, mount blobs.

The engine pushes layers; this reads back what the registry holds, so publishing can verify the digest
and move public tags onto a complete, already-pushed manifest (and promote across repositories) without
pulling or rebuilding anything.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import requests

from imagebuild.engine.reference import port_ok
from imagebuild.envvars import env_seconds
from imagebuild.errors import ConfigError
from imagecontract.blob import read_bounded

MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)
TIMEOUT = 30  # seconds between two reads


def deadline() -> float:
    """Seconds one registry request may take in all (IMAGEBUILD_REGISTRY_DEADLINE, default 300)."""
    return env_seconds("IMAGEBUILD_REGISTRY_DEADLINE", 300)


CONFIG_LIMIT = 4 * 1024 * 1024  # an image config is kilobytes; one larger is not read
# A manifest or index is kilobytes; the registry itself refuses to store one over 4 MiB (PutManifest reads at
# most maxManifestBodySize = 4 << 20: distribution/distribution@69431e10 registry/handlers/manifests.go:30), so a
# larger answer is not a manifest: never read past this.
MANIFEST_LIMIT = 4 * 1024 * 1024
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class RegistryError(Exception):
    """A registry answered with an error, or could not be reached (`transient` says whether to retry)."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class TooLarge(RegistryError):
    """An answer larger than the bytes a read allows (its Content-Length, or what came): nothing past it read."""


@dataclass(frozen=True)
class RepoRef:
    """`HOST[:PORT]/REPO` as given to --registry."""

    host: str
    repo: str

    @classmethod
    def parse(cls, text: str) -> RepoRef:
        host, sep, repo = text.strip().rstrip("/").partition("/")
        if not sep or not repo or not re.fullmatch(r"[a-z0-9]+(?:[._/-][a-z0-9]+)*", repo):
            raise ValueError(f"'{text}' is not HOST[:PORT]/REPO (e.g. 127.0.0.1:5000/imagebuild)")
        if not re.fullmatch(r"[A-Za-z0-9.-]+(:\d+)?|\[[0-9a-fA-F:]+\](:\d+)?", host):
            raise ValueError(f"'{host}' in '{text}' is not a registry host")
        if not port_ok(host):
            raise ValueError(f"'{host}' in '{text}' has a port outside 1 to 65535")
        return cls(host, repo)

    def __str__(self) -> str:
        return f"{self.host}/{self.repo}"

    @property
    def base_url(self) -> str:
        loopback = self.host.split(":")[0] in {"localhost", "127.0.0.1"} or self.host.startswith("[::1]")
        insecure = loopback or os.environ.get("IMAGEBUILD_REGISTRY_INSECURE") == "1"
        return f"{'http' if insecure else 'https'}://{self.host}"


def _docker_config_auth(host: str) -> tuple[str, str] | None:
    """Basic credentials for host from `docker login` (~/.docker/config.json), if stored there in clear."""
    config = Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker")) / "config.json"
    if not config.exists():
        return None
    try:  # a config that exists but does not read is refused (exit 2), as docker login's would be, never ignored
        data = json.loads(read_bounded(config, 1 << 20, what="a docker config").decode("utf-8"))
        auths = data.get("auths", {}) if isinstance(data, dict) else None
        if not isinstance(auths, dict):
            raise ValueError("'auths' is not an object")
        for key, entry in auths.items():
            if not isinstance(entry, dict) or not isinstance(entry.get("auth", ""), str):
                raise ValueError("an 'auths' entry is not an object with a string 'auth'")
            if key.removeprefix("https://").removeprefix("http://").split("/")[0] == host and entry.get("auth"):
                user, _, password = base64.b64decode(entry["auth"], validate=True).decode("utf-8").partition(":")
                return user, password
    except (OSError, ValueError, RecursionError) as exc:  # UnicodeDecodeError, JSONDecodeError, binascii.Error too
        kind = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else type(exc).__name__
        if isinstance(exc, OSError) and exc.strerror:  # a FIFO, a folder, /dev/zero, over 1 MiB: say which
            raise ConfigError(f"{config}: unreadable registry credentials ({exc.strerror})") from None
        detail = kind if isinstance(exc, UnicodeDecodeError | RecursionError) else f"{kind}: {str(exc)[:80]}"
        raise ConfigError(f"{config}: unreadable registry credentials ({detail})") from None
    return None


def _read_capped(response: requests.Response, cap: int, url: str) -> bytes:
    """A streamed response's body, refused when Content-Length says more than cap (nothing read) and when more
    than cap bytes come (reading stops at cap + 1); the connection is closed either way."""
    try:
        length = response.headers.get("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > cap:
            raise TooLarge(f"{url.split('://', 1)[-1][:200]}: answers {int(length)} bytes, over the {cap} read here")
        chunks, got = [], 0
        for chunk in response.iter_content(64 * 1024):
            chunks.append(chunk)
            got += len(chunk)
            if got > cap:
                raise TooLarge(f"{url.split('://', 1)[-1][:200]}: answers over the {cap} bytes read here")
        return b"".join(chunks)
    finally:
        response.close()


class Registry:
    """One registry host; Bearer and Basic auth answered on a 401 challenge."""

    def __init__(self, host_ref: RepoRef) -> None:
        self.ref = host_ref
        self.session = requests.Session()
        user = os.environ.get("IMAGEBUILD_REGISTRY_USER")
        password = os.environ.get("IMAGEBUILD_REGISTRY_PASSWORD")
        self.basic = (user, password) if user and password else _docker_config_auth(host_ref.host)
        self.tokens: dict[str, str] = {}
        self.limit: float | None = None  # seconds per request instead of deadline() (lock --check-remote)

    def _request(
        self, method: str, path: str, scope: str, cap: int | None = None, **kwargs: object
    ) -> requests.Response:
        """One request (answering a 401 challenge once); with cap, no more than cap bytes of its body are read."""
        url = self.ref.base_url + path
        headers = dict(kwargs.pop("headers", {}) or {})  # type: ignore[call-overload]
        for attempt in range(2):
            if scope in self.tokens:
                headers["Authorization"] = self.tokens[scope]
            response = self._send(method, url, headers, kwargs, cap)
            if response.status_code == 401 and attempt == 0 and self._authenticate(response, scope):
                continue
            if response.status_code >= 500 or response.status_code == 429:
                raise RegistryError(f"{method} {path}: HTTP {response.status_code}", transient=True)
            return response
        raise AssertionError("the second attempt returns or raises")  # never reached: for mypy's possibly-undefined

    def _send(
        self, method: str, url: str, headers: dict[str, str], kwargs: dict[str, object], cap: int | None = None
    ) -> requests.Response:
        """One request, its whole answer read within deadline() seconds (and, with cap, at most cap bytes of it).

        requests' timeout bounds each read, so a registry that trickles a byte at a time would hold a publish
        forever; the request runs on a daemon thread that is abandoned (and its session closed) at the deadline.
        """
        limit = self.limit or deadline()
        outcome: dict[str, object] = {}

        def work() -> None:
            try:
                response = self.session.request(
                    method,
                    url,
                    headers=headers,
                    timeout=TIMEOUT,
                    stream=cap is not None,
                    **kwargs,  # type: ignore[arg-type]
                )
                if cap is None:
                    _ = response.content  # the body too, inside the deadline
                else:
                    response._content = _read_capped(response, cap, url)  # what .content answers from now on
                outcome["response"] = response
            except BaseException as exc:  # handed to the caller's thread
                outcome["error"] = exc

        worker = threading.Thread(target=work, name=f"registry {method}", daemon=True)
        worker.start()
        worker.join(limit)
        if worker.is_alive():
            self.session.close()
            raise RegistryError(f"{self.ref.host}: {method} got no complete answer within {limit:g} s", transient=False)
        error = outcome.get("error")
        if isinstance(error, requests.RequestException):
            raise RegistryError(f"{self.ref.host} unreachable: {type(error).__name__}", transient=True) from error
        if isinstance(error, BaseException):
            raise error
        return outcome["response"]  # type: ignore[return-value]

    def _authenticate(self, response: requests.Response, scope: str) -> bool:
        challenge = response.headers.get("WWW-Authenticate", "")
        if challenge.lower().startswith("basic") and self.basic:
            self.tokens[scope] = "Basic " + base64.b64encode(":".join(self.basic).encode()).decode()
            return True
        if not challenge.lower().startswith("bearer"):
            return False
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        query = {"service": params.get("service", ""), "scope": params.get("scope", scope)}
        try:
            answer = self._send("GET", params["realm"], {}, {"params": query, "auth": self.basic})
            answer.raise_for_status()
            token = answer.json().get("token") or answer.json().get("access_token")
        except (requests.RequestException, KeyError, ValueError) as exc:
            raise RegistryError(f"{self.ref.host}: token request failed: {exc}", transient=False) from exc
        self.tokens[scope] = f"Bearer {token}"
        return True

    def digest(self, repo: str, reference: str) -> str | None:
        """The manifest digest a tag (or digest) resolves to; None when it does not exist."""
        response = self._request(
            "HEAD",
            f"/v2/{repo}/manifests/{reference}",
            f"repository:{repo}:pull",
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
        )
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise RegistryError(f"HEAD {repo}:{reference}: HTTP {response.status_code}")
        return response.headers.get("Docker-Content-Digest")

    def manifest(self, repo: str, reference: str) -> tuple[bytes, str]:
        """The manifest bytes (unchanged, so the digest holds) and their media type: the ONE way any part of
        imagebuild reads a manifest or index from a registry (publish, promote, verify, lock --check-remote).

        Bounded: refused before the body when Content-Length says over MANIFEST_LIMIT, and never more than
        MANIFEST_LIMIT + 1 bytes read (streamed) when it lies or is absent. Checked: by digest, the bytes must
        hash to it; by tag, to the Docker-Content-Digest the registry names (when it names one)."""
        response = self._request(
            "GET",
            f"/v2/{repo}/manifests/{reference}",
            f"repository:{repo}:pull",
            cap=MANIFEST_LIMIT,
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
        )
        if response.status_code != 200:
            raise RegistryError(f"GET manifest {repo}@{reference}: HTTP {response.status_code}")
        body = response.content
        actual = "sha256:" + hashlib.sha256(body).hexdigest()
        named = response.headers.get("Docker-Content-Digest", "")
        expected = reference if reference.startswith("sha256:") else named if DIGEST.fullmatch(named) else actual
        if actual != expected:
            raise RegistryError(
                f"{repo}@{reference[:71]}: the registry's bytes hash to {actual[:19]}, not {expected[:19]}"
            )
        return body, response.headers.get("Content-Type", MANIFEST_TYPES[0])

    def config(self, repo: str, reference: str) -> tuple[str, dict[str, object]]:
        """The image config digest (the image ID an engine gives it) and the config itself."""
        body, _ = self.manifest(repo, reference)
        try:
            manifest = json.loads(body)
            descriptor = manifest.get("config") if isinstance(manifest, dict) else None
            if not isinstance(descriptor, dict):
                raise RegistryError(f"{repo}@{reference[:71]} is an index (or no manifest), not a single image")
            config = json.loads(self.blob(repo, descriptor, CONFIG_LIMIT))
        except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError
            raise RegistryError(f"{repo}@{reference[:71]}: its manifest or config is not JSON") from None
        if not isinstance(config, dict):
            raise RegistryError(f"{repo}@{reference[:71]}: its config is not a JSON object")
        return str(descriptor.get("digest")), config

    def blob(self, repo: str, descriptor: dict[str, object], limit: int) -> bytes:
        """The bytes of a blob its descriptor names, refused before the download when the descriptor says it is
        larger than limit, and after it when they are larger or do not hash to its digest."""
        digest, size = descriptor.get("digest"), descriptor.get("size")
        if not isinstance(digest, str) or not digest.startswith("sha256:") or not isinstance(size, int):
            raise RegistryError(f"{repo}: a blob descriptor without a sha256 digest and a size")
        if size > limit:
            raise RegistryError(f"{repo}@{digest[:19]} is {size} bytes, over the {limit} read here")
        try:
            response = self._request("GET", f"/v2/{repo}/blobs/{digest}", f"repository:{repo}:pull", cap=limit)
        except TooLarge as exc:  # larger than its descriptor lets it be
            raise RegistryError(f"{repo}@{digest[:19]}: the registry's bytes are not that blob ({exc})") from None
        if response.status_code != 200:
            raise RegistryError(f"GET blob {repo}@{digest}: HTTP {response.status_code}")
        body = response.content
        if len(body) > limit or "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise RegistryError(f"{repo}@{digest[:19]}: the registry's bytes are not that blob")
        return body

    def put_manifest(self, repo: str, tag: str, body: bytes, media_type: str) -> str:
        response = self._request(
            "PUT",
            f"/v2/{repo}/manifests/{tag}",
            f"repository:{repo}:pull,push",
            data=body,
            headers={"Content-Type": media_type},
        )
        if response.status_code not in (200, 201):
            raise RegistryError(f"PUT manifest {repo}:{tag}: HTTP {response.status_code} {response.text[:200]}")
        return response.headers.get("Docker-Content-Digest", "")

    def delete_manifest(self, repo: str, digest: str) -> None:
        """Delete the manifest digest (and so every tag on it); a manifest already gone is no error."""
        if not DIGEST.fullmatch(digest):
            raise RegistryError(f"{repo}: deleting needs a sha256 digest, not {digest[:80]}")
        response = self._request("DELETE", f"/v2/{repo}/manifests/{digest}", f"repository:{repo}:pull,push,delete")
        if response.status_code not in (200, 202, 404):
            raise RegistryError(f"DELETE manifest {repo}@{digest}: HTTP {response.status_code}")

    def has_blob(self, repo: str, digest: str) -> bool:
        response = self._request("HEAD", f"/v2/{repo}/blobs/{digest}", f"repository:{repo}:pull")
        return response.status_code == 200

    def mount_blob(self, src_repo: str, dst_repo: str, digest: str) -> None:
        """Make a blob of src_repo exist in dst_repo: cross-repo mount, else copy it through."""
        if self.has_blob(dst_repo, digest):
            return
        scope = f"repository:{dst_repo}:pull,push"
        response = self._request("POST", f"/v2/{dst_repo}/blobs/uploads/?mount={digest}&from={src_repo}", scope)
        if response.status_code == 201:
            return
        if response.status_code != 202:
            raise RegistryError(f"mount {digest} into {dst_repo}: HTTP {response.status_code}")
        location = response.headers["Location"]
        blob = self._request("GET", f"/v2/{src_repo}/blobs/{digest}", f"repository:{src_repo}:pull")
        if blob.status_code != 200:
            raise RegistryError(f"GET blob {src_repo}@{digest}: HTTP {blob.status_code}")
        path = location.removeprefix(self.ref.base_url)
        sep = "&" if "?" in path else "?"
        done = self._request(
            "PUT",
            f"{path}{sep}digest={digest}",
            scope,
            data=blob.content,
            headers={"Content-Type": "application/octet-stream"},
        )
        if done.status_code != 201:
            raise RegistryError(f"upload {digest} into {dst_repo}: HTTP {done.status_code}")

    def copy(self, src_repo: str, digest: str, dst_repo: str, tag: str) -> str:
        """Point dst_repo:tag at src_repo@digest (blobs first, then the manifest); returns the new digest."""
        body, media_type = self.manifest(src_repo, digest)
        if src_repo != dst_repo:
            manifest = json.loads(body)
            for child in manifest.get("manifests", []):  # an index: its children first, by digest
                self.copy(src_repo, child["digest"], dst_repo, child["digest"])
            for blob in [manifest["config"], *manifest.get("layers", [])] if "config" in manifest else []:
                self.mount_blob(src_repo, dst_repo, blob["digest"])
        return self.put_manifest(dst_repo, tag, body, media_type)
