"""Every pip step of every rendered Dockerfile installs from a hashed set (imagebuild.lock.pipsteps), the committed
ones and a fresh render of every target alike; the few that cannot yet are listed below, each with its reason, and
each such reason is checked against the lock (the exception goes away by itself once the lock can pin the set)."""

from __future__ import annotations

import fnmatch
import json
import subprocess
from pathlib import Path

import pytest

from imagebuild.lock import lockfile, pipsets, pipsteps, resolve
from imagebuild.lock.inputs import Input
from imagebuild.matrix import load_matrix
from imagebuild.plan.target_plan import plan_for
from imagebuild.render.dockerfile import render_plan
from tests.test_lock import _copy_repo

REPO = Path(__file__).resolve().parents[1]

# (target, or a glob of targets; stage; the lock key whose set is unresolved) -> why that pip step still resolves
# from an index. Every exception must name a lock entry that is unresolved with a reason, for every target it
# matches: once `imagebuild lock` pins it, render writes the hashed step and the exception matches nothing live (the
# test then fails until it is removed).
ALLOWED = {
    ("rocm6.1-torch2.3", "torch-build", "torch"): (
        "the fork's requirements.txt at ceaa1e4a needs github.com/fxmarty/pytorch (not reachable here; its snapshot "
        "is larger than a mirror can bring): `imagebuild lock --git-mirror` pins it"
    ),
    ("rocm6.1-torch2.3", "torch", "torch:requires"): (
        "the built wheel's requirements are setup.py's install_requires at the same commit: the same repository"
    ),
    ("rocm6.1-torch2.3", "torch", "torch:pytorch-triton-rocm"): (
        "pytorch-triton-rocm 2.3.0 is on download.pytorch.org/whl/rocm6.0 only, which does not answer here"
    ),
    ("cuda12.1-torch2.3", "torch", "torch"): (
        "torch 2.3.0+cu121 and its requirements come from download.pytorch.org/whl/cu121, which does not answer here"
    ),
    ("rocm7.14-*-torch2.12", "torch-amd64", "torch"): (
        "torch 2.12.0+rocm7.14.0 and the ROCm wheels come from repo.amd.com/rocm/whl-multi-arch, which does not "
        "answer here (issue 32 item 1)"
    ),
    ("rocm7.14-*-torch2.12", "venv-amd64", "runtime"): (
        "vLLM's set is resolved after the torch set (rocm.frameworks.amd.com besides PyPI), which is not locked"
    ),
}
SEEDS = ("rocm6.1-torch2.3", "cuda12.1-torch2.3")


ALLOWED_KEYS = sorted({f"pip:{target}@linux/amd64:{key}" for (target, _, key) in ALLOWED if target in SEEDS})


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(REPO / "matrix.yaml")


@pytest.fixture(scope="module")
def doc():
    loaded = lockfile.load(REPO / lockfile.LOCK_NAME)
    assert loaded is not None
    return loaded


def _live(target: str, dockerfile: str, doc: dict, oci: str) -> list[str]:
    """The live steps of dockerfile that no ALLOWED exception covers (an exception covers a step of its stage
    only while its lock entry is unresolved with a reason)."""
    left = []
    for step in pipsteps.steps(dockerfile):
        if step.kind != "live":
            continue
        covered = [
            key
            for (name, stage, key) in ALLOWED
            if fnmatch.fnmatchcase(target, name) and stage == step.stage
            and doc["inputs"].get(f"pip:{target}@{oci}:{key}", {}).get("status") == "unresolved"
            and doc["inputs"][f"pip:{target}@{oci}:{key}"].get("why")
        ]  # fmt: skip
        if not covered:
            left.append(f"{target} line {step.line}: {step.describe()} ({step.why})")
    return left


def test_every_committed_dockerfile_installs_only_hashed_sets(matrix, doc) -> None:
    found = sorted(REPO.glob("dockerfiles/*/Dockerfile"))
    assert len(found) >= 4
    left = []
    for path in found:
        target = path.parent.name
        left += _live(target, path.read_text(), doc, matrix.target(target).oci_platforms[0])
    assert left == []


def test_a_fresh_render_of_every_target_installs_only_hashed_sets(matrix, doc) -> None:
    left = []
    for target in matrix.targets:
        for oci in target.oci_platforms:
            plan = plan_for(matrix, target, oci=oci)
            left += _live(target.name, render_plan(plan, matrix).files["Dockerfile"], doc, oci)
    assert left == []


