"""Builders as configuration (issue 33): a named buildx builder, its nodes and the platforms each node builds.

`settings.builder` names the builder every build goes to (`imagebuild build --builder NAME` overrides it);
`settings.builders` defines builders imagebuild creates in buildx itself. A node is one BuildKit daemon: a
`unix://` socket on this machine, or `tcp://` with mutual TLS, whose certificate and key are FILES named here (their
paths reach buildx as driver options, never a build argument or a log line of ours). A kubernetes builder's nodes
are BuildKit deployments chosen by a node selector; its `buildx create` lines are generated
(`engine/builders.kubernetes_commands`) and documented, not run here.

A builder that is not the engine's own (`docker` driver) cannot load into the local engine: its legs are pushed by
digest to `staging` and pulled back (docs/builders.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from imagebuild.matrix.fields import AbsPath, Name, excerpt
from imagebuild.matrix.oci_rules import OciPlatformName
from imagebuild.matrix.sources import Strict

ENDPOINT_PATTERN = r"^(unix:///[A-Za-z0-9._/-]+|tcp://[A-Za-z0-9.-]+:[0-9]{1,5})$"
STAGING_PATTERN = r"^[a-z0-9.-]+(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)+$"
SELECTOR_PATTERN = r"^[A-Za-z0-9./_-]+=[A-Za-z0-9._-]+$"


class NodeTls(Strict):
    """Mutual TLS of a tcp:// node: three files (buildx driver options cacert, cert, key)."""

    ca: AbsPath = Field(description="CA certificate file the node's server certificate is checked against.")
    cert: AbsPath = Field(description="Client certificate file.")
    key: AbsPath = Field(description="Client key file (a path only: the key never leaves the file).")
    server_name: Name | None = Field(default=None, description="Server name to check, when not the endpoint host.")


class BuilderNode(Strict):
    name: Name = Field(description="The node's name in buildx.")
    endpoint: str | None = Field(
        default=None,
        pattern=ENDPOINT_PATTERN,
        description="remote driver: unix:///path/to/buildkitd.sock or tcp://host:port (tcp needs tls).",
    )
    platforms: list[OciPlatformName] = Field(min_length=1, description="OCI platforms this node builds.")
    tls: NodeTls | None = Field(default=None, description="tcp:// only: mutual TLS files.")
    node_selector: str | None = Field(
        default=None,
        pattern=SELECTOR_PATTERN,
        description="kubernetes driver: the Kubernetes node label the BuildKit pod runs on (kubernetes.io/arch=arm64).",
    )

    @model_validator(mode="after")
    def _endpoint_rules(self) -> BuilderNode:
        if self.endpoint and self.endpoint.startswith("tcp://") and self.tls is None:
            raise ValueError(f"node {excerpt(self.name)}: a tcp:// endpoint needs tls (ca, cert, key files)")
        if self.tls is not None and not (self.endpoint or "").startswith("tcp://"):
            raise ValueError(f"node {excerpt(self.name)}: tls is for tcp:// endpoints")
        return self


class BuilderConfig(Strict):
    driver: Literal["remote", "kubernetes"] = Field(default="remote", description="buildx driver of every node.")
    nodes: list[BuilderNode] = Field(min_length=1, max_length=32, description="The nodes, in routing order.")
    staging: str | None = Field(
        default=None,
        pattern=STAGING_PATTERN,
        description="Repository (HOST/PATH) each leg is pushed to by digest and pulled back from.",
    )
    namespace: Name = Field(default="buildkit", description="kubernetes driver: the namespace of the deployments.")

    @model_validator(mode="after")
    def _nodes_fit_driver(self) -> BuilderConfig:
        names = [node.name for node in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError("two nodes share a name")
        for node in self.nodes:
            if self.driver == "remote" and node.endpoint is None:
                raise ValueError(f"node {excerpt(node.name)}: the remote driver needs an endpoint")
            if self.driver == "kubernetes" and node.endpoint is not None:
                raise ValueError(f"node {excerpt(node.name)}: the kubernetes driver takes node_selector, not endpoint")
        return self
