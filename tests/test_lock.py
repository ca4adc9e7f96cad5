"""The lock (matrix.lock.json): it covers every input of every target, and a stale one fails `render --check`."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from imagebuild.lock import inputs as lock_inputs
from imagebuild.lock import lockfile, pipsets
from imagebuild.matrix import load_matrix

REPO = Path(__file__).resolve().parents[1]
# vLLM on TheRock-era ROCm, one image per GPU family (issue 32 item 1)
ROCM_FAMILIES = [f"rocm7.14-{f}-torch2.12" for f in ("gfx942", "gfx950", "gfx110x", "gfx1151", "gfx120x")]
TARGETS = ["rocm6.1-torch2.3", "cuda12.1-torch2.3", "local-cpu", "cuda13.0-torch2.14", *ROCM_FAMILIES]
SHA256 = re.compile(r"^[0-9a-f]{64}$")


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(REPO / "matrix.yaml")


@pytest.fixture(scope="module")
def doc():
    loaded = lockfile.load(REPO / lockfile.LOCK_NAME)
    assert loaded is not None, "matrix.lock.json is committed"
    return loaded


def test_every_target_names_images_git_and_pip_inputs(matrix) -> None:
    found = lock_inputs.collect(matrix)
    for target in TARGETS:
        kinds = {item.kind for item in found.values() if any(u.startswith(f"{target} ") for u in item.users)}
        assert {"image", "pip"} <= kinds, target
        if target not in ("local-cpu", "cuda13.0-torch2.14", *ROCM_FAMILIES):  # made of wheels: no git source
            assert "git" in kinds, target
    keys = set(found)
    assert "image:rust:1.78.0-bookworm" in keys  # the Rust builder
    assert "git:https://github.com/fxmarty/pytorch@ceaa1e4a7b66e818ea4e56925bb4a5dff8c56055" in keys
    assert "pip:local-cpu@linux/arm64:torch" in keys  # every OCI platform has its own sets
    assert "pip:cuda12.1-torch2.3@linux/amd64:runtime-server" in keys
    # the Debian suite the local bases are debootstrapped from, for both architectures
    assert found["apt:debian/bookworm"].spec["architectures"] == ["amd64", "arm64"]


def test_committed_lock_is_fresh_and_covers_every_input(matrix, doc) -> None:
    found = lock_inputs.collect(matrix)
    assert lockfile.stale(found, doc) == []
    assert set(doc["inputs"]) == set(found)
    for target in TARGETS:
        assert target in doc["targets"]


def test_locked_entries_are_pins_with_hashes(doc) -> None:
    for key, entry in doc["inputs"].items():
        if entry["status"] == "unresolved":
            assert entry["why"], key  # says why, never silently empty
            continue
        if key.startswith("pip:"):
            assert entry["packages"], key
            for package in entry["packages"]:
                assert package["files"] and all(SHA256.match(f["sha256"]) and f["file"] for f in package["files"])
            assert all(" --hash=sha256:" in line for line in entry["requirements"])
        elif key.startswith("git:"):
            assert SHA256.match(entry["archive_sha256"]) and re.fullmatch(r"[0-9a-f]{40}", entry["tree"])
        elif key.startswith("apt:"):
            assert SHA256.match(entry["inrelease_sha256"]) and entry["date"] and entry["codename"] == "bookworm"
        elif key.startswith("image:") and entry["status"] == "locked":
            assert entry["digest"].startswith("sha256:") and entry["platforms"]


def test_tgi_extras_are_pinned_with_their_transitive_dependencies(doc) -> None:
    """The issue's drifting packages (numba, pyarrow, pydantic) and outlines 0.0.36 are pinned by the lock."""
    entry = doc["inputs"]["pip:cuda12.1-torch2.3@linux/amd64:runtime-server"]
    if entry["status"] != "locked":
        pytest.skip(f"not locked here: {entry['why']}")
    versions = {p["name"]: p["version"] for p in entry["packages"]}
    assert versions["outlines"] == "0.0.36"
    assert {"numba", "pydantic", "pyarrow", "accelerate", "peft"} <= set(versions)
    assert "torch" not in versions and not any(n.startswith("nvidia-") for n in versions)  # the torch stage's
    assert entry["vcs"] and entry["stand_ins"]  # transformers at a commit: kept verbatim, a release stood in


