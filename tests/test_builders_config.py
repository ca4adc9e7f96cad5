"""Builders as configuration (issue 33): the settings model, the buildx commands made from it, how a leg is routed
to a node, and reading what a pushed leg left. Pure functions: the real two-node builder is
tests/e2e/test_multinode_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from imagebuild.engine.builders import (
    METADATA_LIMIT,
    create_commands,
    kubernetes_commands,
    parse_builder,
    push_output,
    read_pushed,
)
from imagebuild.errors import BuildFailed
from imagebuild.matrix.builders import BuilderConfig
from imagebuild.matrix.models import Settings

TLS = {"ca": "/etc/bk/ca.pem", "cert": "/etc/bk/cert.pem", "key": "/etc/bk/key.pem"}


def remote(**node: object) -> dict[str, object]:
    return {"driver": "remote", "nodes": [{"name": "n1", "platforms": ["linux/amd64"], **node}]}


@pytest.mark.parametrize(
    ("node", "words"),
    [
        ({"endpoint": "tcp://bk.example.com:1234"}, "needs tls"),
        ({"endpoint": "unix:///run/bk.sock", "tls": TLS}, "tls is for tcp://"),
        ({}, "needs an endpoint"),
        ({"endpoint": "unix:///run/bk.sock;rm -rf /"}, "pattern"),
        ({"endpoint": "unix:///run/bk.sock", "tls": {**TLS, "key": "relative/key.pem"}}, "absolute path"),
    ],
)
def test_a_node_that_cannot_be_reached_safely_is_refused(node: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        BuilderConfig.model_validate(remote(**node))


def test_kubernetes_nodes_take_a_selector_not_an_endpoint_and_names_are_unique() -> None:
    with pytest.raises(ValidationError, match="node_selector, not endpoint"):
        BuilderConfig.model_validate({**remote(endpoint="unix:///run/a.sock"), "driver": "kubernetes"})
    two = [{"name": "n", "endpoint": "unix:///run/a.sock", "platforms": ["linux/amd64"]}] * 2
    with pytest.raises(ValidationError, match="share a name"):
        BuilderConfig.model_validate({"nodes": two})


def test_settings_name_a_builder_and_define_it() -> None:
    settings = Settings.model_validate(
        {"builder": "fleet", "builders": {"fleet": {**remote(endpoint="unix:///run/a.sock"), "staging": "r:5000/s"}}}
    )
    assert settings.builder == "fleet" and settings.builders["fleet"].nodes[0].platforms == ["linux/amd64"]
    assert Settings().builder is None and Settings().builders == {}


def test_tls_files_reach_buildx_as_driver_options_only() -> None:
    config = BuilderConfig.model_validate(remote(endpoint="tcp://bk.example.com:1234", tls=TLS))
    (argv,) = create_commands("fleet", config)
    assert argv[-1] == "tcp://bk.example.com:1234"
    assert argv[argv.index("--driver-opt") + 1] == "cacert=/etc/bk/ca.pem,cert=/etc/bk/cert.pem,key=/etc/bk/key.pem"
    assert "--build-arg" not in argv and all("--build-arg" not in arg for arg in push_output("r:5000/s"))


def test_kubernetes_commands_pin_one_node_per_platform_with_its_selector() -> None:
    nodes = [
        {"name": arch, "platforms": [f"linux/{arch}"], "node_selector": f"kubernetes.io/arch={arch}"}
        for arch in ("amd64", "arm64")
    ]
    lines = kubernetes_commands("fleet", BuilderConfig.model_validate({"driver": "kubernetes", "nodes": nodes}))
    assert len(lines) == 2 and "--append" not in lines[0] and "--append" in lines[1]
    assert "--platform linux/arm64" in lines[1] and "nodeselector=kubernetes.io/arch=arm64" in lines[1]
    assert "image=moby/buildkit:v0.32.2" in lines[0]


INSPECT = """Name:          fleet
Driver:        remote

Nodes:
Name:             fleet-amd64
Platforms:        linux/amd64*, linux/arm64, linux/386

Name:             fleet-arm64
Platforms:        linux/arm64*, linux/amd64
"""


def _node(name: str, platforms: list[str]) -> dict[str, object]:
    return {"Name": name, "Endpoint": f"unix:///run/{name}.sock", "Status": "running", "Version": "v0.32.2",
            "Platforms": platforms}  # fmt: skip


def test_a_leg_goes_to_the_node_that_pins_its_platform_before_one_that_only_lists_it() -> None:
    listed = {"Name": "fleet", "Driver": "remote", "Nodes": [
        _node("fleet-amd64", ["linux/amd64", "linux/arm64", "linux/386"]),
        _node("fleet-arm64", ["linux/arm64", "linux/amd64"]),
    ]}  # fmt: skip
    builder = parse_builder(listed, INSPECT)
    assert not builder.loads
    assert builder.route("linux/arm64").name == "fleet-arm64"  # type: ignore[union-attr]
    assert builder.route("linux/amd64").name == "fleet-amd64"  # type: ignore[union-attr]
    assert builder.route("linux/386").name == "fleet-amd64"  # type: ignore[union-attr]  # nobody pins it
    assert builder.route("linux/riscv64") is None
    assert parse_builder({"Name": "default", "Driver": "docker", "Nodes": []}, "").loads


def test_a_pushed_legs_metadata_is_read_bounded_and_must_name_a_digest(tmp_path: Path) -> None:
    digest = "sha256:" + "a" * 64
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"containerimage.digest": digest, "buildx.build.ref": "fleet/fleet-arm64/abc"}))
    pushed = read_pushed(good, "127.0.0.1:5000/staging")
    assert (pushed.ref, pushed.node) == (f"127.0.0.1:5000/staging@{digest}", "fleet-arm64")
    for name, body in (
        ("none.json", b"{}"),
        ("bad.json", json.dumps({"containerimage.digest": "sha256:zz"}).encode()),
        ("huge.json", b" " * (METADATA_LIMIT + 1) + b"{}"),
        ("list.json", b"[]"),
    ):
        (tmp_path / name).write_bytes(body)
        with pytest.raises(BuildFailed, match="names no pushed manifest digest"):
            read_pushed(tmp_path / name, "127.0.0.1:5000/staging")


def test_doctor_prints_the_create_commands_of_a_kubernetes_builder_buildx_does_not_know() -> None:
    """Real buildx (skipped without an engine): a configured kubernetes builder is never created by imagebuild."""
    from imagebuild.building.builder_use import doctor_facts, doctor_lines
    from imagebuild.engine.docker import find_engine
    from imagebuild.errors import ConfigError

    try:
        engine = find_engine()
    except ConfigError as exc:
        pytest.skip(f"no engine: {exc.message}")
    nodes = [{"name": "arm64", "platforms": ["linux/arm64"], "node_selector": "kubernetes.io/arch=arm64"}]
    settings = Settings.model_validate({"builders": {"h8-k8s-never-made": {"driver": "kubernetes", "nodes": nodes}}})
    facts = doctor_facts(engine, settings, "h8-k8s-never-made", [("local-cpu", "linux/arm64")])
    assert facts["created"] is False and len(facts["create_commands"]) == 1  # type: ignore[arg-type]
    lines = doctor_lines(facts)
    assert "not in buildx" in lines[0] and "--driver kubernetes" in lines[1] and "nodeselector=" in lines[1]