def test_each_exception_still_names_a_live_step_of_an_unresolved_set(matrix, doc) -> None:
    """No stale exception: each one matches a live step of the committed Dockerfile, and its lock entry says why
    it is unresolved."""
    names = [t.name for t in matrix.targets]
    for (pattern, stage, key), reason in ALLOWED.items():
        matched = [name for name in names if fnmatch.fnmatchcase(name, pattern)]
        assert reason and matched, pattern
        for target in matched:
            entry = doc["inputs"][f"pip:{target}@linux/amd64:{key}"]
            assert entry["status"] == "unresolved" and entry["why"], key
            steps = pipsteps.steps((REPO / "dockerfiles" / target / "Dockerfile").read_text())
            assert any(s.stage == stage and s.kind == "live" for s in steps), (target, stage)


def test_the_seed_server_steps_install_the_locked_sets(doc) -> None:
    """The final stage's server install and make gen-server take the sets the lock resolved (issue 32 item 4)."""
    for target in ("rocm6.1-torch2.3", "cuda12.1-torch2.3"):
        folder = REPO / "dockerfiles" / target
        steps = pipsteps.steps((folder / "Dockerfile").read_text())
        server = [s for s in steps if s.stage in ("runtime-server", "final")]
        assert [s.kind for s in server if s.kind not in ("local",)] == ["hashed", "hashed", "no-index", "git", "hashed"]
        for name, key in (("gen-server", "runtime-server:gen-server"), ("runtime-server", "runtime-server")):
            lines = (folder / "requirements" / f"{name}.txt").read_text().splitlines()
            assert [ln for ln in lines if not ln.startswith("#")] == doc["inputs"][f"pip:{target}@linux/amd64:{key}"][
                "requirements"
            ]
        assert "poetry-core==" in (folder / "requirements" / "server-build.txt").read_text()


@pytest.mark.parametrize(
    ("run", "kind"),
    [
        ("pip install --no-deps --require-hashes --only-binary=:all: -r /tmp/r.txt", "hashed"),
        ("pip install --no-deps --require-hashes -r /tmp/r.txt", "live"),  # an sdist would build with a live backend
        ("PIP_X=1 python3 -m pip install --require-hashes --no-deps --only-binary=:all: -r /tmp/r.txt", "hashed"),
        ("uv pip install --no-deps --require-hashes --only-binary :all: -r /tmp/r.txt", "hashed"),
        ("pip install --no-deps /wheels/*.whl", "local"),
        ("pip wheel --no-build-isolation --no-deps -w /wheels .", "local"),
        ("PIP_NO_INDEX=1 make gen-server", "no-index"),
        ("export PIP_NO_INDEX=1 && make gen-server", "no-index"),
        ("pip install --no-index --no-deps grpcio-tools==1.51.1", "no-index"),
        (f"pip wheel --no-deps --no-build-isolation 'x @ git+https://h.example/x.git@{'a' * 40}'", "git"),
        # live: each misses one condition
        ("make gen-server", "live"),
        ("pip install --require-hashes -r /tmp/r.txt", "live"),  # without --no-deps
        ("pip install --no-deps -r /tmp/r.txt", "live"),  # a file without hashes
        (
            "pip install --no-deps --require-hashes --only-binary=:all: -r /tmp/r.txt requests",
            "live",
        ),  # a name besides the file
        ("pip install --no-deps requests==2.31.0", "live"),
        ("pip install /wheels/torch.whl", "live"),
        ("pip wheel --no-deps -w /wheels .", "live"),  # build isolation: the backend resolves live
        (f"pip wheel --no-deps 'x @ git+https://h.example/x.git@{'a' * 40}'", "live"),
        ("pip wheel --no-deps --no-build-isolation 'x @ git+https://h.example/x.git@main'", "live"),  # a branch
        ("pip install --no-deps --frobnicate requests /wheels/a.whl", "live"),  # an unknown option's value
        (
            "pip install --no-deps --require-hashes -r /tmp/r.txt --find-links /w -c /tmp/c.txt --only-binary :all:",
            "hashed",
        ),
        ("pip install --no-deps --no-index --find-links https://x.example/ requests", "live"),
        ("PIP_NO_INDEX=1 pip install --no-deps --find-links /w requests", "live"),
        ("pip install 'unbalanced", "live"),
    ],
)
def test_each_pip_call_is_judged(run: str, kind: str) -> None:
    dockerfile = f"FROM x AS s\nRUN --mount=type=cache,target=/root/.cache/pip \\\n    true && {run}\n"
    [step] = pipsteps.steps(dockerfile)
    assert (step.kind, step.stage, step.line) == (kind, "s", 2), step.why