def _copy_repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("matrix.yaml", lockfile.LOCK_NAME):
        shutil.copy(REPO / name, root / name)
    for folder in ("dockerfiles", "runtimes", "kernels", "smoke", "image", "imagecontract"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__", "build"))
    return root


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        (
            "commit: 232e8d522713f43834d48ae45d1330b0e6dd367e",
            "commit: a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1",
            "runtimes.text-generation-inference.source",
        ),
        (
            "builder_image: rust:1.78.0-bookworm",
            "builder_image: rust:1.78.0-slim-bookworm",
            "runtimes.text-generation-inference.builder_image",
        ),
        (
            "build_requires: [packaging==24.0, psutil==5.9.8]",
            "build_requires: [packaging==24.0, psutil==5.9.7]",
            "stage component-flash-attention",
        ),
        ("    version: 2.13.0\n", "    version: 2.13.1\n", "stage torch: torch.2.13.builds.cpu"),
    ],
)
def test_a_pinned_value_changed_without_relocking_fails_render_check(tmp_path: Path, cli, old, new, named) -> None:
    root = _copy_repo(tmp_path)
    text = (root / "matrix.yaml").read_text()
    assert old in text
    (root / "matrix.yaml").write_text(text.replace(old, new, 1))
    result = cli("--matrix", str(root / "matrix.yaml"), "render", "--check")
    assert result.exit_code == 1, result.stderr
    assert "stale lock: " in result.stderr and named in result.stderr
    assert result.exception is None


def test_a_requirements_file_edited_without_relocking_is_stale(tmp_path: Path, cli) -> None:
    root = _copy_repo(tmp_path)
    pins = root / "runtimes" / "transformers-serve" / "requirements.txt"
    pins.write_text(pins.read_text() + "# edited\n")
    result = cli("--matrix", str(root / "matrix.yaml"), "render", "--check")
    assert result.exit_code == 1
    assert "runtimes.transformers-serve.requirements (linux/amd64)" in result.stderr


def test_unchanged_copy_passes_and_no_lock_only_warns(tmp_path: Path, cli) -> None:
    root = _copy_repo(tmp_path)
    assert cli("--matrix", str(root / "matrix.yaml"), "render", "--check").exit_code == 0
    (root / lockfile.LOCK_NAME).unlink()
    result = cli("--matrix", str(root / "matrix.yaml"), "render", "--check")
    assert "inputs are not locked" in result.stderr
    # the committed Dockerfiles install the locked sets: without the lock they render the plain pins instead
    assert result.exit_code == 1 and "local-cpu/Dockerfile (differs)" in result.stderr


def test_a_broken_lock_file_is_one_error_line(tmp_path: Path, cli) -> None:
    root = _copy_repo(tmp_path)
    (root / lockfile.LOCK_NAME).write_text(json.dumps({"schema_version": 1, "inputs": {"x": {"status": "maybe"}}}))
    result = cli("--matrix", str(root / "matrix.yaml"), "render", "--check")
    assert result.exit_code == 2 and "error: " in result.stderr and result.exception is None


def test_lock_without_uv_is_one_line_before_anything_is_resolved(tmp_path: Path, cli, monkeypatch) -> None:
    """It was a traceback after every input had been resolved (issue 31, a shell without the venv on PATH)."""
    root = _copy_repo(tmp_path)
    before = (root / lockfile.LOCK_NAME).read_bytes()
    (tmp_path / "no-uv").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "no-uv"))
    result = cli("--matrix", str(root / "matrix.yaml"), "lock", "local-cpu")
    assert result.exit_code == 2 and result.exception is None
    assert result.stderr.strip().splitlines() == [
        "error: uv is not installed (scripts/setup.sh installs it: pip install uv)"
    ]
    assert result.stdout == ""  # nothing resolved first
    assert (root / lockfile.LOCK_NAME).read_bytes() == before


def test_gen_server_requirements_are_read_from_the_makefile_recipe() -> None:
    makefile = (
        "x:\n\techo\ngen-server:\n\t# c\n\tpip install a==1 'b>=2' --no-cache-dir\n\tmkdir x\n\ny:\n\tpip install z\n"
    )
    assert pipsets.gen_server_requirements(makefile, "gen-server") == ["a==1", "b>=2"]
    with pytest.raises(pipsets.ResolveError):
        pipsets.gen_server_requirements(makefile, "nope")


def test_a_locked_image_digest_puts_the_from_line_on_that_digest(tmp_path: Path, cli) -> None:
    """Where the lock holds a registry digest (not here: Docker Hub does not answer), FROM names it."""
    root = _copy_repo(tmp_path)
    path = root / lockfile.LOCK_NAME
    doc = json.loads(path.read_text())
    digest = "sha256:" + "5" * 64
    doc["inputs"]["image:rust:1.78.0-bookworm"].update({"status": "locked", "digest": digest})
    path.write_text(json.dumps(doc))
    assert cli("--matrix", str(root / "matrix.yaml"), "render").exit_code == 0
    dockerfile = (root / "dockerfiles" / "cuda12.1-torch2.3" / "Dockerfile").read_text()
    assert f"FROM rust:1.78.0-bookworm@{digest} AS runtime-build" in dockerfile
    local = (root / "dockerfiles" / "local-cpu" / "Dockerfile").read_text()
    assert "local/debian:bookworm AS " in local and "local/debian:bookworm@" not in local  # never by a local ID


