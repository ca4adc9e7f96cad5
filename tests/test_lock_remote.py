"""`imagebuild lock --check-remote` against real servers on 127.0.0.1: a docker-registry with token auth turned on
(and its token server), git daemon, a PEP 503 index; hosts that refuse or never answer come back within the deadline.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
import requests

from imagebuild.lock import images, lockfile, model, pipsets, remote
from tests.gitserve import serving

REPO = Path(__file__).resolve().parents[1]
SERVICE, ISSUER = "h23-registry", "h23-token-issuer"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenServer:
    """Issues RS256 JWTs (x5c header: the certificate the registry trusts) for whatever scope is asked."""

    def __init__(self, root: Path) -> None:
        self.key, self.cert = root / "key.pem", root / "cert.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(self.key), "-out",
             str(self.cert), "-days", "2", "-subj", "/CN=h23-token"],
            check=True, capture_output=True,
        )  # fmt: skip
        der = subprocess.run(
            ["openssl", "x509", "-in", str(self.cert), "-outform", "DER"], check=True, capture_output=True
        ).stdout
        self.x5c = base64.b64encode(der).decode()
        self.issued = 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                query = parse_qs(urlparse(self.path).query)
                token = owner.token(query.get("scope", [""])[0])
                body = json.dumps({"token": token, "access_token": token}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/token"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def token(self, scope: str) -> str:
        self.issued += 1
        access = []
        if scope:
            kind, name, actions = scope.split(":")
            access = [{"type": kind, "name": name, "actions": actions.split(",")}]
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self.x5c]}
        claims = {"iss": ISSUER, "sub": "h23", "aud": SERVICE, "exp": now + 600, "nbf": now - 10, "iat": now,
                  "jti": f"h23-{self.issued}", "access": access}  # fmt: skip
        signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        sig = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", str(self.key)], input=signing.encode(), check=True,
            capture_output=True,
        ).stdout  # fmt: skip
        return f"{signing}.{_b64(sig)}"


class TokenRegistry:
    def __init__(self, root: Path, tokens: TokenServer) -> None:
        self.addr = f"127.0.0.1:{_free_port()}"
        self.root = root
        (root / "data").mkdir(parents=True)
        config = root / "config.yml"
        config.write_text(
            "version: 0.1\nlog: {level: warn}\n"
            f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}}}\n"
            f"http: {{addr: {self.addr}}}\n"
            f"auth: {{token: {{realm: '{tokens.url}', service: {SERVICE}, issuer: {ISSUER}, "
            f"rootcertbundle: {tokens.cert}}}}}\n"
        )
        self.tokens = tokens
        log = open(root / "registry.log", "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            ["docker-registry", "serve", str(config)], stdout=log, stderr=log, start_new_session=True
        )
        for _ in range(100):
            try:
                requests.get(f"http://{self.addr}/v2/", timeout=1)
                return
            except requests.RequestException:
                time.sleep(0.1)
        raise RuntimeError(f"token registry did not start: {(root / 'registry.log').read_text()[-500:]}")

    def push(self, repo: str, tag: str, arch: str, labels: dict[str, str] | None = None) -> str:
        """A one-layer image for linux/<arch> under tag (config labels as given); returns the manifest digest."""
        auth = {"Authorization": f"Bearer {self.tokens.token(f'repository:{repo}:pull,push')}"}
        base = f"http://{self.addr}/v2/{repo}"
        blobs = []
        config = json.dumps(
            {"architecture": arch, "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}
            | ({"config": {"Labels": labels}} if labels else {})
        )
        for data in (config.encode(), os.urandom(64)):
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            start = requests.post(f"{base}/blobs/uploads/", headers=auth, timeout=10)
            assert start.status_code == 202, start.text
            location = start.headers["Location"]
            location = location if location.startswith("http") else f"http://{self.addr}{location}"
            sep = "&" if "?" in location else "?"
            done = requests.put(f"{location}{sep}digest={digest}", data=data, headers=auth, timeout=10)
            assert done.status_code == 201, done.text
            blobs.append((digest, len(data)))
        (config_digest, config_size), (layer_digest, layer_size) = blobs
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config_size,
            },
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": layer_size}
            ],
        }
        body = json.dumps(manifest).encode()
        put = requests.put(
            f"{base}/manifests/{tag}",
            data=body,
            headers={**auth, "Content-Type": manifest["mediaType"]},
            timeout=10,
        )
        assert put.status_code == 201, put.text
        return "sha256:" + hashlib.sha256(body).hexdigest()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def token_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenRegistry]:
    for tool in ("docker-registry", "openssl"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (scripts/setup.sh installs docker-registry)")
    root = tmp_path_factory.mktemp("h23-token-registry")
    reg = TokenRegistry(root / "registry", TokenServer(root))
    yield reg
    reg.stop()
    reg.tokens.httpd.shutdown()


@pytest.fixture(scope="module")
def git_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """(url, first commit, its tree) of a repository served by git daemon on 127.0.0.1."""
    root = tmp_path_factory.mktemp("h23-git")
    env = {**os.environ, "GIT_AUTHOR_NAME": "h23", "GIT_AUTHOR_EMAIL": "h23@example.invalid",
           "GIT_COMMITTER_NAME": "h23", "GIT_COMMITTER_EMAIL": "h23@example.invalid"}  # fmt: skip
    src = root / "src"
    subprocess.run(["git", "init", "-q", str(src)], check=True, env=env)
    (src / "setup.py").write_text("print('one')\n")
    subprocess.run(["git", "-C", str(src), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(src), "commit", "-q", "-m", "one"], check=True, env=env)
    first = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    tree = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD^{tree}"], capture_output=True, text=True)
    (src / "setup.py").write_text("print('two')\n")
    subprocess.run(["git", "-C", str(src), "commit", "-q", "-am", "two"], check=True, env=env)
    (root / "srv").mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(root / "srv" / "r.git")], check=True, env=env)
    with serving(root / "srv") as url:
        yield url, first.stdout.strip(), tree.stdout.strip()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield sock.getsockname()[1]
    sock.close()


def _doc(inputs: dict) -> dict:
    """A lock document of these entries, as the lock's model accepts it (lockfile.read checks every lock read)."""
    entries = {key: {"where": f"test {key}", **entry} for key, entry in inputs.items()}
    doc = {"schema_version": lockfile.SCHEMA_VERSION, "about": "test", "resolver": {}, "inputs": entries}
    return model.validate({**doc, "targets": {}})