@pytest.mark.parametrize(
    ("run", "kinds"),
    [
        # a heredoc is not read word by word: a RUN holding one is live when it mentions pip or make
        (
            "RUN <<EOF\npip install --no-deps --require-hashes --only-binary=:all: -r /r.txt\nEOF\n"
            "RUN pip install --no-deps /w/a.whl",
            ["live", "local"],
        ),
        ("RUN cat <<-'X' > /f\nhello\nX", []),
        ('RUN ["pip", "install", "--no-deps", "--require-hashes", "--only-binary=:all:", "-r", "/r.txt"]', ["hashed"]),
        ('RUN ["pip", "install", "requests"]', ["live"]),
        ('RUN ["pip", "install", 3]', ["live"]),
        ("RUN sh -c 'pip install requests'", ["live"]),
        ('RUN bash -c "pip install --no-deps --require-hashes --only-binary=:all: -r /r.txt" && pip check', ["hashed"]),
        (
            'RUN sh -c "sh -c \'sh -c \\"sh -c \\\\\\"sh -c true\\\\\\"\\"\'"',
            ["live"],
        ),  # shells nested deeper than MAX_DEPTH
        ("RUN tr a b <<< 'pip install x' && pip install --no-deps /w/a.whl", ["local"]),  # a here-string
    ],
)
def test_other_run_forms_are_read_or_judged_live(run: str, kinds: list[str]) -> None:
    assert [s.kind for s in pipsteps.steps(f"FROM x AS s\n{run}\n")] == kinds


def test_pip_in_a_quoted_script_or_a_comment_is_not_a_step() -> None:
    dockerfile = (
        "FROM x AS a\n# RUN pip install requests\n"
        'RUN python3 -c \'import subprocess; subprocess.run(["pip", "list"])\' && pip check && pip list\n'
    )
    assert pipsteps.steps(dockerfile) == []


def test_a_git_requirement_in_the_lock_must_be_pinned_by_commit(tmp_path: Path, cli) -> None:
    """The lock's `vcs` lines become pip arguments: one that is not `name @ git+https://...@<40-hex>` (an option, a
    branch) is refused by render with one error line."""
    root = _copy_repo(tmp_path)
    doc = json.loads((root / lockfile.LOCK_NAME).read_text())
    entry = doc["inputs"]["pip:rocm6.1-torch2.3@linux/amd64:runtime-server"]
    entry["vcs"] = ["--index-url=https://evil.example/simple"]
    entry["stand_ins"] = {"--index-url=https://evil.example/simple": "transformers==4.41.0"}
    (root / lockfile.LOCK_NAME).write_text(json.dumps(doc))
    result = cli("--matrix", str(root / "matrix.yaml"), "render", "rocm6.1-torch2.3")
    assert result.exit_code == 2 and result.exception is None, result.stderr
    assert "error: matrix.lock.json: runtime-server keeps the git requirement" in result.stderr


def test_requirements_are_read_from_a_part_of_a_source_file() -> None:
    pyproject = '[tool.poetry]\nname = "x"\n[build-system]\nrequires = ["poetry-core>=1.0.0"]\n'
    assert pipsets.part_requirements(pyproject, "build-system.requires") == ["poetry-core>=1.0.0"]
    setup = 'import os\ndef main():\n    install_requires = [\n        "filelock",\n        "sympy",\n    ]\n'
    assert pipsets.part_requirements(setup, "setup.install_requires") == ["filelock", "sympy"]
    for text, part in (
        ("install_requires = os.environ['X'].split()\n", "setup.install_requires"),  # not a literal: refused
        ("x = 1\n", "setup.install_requires"),
        ("[build-system]\nrequires = 3\n", "build-system.requires"),
        ("not = = toml", "build-system.requires"),
    ):
        with pytest.raises(pipsets.ResolveError):
            pipsets.part_requirements(text, part)


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env)
    return done.stdout.strip()


