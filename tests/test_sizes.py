"""Size budgets (matrix size_budgets): the largest layers named by their Dockerfile step; over budget fails."""

from __future__ import annotations

import io
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from imagebuild.building import sizes
from imagebuild.errors import ConfigError
from imagebuild.matrix import load_matrix

REPO = Path(__file__).resolve().parents[1]


def test_the_matrix_budgets_local_cpu_and_names_only_targets() -> None:
    matrix = load_matrix(REPO / "matrix.yaml")
    budgets = matrix.model.size_budgets
    assert budgets["local-cpu"].unpacked_mb >= 1442  # measured: 1,442 MB (linux/amd64, from the lock)
    assert sizes.budget_for(budgets, "local-cpu", {t.name for t in matrix.targets}) is budgets["local-cpu"]
    with pytest.raises(ConfigError, match="size_budgets.nope: no such target"):
        sizes.budget_for({"nope": budgets["local-cpu"]}, "local-cpu", {"local-cpu"})


def test_dockerfile_steps_drop_mount_flags_and_keep_the_stage() -> None:
    text = "FROM x AS base\nRUN --mount=type=cache,target=/c \\\n    pip install a\nFROM base AS final\nRUN echo hi\n"
    assert sizes.dockerfile_steps(text) == [("base", "pip install a"), ("final", "echo hi")]


def test_over_budget_names_the_largest_layers() -> None:
    record = {
        "unpacked_bytes": 2_000_000_000,
        "largest_layers": [{"bytes": 1_500_000_000, "step": "torch: RUN pip install torch"}],
        "budget": {"unpacked_mb": 1700, "compressed_mb": None},
    }
    reason = sizes.over_budget(record)
    assert reason and "unpacked 2000 MB > 1700 MB" in reason and "1500 MB from `torch: RUN pip install torch`" in reason
    assert sizes.over_budget({**record, "unpacked_bytes": 1_000_000_000}) is None
    assert sizes.over_budget({**record, "budget": None}) is None


@pytest.mark.docker
def test_a_real_image_is_measured_and_refused_over_its_budget() -> None:
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env(timeout=120)
        client.images.get("local/debian:bookworm")
    except Exception as exc:
        pytest.skip(f"no engine or no local base (scripts/setup.sh makes it): {exc}")
    dockerfile = "FROM local/debian:bookworm AS base\nRUN head -c 3000000 /dev/urandom > /blob\n"
    tag = f"imagebuild-h23:size-{uuid.uuid4().hex[:8]}"
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    try:
        budget = SimpleNamespace(unpacked_mb=1, compressed_mb=1)
        from imagebuild.engine.sdk import DockerEngine

        record = sizes.measure(DockerEngine(client), image.id, budget, dockerfile)
        assert record["largest_layers"][0]["step"] == "(the base image)"  # debootstrap's tree, imported
        blob = next(r for r in record["largest_layers"] if "head -c 3000000" in r["step"])
        assert blob["bytes"] >= 3_000_000 and blob["step"].startswith("base: ")
        assert record["compressed_bytes"] > 3_000_000  # random bytes do not compress
        # unpacked is the layers' sum as the engine's own history gives it, on either store (the containerd store's
        # image size is its compressed content: the debootstrapped base, 184 MB unpacked, counted at about a third)
        history = sum(int(row.get("Size") or 0) for row in client.api.history(image.id))
        assert record["unpacked_bytes"] == history > 3_000_000
        assert record["engine_size_bytes"] == client.images.get(image.id).attrs["Size"]
        reason = sizes.over_budget(record)
        assert reason and "unpacked" in reason and "compressed" in reason and "(the base image)" in reason
    finally:
        client.images.remove(image.id, force=True)