def _specs(doc: dict) -> dict[str, dict]:
    """The specs to check: here the lock's own (the command passes the matrix's, with which they must agree)."""
    return {key: entry["spec"] for key, entry in doc["inputs"].items()}


def _image(ref: str, digest: str | None) -> dict:
    spec = {"ref": ref, "platforms": ["linux/amd64"], "local": False}
    if digest:
        return {"spec": spec, "status": "locked", "digest": digest}
    return {"spec": spec, "status": "unresolved", "why": "not resolved"}


def _by_key(results: list[dict]) -> dict[str, dict]:
    return {r["key"]: r for r in results}


def test_lock_resolves_a_tag_through_the_token_flow_per_platform(token_registry: TokenRegistry) -> None:
    pushed = token_registry.push("h23/base", "v1", "amd64")
    anonymous = requests.get(f"http://{token_registry.addr}/v2/h23/base/manifests/v1", timeout=5)
    assert anonymous.status_code == 401 and "Bearer" in anonymous.headers["WWW-Authenticate"]  # token auth is on
    issued = token_registry.tokens.issued
    entry = images.resolve_remote(f"{token_registry.addr}/h23/base:v1", ["linux/amd64"], limit=10)
    assert entry["digest"] == pushed and entry["platforms"] == {"linux/amd64": pushed}
    assert token_registry.tokens.issued > issued  # the client asked the realm for a pull token


def test_check_remote_says_ok_then_changed_when_the_tag_moves(token_registry: TokenRegistry) -> None:
    ref = f"{token_registry.addr}/h23/moving:v1"
    first = token_registry.push("h23/moving", "v1", "amd64")
    doc = _doc({f"image:{ref}": _image(ref, first)})
    [ok] = remote.check(doc, _specs(doc), limit=10, jobs=4)
    assert ok["status"] == "ok" and first in ok["detail"]
    second = token_registry.push("h23/moving", "v1", "amd64")  # new random layer: a new digest under the tag
    [moved] = remote.check(doc, _specs(doc), limit=10, jobs=4)
    assert moved["status"] == "changed"
    assert f"expected {first} got {second}" in moved["detail"]


