"""The docker client as a subprocess, for what only the CLI does well: run a program in an image with a bind
mount, copy a file out of a container, add a layer (`FROM image` + files) through BuildKit, start a build.

The engine's room holds every such process; prove/coverage.py (the arch scan) and release/sbom_image.py (the
inventory and the SBOM layer) call these and say their own errors.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from imagebuild.engine.docker import Engine


class CliError(Exception):
    """A docker command that failed or did not finish; the message is one line (`docker run failed: ...`)."""


class CliTimeout(CliError):
    pass


class CliFailed(CliError):
    def __init__(self, message: str, returncode: int, stderr: str) -> None:
        super().__init__(message)
        self.returncode, self.stderr = returncode, stderr

    @property
    def no_entrypoint(self) -> bool:
        """docker run's 127: the program given as --entrypoint is not in the image."""
        return self.returncode == 127 and "executable file not found" in self.stderr


def docker(engine: Engine, *args: str, timeout: int = 300, input_text: str | None = None) -> str:
    """`docker ARGS` through the engine's client; its stdout, or CliError naming the command and the daemon's line."""
    try:
        proc = subprocess.run(
            [engine.client, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input_text,
            env={**os.environ, **engine.env},
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CliTimeout(f"docker {args[0]} did not finish within {timeout} s") from None
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"]
        # `docker run --rm` may end with "error waiting for container: context canceled" after the daemon's answer.
        tail = next((line for line in lines if "Error response from daemon" in line), lines[-1])
        raise CliFailed(f"docker {args[0]} failed: {tail[:300]}", proc.returncode, proc.stderr)
    return proc.stdout


def start_build(engine: Engine, argv: list[str], cwd: Path) -> subprocess.Popen[str]:
    """Start a BuildKit build (argv: engine.build_prefix() and its flags) in cwd with the engine's environment; its
    stdout and stderr as one text stream (undecodable bytes replaced), for build/buildkit.py to log line by line."""
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env={**os.environ, **engine.env},
        cwd=cwd,
    )


def copy_out(engine: Engine, container: str, path: str) -> str | None:
    """One regular file of a container (`docker cp CID:PATH -` streams a tar), or None."""
    proc = subprocess.run(
        [engine.client, "cp", f"{container}:{path}", "-"],
        capture_output=True,
        timeout=120,
        env={**os.environ, **engine.env},
        check=False,
    )
    if proc.returncode != 0:
        return None
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        member = tar.next()
        handle = tar.extractfile(member) if member is not None and member.isfile() else None
        return handle.read().decode("utf-8", "replace") if handle else None


def platform_args(engine: Engine, image: str) -> list[str]:
    """`--platform os/arch` of a built image: a layer on another platform's image (linux/arm64 here) must say so,
    or BuildKit looks for a host-platform image of that name on Docker Hub."""
    found = docker(engine, "image", "inspect", "--format", "{{.Os}}/{{.Architecture}}", image).strip()
    return ["--platform", found] if re.fullmatch(r"[a-z0-9]+/[a-z0-9]+", found) else []


def image_id(engine: Engine, reference: str) -> str:
    """The engine's own ID of a local image: what `docker run` and `docker tag` take on every store. (buildx's iidfile
    holds the config digest of a one-manifest image; the containerd store names an image by its manifest or index
    digest and answers "No such image" to that one, seen on Docker 26.1.)"""
    from imagebuild.engine import api

    return api.image_id(reference) or docker(engine, "image", "inspect", "--format", "{{.Id}}", reference).strip()


def add_layer(engine: Engine, image: str, tags: list[str], files: Mapping[str, str], instructions: str) -> str:
    """Build `FROM image` + instructions (COPYing files, written into the context) under tags; the new image's ID as
    the engine names it (image_id of its first tag).

    Through buildx without a provenance attestation: buildx's default one records this throwaway build (its
    invocation ID and times), and on the containerd store it is in the image's index, so in its ID: the same layer
    on the same image would be a new ID each time (seen on Docker 26.1), and the image would carry the provenance of
    a `FROM <id>` build rather than its own."""
    with tempfile.TemporaryDirectory(prefix="imagebuild-layer-") as tmp:
        ctx = Path(tmp)
        for name, text in files.items():
            (ctx / name).write_text(text, encoding="utf-8")
        (ctx / "Dockerfile").write_text(f"FROM {image}\n{instructions}", encoding="utf-8")
        tag_args = [arg for tag in tags for arg in ("-t", tag)]
        build = engine.build_prefix()[1:]  # argv after the client: ["build"] or ["buildx", "build"]
        # OCI media types asked for: without an attestation BuildKit's image exporter writes Docker's (seen on 26.1)
        oci = ["--provenance=false", "--output", "type=docker,oci-mediatypes=true"]
        flags = platform_args(engine, image) + (oci if engine.mode == "buildx" else [])
        docker(engine, *build, "-q", *flags, "--iidfile", str(ctx / "iid"), *tag_args, str(ctx), timeout=600)
        return image_id(engine, tags[0]) if tags else (ctx / "iid").read_text().strip()


def built_image_id(engine: Engine, iidfile: Path, tags: list[str]) -> tuple[str | None, str | None]:
    """(the built image's ID as this engine names it, None) or (None, why not), after a build that wrote iidfile.

    BuildKit's iidfile holds the config digest, the image ID of a graph-driver engine; the containerd store
    names a one-manifest image by its manifest digest and answers "No such image" to the config digest (seen
    on Docker 26.1), so through buildx the ID is the engine's own for the first tag the build wrote."""
    if engine.mode != "buildx" or not tags:
        return iidfile.read_text().strip(), None
    try:
        found = image_id(engine, tags[0])
    except CliError as exc:
        return None, f"the built image {tags[0]} could not be inspected: {exc}"
    return (found, None) if found.startswith("sha256:") else (None, f"{tags[0]} names no image after the build")
