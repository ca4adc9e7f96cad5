#!/usr/bin/env python3
"""Rehearse .github/workflows/images.yml here, the way a self-hosted runner would run it (docs/ci.md).

Every job of the workflow, in `needs` order, each matrix leg after the other, runs its own `run:` steps, read from
the YAML (never a copy), in one fresh Debian container made from the local base image: as the non-root user
`runner` (passwordless sudo, as on a typical self-hosted runner), in a workspace that persists from job to job as a
runner's does, against the loopback registry, with the host's engine through its socket. The actions the workflow
uses are emulated from their inputs where the real ones decide something (ACTIONS below); an action the rehearsal
does not know fails it. Expressions are evaluated by scripts/ci_expr.py: GitHub contexts with the values of a push
to main (or `--event pull_request`, `--event workflow_dispatch --ref refs/heads/<branch>`), no secrets, repository
variables pointing at the loopback registry; an environment with deployment-branch rules (PROTECTED) refuses a job
from another ref, as GitHub does. `--rerun JOB` runs a job's legs again after the run (attempt 2), over the same
artifacts, as GitHub's "Re-run jobs" does.

ACTIONS, each behaving like the pinned release where the workflow depends on it:
- actions/download-artifact v8.0.1 (3e5f45b2): `name`, or a `pattern` that matches ONE artifact, or
  `merge-multiple: true`, unpacks into `path` itself; a pattern matching several, each into `path/<name>/`
  (actions/download-artifact@3e5f45b2 src/download-artifact.ts:189-194; README.md:66 "This change also applies to
  patterns that only match a single artifact"). A name that is not there fails (src/download-artifact.ts:93-95).
- actions/upload-artifact v7.0.0 (bbbca2dd): an artifact of that name already in the run (an earlier attempt's)
  fails the step unless `overwrite: true` (actions/upload-artifact@bbbca2dd action.yml:37-42,
  src/upload/upload-artifact.ts:68-70; the service answers 409 "an artifact with this name already exists on the
  workflow run", as seen in actions/upload-artifact#478); a folder's contents are the artifact's root.
- actions/setup-python v7.0.0 (5fda3b95): the runner's tool cache ($RUNNER_TOOL_CACHE/Python/<version>/x64), else
  a build from actions/python-versions' manifest, whose Linux builds are for Ubuntu releases only (matched on
  /etc/lsb-release or /etc/os-release VERSION_ID: actions/toolkit packages/tool-cache/src/manifest.ts _findMatch,
  _getOsVersion); else it fails with "The version '3.11' with architecture 'x64' was not found for debian 12"
  (actions/setup-python@5fda3b95 src/find-python.ts:102-132, src/utils.ts:175-207). On a GitHub-hosted label
  (ubuntu-*) the hosted image's tool cache has it: the stand-in is the runner's python3 of that version.
- actions/checkout: copies this working tree (tracked and unignored files, and .git).

Stand-ins, printed on every run: the runner's admin provisioning is the runner image plus the host's docker, buildx
and cosign binaries, mounted read-only; GPU legs run on the CPU with `--gpu none` and are marked as such (their
arch check cannot pass there); the release job's OIDC identity is a throwaway cosign key pair handed only to jobs
that ask for `id-token: write`, and GITHUB_ACTIONS is not set (on GitHub it is, and the workflow then refuses a key).

Usage: python3 scripts/ci_rehearse.py [--target local-cpu] [--platform linux/amd64]
       [--event push|pull_request|workflow_dispatch] [--ref refs/heads/NAME] [--before SHA] [--jobs matrix,build]
       [--rerun JOB] [--workflow PATH] [--registry 127.0.0.1:5000] [--prefix NAME] [--report FILE] [--keep] [-v]
Exit: 0 every rehearsed step passed, 1 a step failed, 2 usage or setup error.
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ci_expr import Evaluator, ExprError, condition, expand, to_text  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RUNNER_UID = 1001
RUNNER_HOME = "/home/runner"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The runner's machine: what its admin's provisioning gives (scripts/provision-runner.sh, docs/ci.md), from the
# stock base, with the host's engine, buildx and cosign standing in for its setup.sh step (--no-setup; mounted at
# start). Then what many runners also have and a job must not rely on: python3-pip (so a pip into the system
# interpreter meets Debian's PEP 668 refusal, not a missing module) and passwordless sudo.
PROVISION = REPO / "scripts" / "provision-runner.sh"
RUNNER_DOCKERFILE = """\
FROM {base}
COPY provision-runner.sh /opt/imagebuild-provision/scripts/provision-runner.sh
RUN bash /opt/imagebuild-provision/scripts/provision-runner.sh --role builder --no-setup --no-check --uid {uid} \\
    && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
        python3-pip sudo tar findutils >/dev/null \\
    && rm -rf /var/lib/apt/lists/*
RUN groupadd -o -g {docker_gid} docker-host && usermod -aG docker-host runner \\
    && printf 'runner ALL=(ALL) NOPASSWD:ALL\\n' > /etc/sudoers.d/runner && chmod 0440 /etc/sudoers.d/runner
"""
SHELLS = {
    "bash": ["bash", "--noprofile", "--norc", "-eo", "pipefail", "{0}"],
    "sh": ["sh", "-e", "{0}"],
    "python": ["python3", "{0}"],
}
NO_SHELL = ["bash", "-e", "{0}"]  # GitHub's default on Linux when neither the step nor defaults name a shell
GPU_LABELS = {"rocm", "cuda"}
# Environments with deployment-branch rules (docs/ci.md, Settings -> Environments): a job naming one from another
# ref is refused by GitHub before it starts ("... is not allowed to deploy to ... due to environment protection
# rules"). The rehearsal applies the same rule.
PROTECTED = {"release": "refs/heads/main", "builder-main": "refs/heads/main"}
ZERO_SHA = "0" * 40


class SetupError(Exception):
    """The rehearsal could not start (exit 2)."""


@dataclass
class StepResult:
    job: str
    leg: str
    step: str
    kind: str  # run or an action's name
    status: str  # passed, failed, skipped
    seconds: float = 0.0
    exit_code: int | None = None
    note: str = ""
    log: str = ""
    attempt: int = 1


@dataclass
class LegResult:
    job: str
    leg: str
    runs_on: Any
    status: str
    marks: list[str] = field(default_factory=list)
    seconds: float = 0.0
    attempt: int = 1


def _docker() -> str:
    found = os.environ.get("IMAGEBUILD_DOCKER") or shutil.which("docker") or "/usr/bin/docker"
    if not os.access(found, os.X_OK):
        raise SetupError("no docker client; run scripts/setup.sh")
    return found


def _host_tools() -> list[str]:
    """The admin-provisioned tools of the host, mounted read-only at the same paths in the runner."""
    paths = {os.environ.get("IMAGEBUILD_DOCKER", ""), shutil.which("docker") or "", shutil.which("cosign") or ""}
    paths |= {"/usr/bin/docker", "/usr/local/bin/docker", "/usr/local/bin/cosign"}
    plugin_dirs = [
        "/usr/local/lib/docker/cli-plugins",
        "/usr/local/libexec/docker/cli-plugins",
        "/usr/lib/docker/cli-plugins",
        "/usr/libexec/docker/cli-plugins",
        "/usr/local/lib/imagebuild",
    ]
    paths |= {d for d in plugin_dirs if Path(d).is_dir()}
    return sorted(p for p in paths if p and Path(p).exists())


@functools.cache  # machine_env asks for every step: matrix.yaml is read once per rehearsal
def _wheel_folders() -> tuple[str, ...]:
    """The folders a build reads wheels from, mounted into the runner at the same paths: $PIP_FIND_LINKS's and every
    `find_links` of matrix.yaml that exists here (local-cpu's torch wheelhouse). Without $PIP_FIND_LINKS (a stock
    Debian machine) the build reads the matrix's folder, so the runner must see it too (the stock-Debian rehearsal
    found the runner without it: no torch wheel)."""
    found = os.environ.get("PIP_FIND_LINKS", "").split()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "find_links" and isinstance(value, str):
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(yaml.safe_load((REPO / "matrix.yaml").read_text()))
    folders = {Path(f.removeprefix("file://")) for f in found}
    return tuple(sorted(str(f) for f in folders if f.is_absolute() and f.is_dir()))


def _socket() -> str:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        raise SetupError(f"DOCKER_HOST={host}: the rehearsal hands the runner a unix socket only")
    return host.removeprefix("unix://")


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout


def _chown(path: Path) -> None:
    if os.geteuid() == 0:
        os.chown(path, RUNNER_UID, RUNNER_UID)


def _legs(job: dict[str, Any], ev: Evaluator) -> list[dict[str, Any]]:
    """The matrix legs of a job (strategy.matrix: axes' product, then include), [{}] without a matrix."""
    matrix = (job.get("strategy") or {}).get("matrix")
    if matrix is None:
        return [{}]
    matrix = expand(matrix, ev)
    if not isinstance(matrix, dict):
        raise ExprError(f"strategy.matrix is {type(matrix).__name__}, not a mapping")
    include = matrix.pop("include", []) or []
    exclude = matrix.pop("exclude", []) or []
    axes = {k: v for k, v in matrix.items()}
    for key, values in axes.items():
        if not isinstance(values, list):
            raise ExprError(f"matrix axis {key} is not a list")
    legs = [dict(zip(axes, combo, strict=True)) for combo in product(*axes.values())] if axes else []
    legs = [leg for leg in legs if not any(all(leg.get(k) == v for k, v in ex.items()) for ex in exclude)]
    for extra in include:
        matched = [leg for leg in legs if all(leg.get(k) == v for k, v in extra.items() if k in axes)]
        if axes and matched:
            for leg in matched:
                leg.update({k: v for k, v in extra.items() if k not in axes})
        else:
            legs.append(dict(extra))
    return legs


def on_the_cpu(matrix: dict[str, Any], runs_on: Any) -> tuple[dict[str, Any], list[str]]:
    """A GPU leg (a `gpu` other than none, or a runner labelled rocm/cuda) rehearsed here: --gpu none, marked."""
    labels = set(runs_on) if isinstance(runs_on, list) else {to_text(runs_on)}
    if matrix.get("gpu") in (None, "none") and not labels & GPU_LABELS:
        return matrix, []
    mark = f"GPU leg on the CPU: --gpu none, not {matrix.get('gpu')} on {sorted(labels)} (its arch check cannot pass)"
    return {**matrix, "gpu": "none"}, [mark]


def hosted(runs_on: Any) -> bool:
    """A GitHub-hosted runner label (ubuntu-24.04, ...), not a self-hosted pool."""
    labels = runs_on if isinstance(runs_on, list) else [runs_on]
    return "self-hosted" not in labels and any(str(label).startswith("ubuntu-") for label in labels)


def setup_python_script(version: str, runs_on: Any) -> str:
    """actions/setup-python v7.0.0 on this runner (ACTIONS in the module docstring): the tool cache, else a build
    for an Ubuntu release from the manifest (not downloaded here), else the action's own error."""
    q = shlex.quote(version)
    if hosted(runs_on):  # the hosted image's tool cache holds every supported version: the runner's python3 stands in
        return (
            'have="$(python3 -c "import sys; print(\'%d.%d\' % sys.version_info[:2])")"\n'
            f'if [ "$have" != {q} ]; then echo "setup-python (hosted {runs_on}): the rehearsal\'s stand-in is the '
            f"runner's Python $have, the step asks for {version}\"; exit 1; fi\n"
            f'echo "setup-python: Python $have (hosted {runs_on}: its tool cache; here the runner\'s own)"\n'
        )
    manifest = "https://raw.githubusercontent.com/actions/python-versions/main/versions-manifest.json"
    return f"""want={q}
cache="${{RUNNER_TOOL_CACHE:-/opt/hostedtoolcache}}/Python"
for dir in "$cache/$want" "$cache/$want".*; do
  if [ -f "$dir/x64.complete" ]; then
    echo "setup-python: found in the local cache: $dir/x64"; echo "$dir/x64/bin" >> "$GITHUB_PATH"; exit 0
  fi
done
echo "Version $want was not found in the local cache"
id=""; ver=""
if [ -f /etc/lsb-release ]; then . /etc/lsb-release; id="${{DISTRIB_ID:-}}"; ver="${{DISTRIB_RELEASE:-}}"
elif [ -f /etc/os-release ]; then . /etc/os-release; id="${{ID:-}}"; ver="${{VERSION_ID:-}}"; fi
case "$id:$ver" in
  [Uu]buntu:20.04 | [Uu]buntu:22.04 | [Uu]buntu:24.04)
    echo "setup-python: $want is available for downloading for $id $ver; the rehearsal does not download"
    exit 1 ;;
esac
echo "Error: The version '$want' with architecture 'x64' was not found for ${{id:-this operating system}} $ver."
echo "The list of all available versions can be found here: {manifest}"
exit 1
"""


def download_plan(names: list[str], name: str, pattern: str, merge: bool) -> list[tuple[str, str]] | str:
    """actions/download-artifact v8.0.1: (artifact, sub-folder of `path`) for each artifact, or why it fails. By
    name, a pattern that matches one artifact, or merge-multiple: into `path` itself; else `path/<name>/`."""
    if name:
        return [(name, "")] if name in names else f"Artifact '{name}' not found"
    matched = [n for n in names if fnmatch.fnmatchcase(n, pattern or "*")]
    if len(matched) == 1 or merge:
        return [(n, "") for n in matched]
    return [(n, n) for n in matched]


def _leg_name(leg: dict[str, Any]) -> str:
    keys = [k for k in ("target", "platform", "arch") if k in leg] or sorted(leg)
    return " ".join(to_text(leg[k]) for k in keys)


def _order(jobs: dict[str, Any]) -> list[str]:
    done: list[str] = []
    pending = list(jobs)
    while pending:
        for name in pending:
            needs = jobs[name].get("needs") or []
            needs = [needs] if isinstance(needs, str) else needs
            if all(n in done for n in needs):
                done.append(name)
                pending.remove(name)
                break
        else:
            raise SetupError(f"jobs with unmet or circular needs: {pending}")
    return done


def _file_commands(path: Path) -> dict[str, str]:
    """GITHUB_ENV / GITHUB_OUTPUT lines: NAME=value and NAME<<DELIM ... DELIM."""
    out: dict[str, str] = {}
    if not path.is_file():
        return out
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            body = []
            i += 1
            while i < len(lines) and lines[i] != delim:
                body.append(lines[i])
                i += 1
            out[name] = "\n".join(body)
        elif "=" in line:
            name, value = line.split("=", 1)
            out[name] = value
        i += 1
    return out


class Rehearsal:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.workflow_path = Path(args.workflow).resolve()
        self.workflow: dict[str, Any] = yaml.safe_load(self.workflow_path.read_text())
        self.docker = _docker()
        self.id = uuid.uuid4().hex[:8]
        base = Path(args.workdir)
        base.mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix=f"{args.prefix}-", dir=base)).resolve()
        os.chmod(self.root, 0o755)
        self.container = f"{args.prefix}-{self.id}"
        self.results: list[StepResult] = []
        self.legs: list[LegResult] = []
        self.needs: dict[str, dict[str, Any]] = {}
        self.wheels: Path | None = None
        self.image = ""
        self.sha = _git("rev-parse", "HEAD").strip()
        repo_name = REPO.name
        self.workspace = self.root / "work" / repo_name / repo_name
        self.artifacts = self.root / "artifacts"
        self.staging = f"{args.registry}/{args.prefix}-{self.id}-staging"
        self.public = f"{args.registry}/{args.prefix}-{self.id}"
        self.cache = f"{args.registry}/{args.prefix}-{self.id}-cache"
        event = args.event
        ref = args.ref or ("refs/pull/1/merge" if event == "pull_request" else "refs/heads/main")
        if event == "pull_request":
            payload: dict[str, Any] = {
                "pull_request": {
                    "number": 1,
                    "head": {"repo": {"full_name": f"rehearsal/{repo_name}"}},
                    "base": {"sha": args.before or ZERO_SHA},
                }
            }
        elif event == "push":
            payload = {"ref": ref, "before": args.before or ZERO_SHA}
        else:
            payload = {"ref": ref, "inputs": {}}
        self.attempt = 1
        self.github: dict[str, Any] = {
            "event_name": event,
            "ref": ref,
            "ref_name": ref.removeprefix("refs/heads/").removeprefix("refs/tags/").removeprefix("refs/pull/"),
            "sha": self.sha,
            "repository": f"rehearsal/{repo_name}",
            "repository_owner": "rehearsal",
            "server_url": "https://github.com",
            "run_id": self.id,
            "run_attempt": "1",
            "workflow": self.workflow.get("name", ""),
            "workspace": str(self.workspace),
            "event": payload,
        }
        self.vars = {
            "IMAGEBUILD_STAGING": self.staging,
            "IMAGEBUILD_PUBLIC": self.public,
            "IMAGEBUILD_CACHE": self.cache,
        }
        self.runs_on: Any = None

    # ---------------------------------------------------------------- setup
    def log(self, text: str) -> None:
        print(f"rehearse: {text}", file=sys.stderr, flush=True)

    def _run(self, argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, **kw)

    def runner_image(self) -> str:
        gid = os.stat(_socket()).st_gid
        text = RUNNER_DOCKERFILE.format(base=self.args.base_image, docker_gid=gid, uid=RUNNER_UID)
        tag = f"{self.args.prefix}-runner:" + hashlib.sha256(text.encode() + PROVISION.read_bytes()).hexdigest()[:12]
        if self._run([self.docker, "image", "inspect", tag]).returncode == 0:
            return tag
        if self._run([self.docker, "image", "inspect", self.args.base_image]).returncode != 0:
            raise SetupError(f"no base image {self.args.base_image}: run scripts/setup.sh (scripts/make-base-image.sh)")
        self.log(f"making the runner image {tag} from {self.args.base_image}")
        with tempfile.TemporaryDirectory() as ctx:
            (Path(ctx) / "Dockerfile").write_text(text)
            shutil.copy(PROVISION, Path(ctx) / "provision-runner.sh")
            proc = self._run(
                [self.docker, "build", "-q", "--network", "host", "-t", tag, ctx],
                env={**os.environ, "DOCKER_BUILDKIT": "0"},
                timeout=900,
            )
        if proc.returncode != 0:
            raise SetupError(f"runner image build failed: {(proc.stderr or proc.stdout).strip()[-800:]}")
        return tag

    def snapshot(self) -> Path:
        """This working tree as checkout would hand it over: tracked and unignored files, and .git."""
        snap = self.root / "snapshot"
        files = [f for f in _git("ls-files", "-co", "--exclude-standard", "-z").split("\0") if f]
        with tempfile.TemporaryFile() as buf:
            with tarfile.open(fileobj=buf, mode="w") as tar:
                for name in files:
                    if (REPO / name).exists() or (REPO / name).is_symlink():
                        tar.add(REPO / name, arcname=name, recursive=False)
                tar.add(REPO / ".git", arcname=".git")
            buf.seek(0)
            with tarfile.open(fileobj=buf, mode="r") as tar:
                # the tar written just above from this checkout: the `tar` filter where the Python has one (3.11.4+;
                # Debian 12's own 3.11.2, the venv's interpreter on a stock machine, has none)
                tar.extractall(snap, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
        subprocess.run(["chmod", "-R", "a+rX", str(snap)], check=True)
        return snap

    def signing_key(self) -> dict[str, str]:
        keys = self.root / "keys"
        keys.mkdir()
        password = keys / "password"
        password.write_text(uuid.uuid4().hex)
        cosign = shutil.which("cosign")
        if not cosign:
            raise SetupError("cosign is not installed: run scripts/setup.sh")
        proc = self._run(
            [cosign, "generate-key-pair", "--output-key-prefix", str(keys / "cosign")],
            env={**os.environ, "COSIGN_PASSWORD": password.read_text()},
            timeout=60,
        )
        if proc.returncode != 0:
            raise SetupError(f"cosign generate-key-pair failed: {proc.stderr.strip()[-300:]}")
        for path in [keys, *keys.iterdir()]:
            _chown(path)
        return {
            "IMAGEBUILD_REHEARSAL_SIGN_KEY": str(keys / "cosign.key"),
            "IMAGEBUILD_REHEARSAL_KEY_PASSWORD_FILE": str(password),
            "IMAGEBUILD_REHEARSAL_VERIFY_KEY": str(keys / "cosign.pub"),
        }

    def start(self, image: str) -> None:
        mounts = [f"{self.root}:{self.root}", f"{_socket()}:/var/run/docker.sock"]
        mounts += [f"{tool}:{tool}:ro" for tool in _host_tools()]
        ca = os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
        if Path(ca).is_file():
            mounts.append(f"{ca}:/etc/ssl/certs/ca-certificates.crt:ro")
        mounts += [f"{folder}:{folder}:ro" for folder in _wheel_folders()]
        cache = Path(self.args.cache)
        cache.mkdir(parents=True, exist_ok=True)
        _chown(cache)
        mounts.append(f"{cache}:{cache}")
        argv = [self.docker, "run", "-d", "--rm", "--name", self.container, "--network", "host", "--init"]
        argv += [a for m in mounts for a in ("-v", m)]
        argv += ["--cpus", str(self.args.cpus)] if self.args.cpus else []
        proc = self._run([*argv, image, "sleep", str(self.args.lifetime)], timeout=120)  # --rm: it goes then
        if proc.returncode != 0:
            raise SetupError(f"could not start the runner container: {proc.stderr.strip()[-500:]}")

    def wheelhouse(self) -> Path | None:
        """The workflow's pinned dependencies (.github/ci-requirements.txt, hashes checked) as wheels, made once per
        lock in the runner (a runner's admin may point pip at a mirror the same way): six venv installs then take
        seconds, not minutes of index queries. The jobs still install with --require-hashes from it."""
        if self.args.no_wheelhouse:
            return None
        lock = REPO / ".github" / "ci-requirements.txt"
        key = hashlib.sha256(lock.read_bytes() + self.image.encode()).hexdigest()[:12]
        wheels = Path(self.args.cache) / f"wheels-{key}"
        if (wheels / ".complete").is_file():
            return wheels
        self.log(f"making the runner's wheelhouse {wheels} (once per pyproject.toml)")
        tmp = self.root / "tmp" / "wheelhouse"
        w, part, t, req = (
            shlex.quote(str(p)) for p in (wheels, f"{wheels}.partial", tmp, self.snap / lock.relative_to(REPO))
        )
        script = (
            f"rm -rf {part} && mkdir -p {t} && python3 -m venv {t}/venv\n"
            f"{t}/venv/bin/python -m pip download -q --only-binary :all: --require-hashes -r {req} -d {part}\n"
            f"mv {part} {w} && touch {w}/.complete && rm -rf {t}\n"
        )
        self.temp = self.root / "tmp"
        env = {**self.machine_env(), "PIP_CACHE_DIR": str(Path(self.args.cache) / "pip")}
        log = self.root / "wheelhouse.log"
        if self.shell(script, env, 900, log, workdir="/") != 0:
            raise SetupError(f"the wheelhouse could not be made: {log.read_text()[-800:]}")
        return wheels

    def stop(self) -> None:
        self._run([self.docker, "rm", "-f", self.container], timeout=60)

    def machine_env(self) -> dict[str, str]:
        """The runner's own environment (its .env file on a real runner)."""
        # TMPDIR at the same path inside and out: a bind mount imagebuild asks the engine for (the coverage
        # scanner's copy of the contract package) names a folder the engine, on the host, can see
        env = {"PATH": DEFAULT_PATH, "HOME": RUNNER_HOME, "LANG": "C.UTF-8", "TMPDIR": str(self.root / "tmp")}
        env["PIP_CERT"] = env["SSL_CERT_FILE"] = env["REQUESTS_CA_BUNDLE"] = "/etc/ssl/certs/ca-certificates.crt"
        for key in ("PIP_FIND_LINKS", "PIP_DEFAULT_TIMEOUT", "PIP_INDEX_URL", "IMAGEBUILD_DOCKER"):
            if os.environ.get(key):
                env[key] = os.environ[key]
        env["PIP_CACHE_DIR"] = str(Path(self.args.cache) / "pip")
        if self.wheels:  # the runner's local mirror of imagebuild's dependencies: pip stays off the network
            # the build's own folders first (imagebuild reads torch from the first; the matrix's when the host sets
            # none), then the wheelhouse
            env["PIP_FIND_LINKS"] = " ".join([*_wheel_folders(), str(self.wheels)])
            env["PIP_NO_INDEX"] = "1"
        # the build tags images <repo>:<target>: keep the rehearsal's apart from the tags other work uses
        env["IMAGEBUILD_LOCAL_REPO"] = f"{self.args.prefix}-local"
        for item in self.args.runner_env:
            key, _, value = item.partition("=")
            env[key] = value
        return env

    # ---------------------------------------------------------------- in the container
    def exec(self, argv: list[str], env: dict[str, str], workdir: str, timeout: float, log: Path) -> int:
        cmd = [self.docker, "exec", "-u", "runner", "-w", workdir]
        for key, value in env.items():
            cmd += ["-e", f"{key}={value}"]
        cmd += [self.container, *argv]
        with log.open("a") as out:
            try:
                proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
            except subprocess.TimeoutExpired:
                out.write(f"\nrehearse: timed out after {timeout:.0f} s (timeout-minutes)\n")
                self.stop()  # what still runs in the container ends with it
                raise
        if self.args.verbose:
            sys.stderr.write(log.read_text()[-4000:])
        return proc.returncode

    def shell(self, script: str, env: dict[str, str], timeout: float, log: Path, workdir: str | None = None) -> int:
        path = self.temp / f"rehearse-{uuid.uuid4().hex[:8]}.sh"
        path.write_text(script)
        _chown(path)
        return self.exec(["bash", "-e", str(path)], env, workdir or str(self.workspace), timeout, log)

    # ---------------------------------------------------------------- actions
    def action(self, uses: str, inputs: dict[str, Any], env: dict[str, str], timeout: float, log: Path) -> int:
        name = uses.split("@", 1)[0]
        if not re.fullmatch(r"[0-9a-f]{40}", uses.partition("@")[2]):
            with log.open("a") as out:
                out.write(f"rehearse: note: {uses} is not pinned by commit SHA\n")
        q = shlex.quote
        ws = self.workspace
        if name == "actions/checkout":
            dest = ws / str(inputs.get("path", "")) if inputs.get("path") else ws
            clean = to_text(inputs.get("clean", "true")) != "false"
            wipe = f"find {q(str(dest))} -mindepth 1 -delete" if clean else ":"
            script = (
                f"mkdir -p {q(str(dest))}\n{wipe}\ntar -C {q(str(self.snap))} -cf - . | tar -C {q(str(dest))} -xf -\n"
            )
            if to_text(inputs.get("persist-credentials", "true")) != "false":
                script += "echo 'rehearse: checkout would keep the token in the git config (persist-credentials)'\n"
            return self.shell(script, env, timeout, log, workdir="/")
        if name == "actions/setup-python":
            return self.shell(
                setup_python_script(to_text(inputs.get("python-version", "")), self.runs_on), env, timeout, log
            )
        if name == "actions/upload-artifact":
            art = self.artifacts / to_text(inputs.get("name", "artifact"))
            paths = [p for p in to_text(inputs.get("path", "")).splitlines() if p.strip()]
            missing = to_text(inputs.get("if-no-files-found", "warn"))
            overwrite = to_text(inputs.get("overwrite", "false")) == "true"
            if len(paths) != 1:
                with log.open("a") as out:
                    out.write("rehearse: upload-artifact with several paths is not emulated\n")
                return 1
            src = ws / paths[0].strip()
            exists = (
                f"echo 'Error: Failed to CreateArtifact: Received non-retryable error: Failed request: (409) Conflict: "
                f"an artifact with this name already exists on the workflow run ({art.name}, overwrite: false)'\n"
                "exit 1\n"
            )
            if overwrite:
                exists = (
                    f"rm -rf {q(str(art))}; echo 'upload-artifact: artifact {art.name} deleted (overwrite: true)'\n"
                )
            script = (
                f'if [ -d {q(str(src))} ] && [ -n "$(ls -A {q(str(src))})" ] || [ -f {q(str(src))} ]; then\n'
                f"  if [ -e {q(str(art))} ]; then {exists}  fi\n"
                f"  mkdir -p {q(str(art))}\n"
                f"  if [ -d {q(str(src))} ]; then cp -a {q(str(src))}/. {q(str(art))}/\n"
                f"  else cp -a {q(str(src))} {q(str(art))}/; fi\n"
                f"elif [ {q(missing)} = error ]; then echo 'upload-artifact: no files at {paths[0]}'; exit 1\n"
                f"else echo 'upload-artifact: no files at {paths[0]} ({missing})'; fi\n"
            )
            return self.shell(script, env, timeout, log)
        if name == "actions/download-artifact":
            dest = ws / to_text(inputs.get("path", "")) if inputs.get("path") else ws
            single = to_text(inputs.get("name", ""))
            pattern = to_text(inputs.get("pattern", ""))
            merge = to_text(inputs.get("merge-multiple", "false")) == "true"
            plan = download_plan(sorted(p.name for p in self.artifacts.iterdir()), single, pattern, merge)
            if isinstance(plan, str):
                with log.open("a") as out:
                    out.write(f"download-artifact: {plan}\n")
                return 1
            script = f"mkdir -p {q(str(dest))}\n" + "".join(
                f"mkdir -p {q(str(dest / sub))} && cp -a {q(str(self.artifacts / n))}/. {q(str(dest / sub))}/\n"
                for n, sub in plan
            )
            script += f"echo 'download-artifact: {len(plan)} artifact(s) into {dest}'\n"
            return self.shell(script, env, timeout, log)
        with log.open("a") as out:
            out.write(f"rehearse: the action {uses} is not emulated; teach scripts/ci_rehearse.py what it does\n")
        return 1

    # ---------------------------------------------------------------- jobs
    def job_contexts(self, matrix: dict[str, Any]) -> dict[str, Any]:
        return {
            "github": self.github,
            "vars": self.vars,
            "secrets": {},
            "inputs": {},
            "matrix": matrix,
            "needs": self.needs,
            "strategy": {"fail-fast": False, "job-index": 0, "job-total": 1},
        }

    def run_job(self, name: str, job: dict[str, Any], keys: dict[str, str]) -> str:
        needs = job.get("needs") or []
        needs = [needs] if isinstance(needs, str) else needs
        results = {n: self.needs.get(n, {}).get("result") for n in needs}

        def job_status(fn: str) -> bool:
            return {
                "success": all(r == "success" for r in results.values()),
                "failure": any(r == "failure" for r in results.values()),
                "always": True,
                "cancelled": False,
            }[fn]

        ev = Evaluator(self.job_contexts({}), job_status)
        if not condition(job.get("if"), ev):
            self.log(f"{name}: skipped (if: {job.get('if', 'success()')})")
            self.needs[name] = {"result": "skipped", "outputs": {}}
            self.legs.append(self._leg_result(name, "", None, "skipped"))
            return "skipped"
        legs = _legs(job, ev)
        outcome = "success"
        outputs: dict[str, Any] = {}
        for matrix in legs:
            leg_name = _leg_name(matrix)
            if self.args.target and "target" in matrix and matrix["target"] not in self.args.target:
                continue  # another target: not rehearsed (--target)
            if self.args.platform and "platform" in matrix and matrix["platform"] not in self.args.platform:
                continue  # another OCI platform: not rehearsed (--platform)
            status, leg_outputs = self.run_leg(name, job, dict(matrix), leg_name, keys)
            outputs.update(leg_outputs)
            if status != "success":
                outcome = "failure"
        self.needs[name] = {"result": outcome, "outputs": outputs}
        return outcome

    def run_leg(
        self, name: str, job: dict[str, Any], matrix: dict[str, Any], leg: str, keys: dict[str, str]
    ) -> tuple[str, dict[str, Any]]:
        ev = Evaluator(self.job_contexts(matrix))
        runs_on = expand(job.get("runs-on"), ev)
        matrix, marks = on_the_cpu(matrix, runs_on)
        ev = Evaluator(self.job_contexts(matrix))
        self.runs_on = runs_on
        started = time.monotonic()
        environment = expand(job.get("environment"), ev)
        environment = to_text(environment.get("name") if isinstance(environment, dict) else environment or "")
        if environment in PROTECTED and self.github["ref"] != PROTECTED[environment]:
            why = (
                f'Branch "{self.github["ref"]}" is not allowed to deploy to {environment} due to environment '
                "protection rules."
            )
            self.log(f"{name} [{leg}]: {why}")
            return self.fail_leg(name, leg, runs_on, marks, started, why)
        timeout_s = float(job.get("timeout-minutes", 360)) * 60
        self.temp = self.root / "temp"
        self.log(f"{name} [{leg}] on {runs_on}" + "".join(f"  ** {m}" for m in marks))
        log_dir = self.root / "logs" / name / (re.sub(r"[^A-Za-z0-9._-]+", "_", leg) or "job")
        log_dir.mkdir(parents=True, exist_ok=True)
        machine = self.machine_env()
        # a runner empties its temp folder between jobs (as the runner user: a root-owned leftover fails here)
        self.temp.mkdir(exist_ok=True)
        _chown(self.temp)
        self.workspace.mkdir(parents=True, exist_ok=True)
        for folder in (self.root / "work", self.workspace.parent, self.workspace):
            _chown(folder)
        wipe = self.exec(
            ["find", str(self.temp), "-mindepth", "1", "-delete"], machine, "/", 60, log_dir / "0-temp.log"
        )
        if wipe != 0:
            return self.fail_leg(name, leg, runs_on, marks, started, "the runner could not empty its temp folder")
        base_env = {
            **machine,
            "CI": "true",
            "GITHUB_WORKFLOW": str(self.github["workflow"]),
            "GITHUB_RUN_ID": self.id,
            "GITHUB_RUN_ATTEMPT": str(self.attempt),
            "GITHUB_JOB": name,
            "GITHUB_SHA": self.sha,
            "GITHUB_REF": self.github["ref"],
            "GITHUB_REF_NAME": self.github["ref_name"],
            "GITHUB_EVENT_NAME": self.github["event_name"],
            "GITHUB_REPOSITORY": self.github["repository"],
            "GITHUB_SERVER_URL": self.github["server_url"],
            "GITHUB_WORKSPACE": str(self.workspace),
            "RUNNER_TEMP": str(self.temp),
            "RUNNER_TOOL_CACHE": str(self.root / "work" / "_tool"),
            "RUNNER_OS": "Linux",
            "RUNNER_ARCH": "X64",
            "RUNNER_NAME": f"rehearsal-{self.id}",
        }
        permissions = job.get("permissions") or {}
        if isinstance(permissions, dict) and permissions.get("id-token") == "write":
            base_env.update(keys)  # the stand-in for this job's OIDC identity
        env_ctx: dict[str, str] = {}
        for key, value in (self.workflow.get("env") or {}).items():
            env_ctx[key] = to_text(expand(value, Evaluator({**self.job_contexts(matrix), "env": env_ctx})))
        for key, value in (job.get("env") or {}).items():
            env_ctx[key] = to_text(expand(value, Evaluator({**self.job_contexts(matrix), "env": env_ctx})))
        added_env: dict[str, str] = {}
        added_path: list[str] = []
        steps_ctx: dict[str, Any] = {}
        failed = False
        defaults = {
            **((self.workflow.get("defaults") or {}).get("run") or {}),
            **((job.get("defaults") or {}).get("run") or {}),
        }
        for index, step in enumerate(job.get("steps") or [], 1):
            label = step.get("name") or step.get("uses") or (step.get("run") or "").splitlines()[0][:60]
            kind = "run" if "run" in step else str(step.get("uses", "?")).split("@")[0]
            log = log_dir / f"{index}.log"

            def step_status(fn: str, failed: bool = failed) -> bool:
                return {"success": not failed, "failure": failed, "always": True, "cancelled": False}[fn]

            contexts = {
                **self.job_contexts(matrix),
                "env": {**env_ctx, **added_env},
                "steps": steps_ctx,
                "runner": {"temp": str(self.temp), "os": "Linux", "arch": "X64", "name": base_env["RUNNER_NAME"]},
                "job": {"status": "failure" if failed else "success"},
            }
            sev = Evaluator(contexts, step_status)
            if not condition(step.get("if"), sev):
                self.record(StepResult(name, leg, label, kind, "skipped", note=f"if: {step.get('if', 'success()')}"))
                continue
            step_env = {k: to_text(expand(v, sev)) for k, v in (step.get("env") or {}).items()}
            env = {**base_env, **env_ctx, **added_env, **step_env}
            env["PATH"] = ":".join([*reversed(added_path), env["PATH"]])
            files = {k: self.temp / f"_{k.lower()}_{index}" for k in ("GITHUB_ENV", "GITHUB_OUTPUT", "GITHUB_PATH")}
            for key, path in files.items():
                path.write_text("")
                _chown(path)
                env[key] = str(path)
            env["GITHUB_STEP_SUMMARY"] = str(self.temp / "_summary")
            remaining = timeout_s - (time.monotonic() - started)
            if "timeout-minutes" in step:
                remaining = min(remaining, float(step["timeout-minutes"]) * 60)
            began = time.monotonic()
            try:
                if "run" in step:
                    shell = step.get("shell") or defaults.get("shell")
                    template = SHELLS.get(shell, shlex.split(shell)) if shell else NO_SHELL
                    script = self.temp / f"step-{index}.sh"
                    script.write_text(str(step["run"]) + "\n")
                    _chown(script)
                    argv = [str(script) if a == "{0}" else a for a in template]
                    workdir = step.get("working-directory") or defaults.get("working-directory")
                    wd = str(self.workspace / workdir) if workdir else str(self.workspace)
                    code = self.exec(argv, env, wd, max(1.0, remaining), log)
                else:
                    inputs = expand(step.get("with") or {}, sev)
                    code = self.action(str(step["uses"]), inputs, env, max(1.0, remaining), log)
            except subprocess.TimeoutExpired:
                code = 124
            seconds = time.monotonic() - began
            status = "passed" if code == 0 else "failed"
            tail = "\n".join(log.read_text().splitlines()[-30:]) if log.exists() else ""
            self.record(StepResult(name, leg, label, kind, status, round(seconds, 1), code, log=tail))
            if "id" in step:
                steps_ctx[step["id"]] = {
                    "outputs": _file_commands(files["GITHUB_OUTPUT"]),
                    "outcome": "success" if code == 0 else "failure",
                    "conclusion": "success" if code == 0 or step.get("continue-on-error") else "failure",
                }
            added_env.update(_file_commands(files["GITHUB_ENV"]))
            if files["GITHUB_PATH"].is_file():
                added_path += [p for p in files["GITHUB_PATH"].read_text().splitlines() if p.strip()]
            if code != 0 and not step.get("continue-on-error"):
                failed = True
            if code == 124:
                self.log(f"{name} [{leg}]: job timeout ({job.get('timeout-minutes', 360)} min)")
                break
        ev_out = Evaluator({**self.job_contexts(matrix), "steps": steps_ctx})
        outputs = {k: to_text(expand(v, ev_out)) for k, v in (job.get("outputs") or {}).items()}
        status = "failure" if failed else "success"
        seconds = round(time.monotonic() - started, 1)
        self.legs.append(self._leg_result(name, leg, runs_on, status, marks, seconds))
        self.log(f"{name} [{leg}]: {status} in {seconds} s")
        return status, outputs

    def fail_leg(
        self, name: str, leg: str, runs_on: Any, marks: list[str], started: float, why: str
    ) -> tuple[str, dict[str, Any]]:
        self.record(StepResult(name, leg, "(runner)", "runner", "failed", note=why, log=why))
        self.legs.append(self._leg_result(name, leg, runs_on, "failure", marks, round(time.monotonic() - started, 1)))
        return "failure", {}

    def _leg_result(self, *args: Any) -> LegResult:
        return LegResult(*args, attempt=self.attempt)

    def record(self, result: StepResult) -> None:
        result.attempt = self.attempt
        self.results.append(result)
        where = f"{result.job} [{result.leg}]" if result.leg else result.job
        extra = f" (exit {result.exit_code})" if result.status == "failed" else ""
        self.log(f"  {result.status:7} {result.seconds:6.1f} s  {where}: {result.step}{extra}")
        if result.status == "failed" and result.log:
            for line in result.log.splitlines()[-15:]:
                print(f"    | {line}", file=sys.stderr)

    # ---------------------------------------------------------------- all
    def run(self) -> int:
        jobs: dict[str, Any] = self.workflow.get("jobs") or {}
        order = _order(jobs)
        wanted = set(self.args.jobs.split(",")) if self.args.jobs else set(order)
        self.rerun = [j for j in self.args.rerun.split(",") if j]
        unknown = (wanted | set(self.rerun)) - set(order)
        if unknown:
            raise SetupError(f"no such job(s) in {self.workflow_path.name}: {', '.join(sorted(unknown))}")
        self.log(
            f"{self.workflow_path.name}: jobs {' -> '.join(j for j in order if j in wanted)}; event {self.args.event}; "
            f"targets {', '.join(self.args.target) or 'all'}; staging {self.staging}; public {self.public}"
        )
        self.log(
            "stand-ins: admin provisioning = scripts/provision-runner.sh --no-setup + host engine, buildx, cosign; "
            "OIDC = a throwaway "
            "cosign key (GITHUB_ACTIONS unset); GPU legs = the CPU with --gpu none"
        )
        started = time.monotonic()
        image = self.runner_image()
        self.snap = self.snapshot()
        for folder in (self.artifacts, self.root / "tmp"):
            folder.mkdir()
            _chown(folder)
        keys = self.signing_key()
        self.image = image
        self.start(image)
        self.wheels = self.wheelhouse()
        try:
            for name in order:
                if name in wanted:
                    self.run_job(name, jobs[name], keys)
            for name in self.rerun:  # GitHub's "Re-run jobs": the same run, its artifacts kept, attempt 2
                self.attempt = 2
                self.github["run_attempt"] = "2"
                self.log(f"re-run of {name} (attempt 2)")
                self.run_job(name, jobs[name], keys)
        finally:
            if not self.args.keep:
                self.stop()
        total = round(time.monotonic() - started, 1)
        failed = [r for r in self.results if r.status == "failed"]
        ran = [r for r in self.results if r.status != "skipped"]
        report = {
            "workflow": str(self.workflow_path),
            "event": self.args.event,
            "ref": self.github["ref"],
            "cache": self.cache,
            "targets": self.args.target,
            "staging": self.staging,
            "public": self.public,
            "seconds": total,
            "passed": bool(ran) and not failed,
            "legs": [asdict(leg) for leg in self.legs],
            "steps": [asdict(r) for r in self.results],
            "root": str(self.root),
        }
        if self.args.report:
            Path(self.args.report).parent.mkdir(parents=True, exist_ok=True)
            Path(self.args.report).write_text(json.dumps(report, indent=2) + "\n")
        if not self.args.keep:
            shutil.rmtree(self.root, ignore_errors=True)
        self.log(f"{'passed' if report['passed'] else 'FAILED'}: {len(ran)} steps ran, {len(failed)} failed, {total} s")
        return 0 if report["passed"] else 1


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workflow", default=str(REPO / ".github" / "workflows" / "images.yml"))
    p.add_argument("--target", action="append", default=[], help="rehearse these targets' legs (default local-cpu)")
    p.add_argument("--all-targets", action="store_true", help="every target's legs (GPU images need their bases)")
    p.add_argument("--platform", action="append", default=[], help="rehearse only these OCI platforms' legs")
    p.add_argument("--event", choices=["push", "pull_request", "workflow_dispatch"], default="push")
    p.add_argument("--ref", default="", help="github.ref (default refs/heads/main; a pull request's refs/pull/1/merge)")
    p.add_argument("--before", default="", help="github.event.before / the pull request's base sha (default: none)")
    p.add_argument("--rerun", default="", help="comma-separated jobs to run again after the run (attempt 2)")
    p.add_argument("--jobs", default="", help="comma-separated jobs to rehearse (default: all)")
    p.add_argument("--registry", default=os.environ.get("IMAGEBUILD_TEST_REGISTRY", "127.0.0.1:5000"))
    p.add_argument("--base-image", default=os.environ.get("IMAGEBUILD_BASE_IMAGE", "local/debian:bookworm"))
    p.add_argument("--prefix", default="imagebuild-rehearsal", help="names of repositories, images, container")
    p.add_argument("--workdir", default="/var/tmp", help="where the runner's folders go (same path inside)")
    p.add_argument("--cache", default="/var/cache/imagebuild-rehearsal", help="the runner's pip cache, wheelhouse")
    p.add_argument("--no-wheelhouse", action="store_true", help="pip installs from the index in every job")
    p.add_argument("--runner-env", action="append", default=[], help="KEY=VALUE in the runner's environment")
    p.add_argument("--cpus", type=float, default=0, help="limit the runner container's CPUs")
    p.add_argument("--report", default="", help="JSON report of every leg and step")
    p.add_argument("--keep", action="store_true", help="keep the container and folders")
    p.add_argument("--lifetime", type=int, default=4 * 3600, help="seconds the runner container lives at most")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", args.prefix):
        p.error("--prefix: lowercase letters, digits and ._- only")
    if args.all_targets:
        args.target = []
    elif not args.target:
        args.target = ["local-cpu"]
    return args


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # runs the cleanup: the container goes, and with it what still runs there


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return Rehearsal(args).run()
    except (SetupError, ExprError, OSError, yaml.YAMLError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