def test_git_inputs_ok_changed_and_unreachable(git_daemon: tuple[str, str, str], silent_port: int) -> None:
    url, commit, tree = git_daemon
    gone = "0123456789abcdef0123456789abcdef01234567"
    closed = _free_port()

    def git(u: str, c: str, t: str | None) -> dict:
        return {"spec": {"url": u, "commit": c, "ref": None}, "status": "locked", "commit": c, "tree": t or "1" * 40}

    doc = _doc({
        "git:ok": git(url, commit, tree),
        "git:gone": git(url, gone, None),
        "git:refused": git(f"git://127.0.0.1:{closed}/r.git", commit, tree),
        "git:silent": git(f"git://127.0.0.1:{silent_port}/r.git", commit, tree),
    })  # fmt: skip
    started = time.monotonic()
    results = _by_key(remote.check(doc, _specs(doc), limit=2, jobs=4))
    took = time.monotonic() - started
    assert results["git:ok"]["status"] == "ok", results["git:ok"]
    assert results["git:gone"]["status"] == "changed" and gone[:12] in results["git:gone"]["detail"]
    assert results["git:refused"]["status"] == "unreachable"
    assert results["git:silent"]["status"] == "unreachable" and "within 2 s" in results["git:silent"]["detail"]
    assert took < 8, f"the checks ran in parallel within the deadline, took {took:.1f} s"


def test_unreachable_registries_come_back_within_the_deadline(silent_port: int) -> None:
    closed = _free_port()
    silent = f"127.0.0.1:{silent_port}/h23/x:v1"
    refused = f"127.0.0.1:{closed}/h23/x:v1"
    doc = _doc({f"image:{silent}": _image(silent, "sha256:" + "0" * 64),
                f"image:{refused}": _image(refused, "sha256:" + "0" * 64)})  # fmt: skip
    started = time.monotonic()
    results = _by_key(remote.check(doc, _specs(doc), limit=1.5, jobs=4))
    assert time.monotonic() - started < 5
    assert results[f"image:{silent}"]["status"] == "unreachable"
    assert "within 1.5 s" in results[f"image:{silent}"]["detail"]
    assert results[f"image:{refused}"]["status"] == "unreachable"