@pytest.mark.parametrize("target", ROCM_FAMILIES)
def test_rocm_family_inputs_are_pinned_or_unreachable_with_the_reason(doc, target) -> None:
    """Issue 32: every input of a ROCm 7.14 family target is locked, or unresolved saying why: torch (and with it
    the ROCm wheels it requires) from AMD's index, which does not answer here; the runtime set after it."""
    keys = doc["targets"][target]["linux/amd64"]
    entries = {key: doc["inputs"][key] for key in keys}
    assert {key for key, entry in entries.items() if entry["status"] == "locked"} == {f"pip:{target}@linux/amd64:base"}
    torch = entries[f"pip:{target}@linux/amd64:torch"]
    assert torch["status"] == "unresolved" and "repo.amd.com" in torch["why"], torch
    assert torch["spec"]["requirements"] == ["torch==2.12.0+rocm7.14.0"]
    runtime = entries[f"pip:{target}@linux/amd64:runtime"]
    assert runtime["status"] == "unresolved" and f"pip:{target}@linux/amd64:torch" in runtime["why"]
    assert runtime["spec"]["extra_index_url"].startswith("https://rocm.frameworks.amd.com/whl-multi-arch/vllm-")
    assert "extra_index_url" not in entries[f"pip:{target}@linux/amd64:base"]["spec"]  # PyPI alone
    assert entries["image:ubuntu:24.04"]["status"] == "unresolved" and entries["image:ubuntu:24.04"]["why"]


def test_check_remote_asks_a_sets_extra_index_first(tmp_path) -> None:
    """An unlocked set whose packages come from an extra index (AMD's vLLM builds) is `unreachable` when that index
    does not answer, though its primary index does (was: "index answers", from an index that holds no such build).
    The primary is a real HTTP server on loopback serving a simple-API page; the extra index a closed loopback port."""
    import functools
    import http.server
    import threading

    from imagebuild.lock import remote

    (tmp_path / "simple" / "vllm").mkdir(parents=True)
    (tmp_path / "simple" / "vllm" / "index.html").write_text('<a href="vllm-0.1.tar.gz#sha256=00">vllm-0.1</a>\n')
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        primary = f"http://127.0.0.1:{server.server_address[1]}/simple"
        spec = {"requirements": ["vllm==0.23.1"], "index_url": primary, "after": []}
        entry = {"status": "unresolved", "why": "the set it is installed after is not locked"}
        ctx = remote._Context(limit=5.0, pages={}, root=tmp_path)
        assert remote._pip(spec, entry, ctx)[0] == "unlocked"  # the primary answers
        status, detail = remote._pip({**spec, "extra_index_url": "http://127.0.0.1:1/vllm-rdna/"}, entry, ctx)
        assert status == "unreachable" and "127.0.0.1:1" in detail, detail
    finally:
        server.shutdown()
        server.server_close()


def test_check_remote_finds_a_locked_file_on_the_index_that_hosts_it(tmp_path) -> None:
    """A locked set with files from both indexes: each file's sha256 is read on the index whose host serves it (was:
    every file looked up on the primary index, so AMD-hosted wheels read as gone). Two real loopback servers."""
    import functools
    import http.server
    import threading

    from imagebuild.lock import remote

    servers, running = [], []
    for name, project in (("primary", "idna"), ("extra", "vllm")):
        (tmp_path / name / "simple" / project).mkdir(parents=True)
        page = f'<a href="../../files/{project}-1-py3-none-any.whl#sha256={project[0] * 64}">{project}</a>\n'
        (tmp_path / name / "simple" / project / "index.html").write_text(page)
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / name))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(f"http://127.0.0.1:{server.server_address[1]}")
        running.append(server)
    try:
        spec = {"requirements": ["vllm==1"], "index_url": f"{servers[0]}/simple", "after": []}
        spec["extra_index_url"] = f"{servers[1]}/simple"
        packages = [
            {"name": p, "version": "1", "files": [{"file": f"{p}-1-py3-none-any.whl", "sha256": p[0] * 64,
                                                   "url": f"{base}/files/{p}-1-py3-none-any.whl"}]}
            for p, base in (("idna", servers[0]), ("vllm", servers[1]))
        ]  # fmt: skip
        doc = {"inputs": {"pip:t": {"status": "locked", "packages": packages}}}
        [result] = remote.check(doc, {"pip:t": spec}, 5.0, 2, root=tmp_path)
        assert result["status"] == "ok", result
    finally:
        for server in running:
            server.shutdown()
            server.server_close()