def test_the_source_builds_sets_resolve_through_a_mirror_and_say_why_without_one(tmp_path: Path) -> None:
    """The torch source's requirements.txt and setup.py install_requires, read at the pinned commit from a local
    mirror (--git-mirror) and resolved with hashes by uv (PyPI); without the mirror (the remote does not answer)
    each set is unresolved with the reason."""
    repo = tmp_path / "fork"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "requirements.txt").write_text("packaging==24.0\n")
    (repo / "setup.py").write_text('def main():\n    install_requires = ["packaging==24.0"]\n')
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "x")
    commit = _git(repo, "rev-parse", "HEAD")
    url = "https://git.invalid/fork"
    spec = {"python": "3.10", "platform": "x86_64-manylinux_2_28", "index_url": "https://pypi.org/simple"}
    spec |= {"find_links": None, "no_deps": False, "after": [], "torch": None}
    inputs = {
        f"git:{url}@{commit}": Input(f"git:{url}@{commit}", "git", {"url": url, "commit": commit, "ref": None}, "w"),
        "pip:t@linux/amd64:torch": Input(
            "pip:t@linux/amd64:torch",
            "pip",
            {**spec, "requirements": [], "from_source": {"git": url, "commit": commit, "file": "requirements.txt"}},
            "w",
        ),
        "pip:t@linux/amd64:torch:requires": Input(
            "pip:t@linux/amd64:torch:requires",
            "pip",
            {
                **spec,
                "requirements": [],
                "from_source": {"git": url, "commit": commit, "file": "setup.py", "part": "setup.install_requires"},
            },
            "w",
        ),
    }
    entries, _ = resolve.lock(inputs, None, resolve.Options(git_mirrors={url: repo / ".git"}, limit=30))
    for key in ("pip:t@linux/amd64:torch", "pip:t@linux/amd64:torch:requires"):
        if entries[key]["status"] != "locked" and "uv:" in entries[key].get("why", ""):
            pytest.skip(f"PyPI does not answer here: {entries[key]['why'][:200]}")
        assert entries[key]["status"] == "locked", entries[key]
        [line] = entries[key]["requirements"]
        assert line.startswith("packaging==24.0 --hash=sha256:")
    entries, _ = resolve.lock(inputs, None, resolve.Options(limit=5))
    for key in ("pip:t@linux/amd64:torch", "pip:t@linux/amd64:torch:requires"):
        assert entries[key]["status"] == "unresolved" and "git.invalid" in entries[key]["why"]


def test_once_the_lock_pins_the_torch_sets_no_seed_step_resolves_live(tmp_path: Path, cli) -> None:
    """What render writes when the lock holds the sets this machine cannot resolve (a host that reaches GitHub and
    download.pytorch.org, or --git-mirror): the torch build's requirements, the built wheel's requirements (the
    wheel then goes in --no-deps and pip check proves the set complete), pytorch-triton-rocm and the CUDA torch
    wheel all install by hash, and no pip step of either seed Dockerfile is live."""
    root = _copy_repo(tmp_path)
    doc = json.loads((root / lockfile.LOCK_NAME).read_text())
    stand_in = doc["inputs"]["pip:rocm6.1-torch2.3@linux/amd64:component-vllm-rocm"]  # any locked set's pins
    for key in ALLOWED_KEYS:
        entry = doc["inputs"][key]
        entry.pop("why")
        entry.update(status="locked", packages=stand_in["packages"], requirements=stand_in["requirements"])
    (root / lockfile.LOCK_NAME).write_text(json.dumps(doc))
    result = cli("--matrix", str(root / "matrix.yaml"), "render", "rocm6.1-torch2.3", "cuda12.1-torch2.3")
    assert result.exit_code == 0, result.stderr
    for target in ("rocm6.1-torch2.3", "cuda12.1-torch2.3"):
        dockerfile = (root / "dockerfiles" / target / "Dockerfile").read_text()
        assert [s.describe() for s in pipsteps.steps(dockerfile) if s.kind == "live"] == [], target
    rocm = (root / "dockerfiles" / "rocm6.1-torch2.3" / "Dockerfile").read_text()
    assert "&& pip install --no-deps /tmp/torch-wheels/torch-*.whl \\\n    && pip check\n" in rocm
    for name in ("torch-build", "torch-requires", "torch-pytorch-triton-rocm"):
        assert (root / "dockerfiles" / "rocm6.1-torch2.3" / "requirements" / f"{name}.txt").is_file(), name