def test_pip_files_checked_against_a_simple_index(tmp_path: Path) -> None:
    """A PEP 503 page served on 127.0.0.1: the locked hash matches, a changed one and a vanished file do not."""
    good = hashlib.sha256(b"wheel").hexdigest()
    page = tmp_path / "simple" / "demo"
    page.mkdir(parents=True)
    (page / "index.html").write_text(
        f'<a href="../../files/demo-1.0-py3-none-any.whl#sha256={good}">demo-1.0-py3-none-any.whl</a>\n'
        f'<a href="../../files/demo-1.1-py3-none-any.whl#sha256={"e" * 64}">demo-1.1-py3-none-any.whl</a>\n'
    )

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: Quiet(*a, directory=str(tmp_path)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    index = f"http://127.0.0.1:{httpd.server_address[1]}/simple"

    def pip(version: str, sha: str) -> dict:
        name = f"demo-{version}-py3-none-any.whl"
        files = [{"file": name, "sha256": sha, "url": f"{index}/../files/{name}"}]
        spec = {"requirements": ["demo"], "index_url": index, "python": "3.11", "platform": "x86_64-manylinux_2_28"}
        spec |= {"find_links": None, "no_deps": False, "after": [], "torch": None, "from_source": None}
        packages = [{"name": "demo", "version": version, "files": files}]
        requirements = pipsets.requirements_text(packages)
        return {"spec": spec, "status": "locked", "packages": packages, "requirements": requirements}

    try:
        doc = _doc({"pip:ok": pip("1.0", good), "pip:hash": pip("1.1", "f" * 64), "pip:gone": pip("2.0", good)})
        results = _by_key(remote.check(doc, _specs(doc), limit=5, jobs=4))
    finally:
        httpd.shutdown()
    assert results["pip:ok"]["status"] == "ok"
    assert (
        results["pip:hash"]["status"] == "changed"
        and f"expected sha256 {'f' * 64} got {'e' * 64}" in (results["pip:hash"]["detail"])
    )
    assert results["pip:gone"]["status"] == "changed" and "no longer on" in results["pip:gone"]["detail"]


# The CLI's exit codes, one line per input and nothing written: tests/test_hostile_lock.py
# (test_check_remote_ok_then_changed_and_nothing_written), on a matrix that names what its lock holds.


def test_debian_suite_ok_then_changed_at_a_point_release(tmp_path: Path, silent_port: int) -> None:
    """A mirror on 127.0.0.1 serving dists/bookworm/InRelease: the locked file is ok; a new one is `changed`."""
    from imagebuild.lock import debian

    dists = tmp_path / "debian" / "dists" / "bookworm"
    dists.mkdir(parents=True)
    release = "Codename: bookworm\nVersion: 12.15\nDate: Sat, 11 Jul 2026 10:16:37 UTC\nArchitectures: amd64 arm64\n"
    (dists / "InRelease").write_text(release)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: Quiet(*a, directory=str(tmp_path)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    mirror = f"http://127.0.0.1:{httpd.server_address[1]}/debian"
    try:
        spec = {"mirror": mirror, "suite": "bookworm", "architectures": ["amd64", "arm64"]}
        entry = {"spec": spec, "status": "locked", **debian.release(mirror, "bookworm", ["amd64", "arm64"], 5)}
        assert entry["version"] == "12.15" and entry["codename"] == "bookworm"
        silent = {"spec": {**spec, "mirror": f"http://127.0.0.1:{silent_port}/debian"}, "status": "locked"}
        silent["inrelease_sha256"] = "0" * 64
        doc = _doc({"apt:debian/bookworm": entry, "apt:silent": silent})
        results = _by_key(remote.check(doc, _specs(doc), limit=1.5, jobs=4))
        assert results["apt:debian/bookworm"]["status"] == "ok"
        assert results["apt:silent"]["status"] == "unreachable" and "within 1.5 s" in results["apt:silent"]["detail"]
        (dists / "InRelease").write_text(release.replace("12.15", "12.16").replace("Sat, 11 Jul", "Sat, 12 Sep"))
        one = _doc({"apt:debian/bookworm": entry})
        [moved] = remote.check(one, _specs(one), limit=5, jobs=2)
        assert moved["status"] == "changed" and "expected 12.15 of Sat, 11 Jul 2026" in moved["detail"]
        assert "got 12.16 of Sat, 12 Sep 2026" in moved["detail"]
    finally:
        httpd.shutdown()


def test_promote_refuses_a_staged_image_built_from_unlocked_inputs(
    token_registry: TokenRegistry, cli, tmp_path: Path
) -> None:
    """CI publishes with --promote STAGING@digest: the lock gate reads the staged config's labels (exit 5)."""
    record = json.dumps({"sha256": "ab", "unlocked": ["image:rust:1.78.0-bookworm"]})
    labels = {"io.imagebuild.target": "local-cpu", "io.imagebuild.lock": record}
    digest = token_registry.push("h23/staged", "s1", "amd64", labels)
    out = tmp_path / "publish-report.json"
    args = ("publish", "--promote", f"{token_registry.addr}/h23/staged@{digest}", "--allow-unsmoked")
    refused = cli(*args, "--registry", f"{token_registry.addr}/h23/public", "--out", str(out))
    assert refused.exit_code == 5 and refused.exception is None, refused.stderr
    assert "built from 1 unlocked input(s): image:rust:1.78.0-bookworm" in refused.stderr
    auth = {"Authorization": f"Bearer {token_registry.tokens.token('repository:h23/public:pull')}"}
    public = requests.get(f"http://{token_registry.addr}/v2/h23/public/tags/list", headers=auth, timeout=5)
    assert public.status_code == 404  # nothing was copied: the public repository does not exist
