"""The cached path (issue 22): post-build work is restored for the same built image ID, redone otherwise; the tags
go back through the Engine API (a real HTTP server on a unix socket stands in for the engine's)."""

from __future__ import annotations

import http.server
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuild.building import post_cache
from imagebuild.building.buildkit import TargetResult
from imagebuild.engine import api
from imagebuild.engine.docker import Engine

ENGINE = Engine("/bin/false", "buildkit", "20.10", "20.10")


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def engine_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            seen.append(self.path)
            known = "/images/sha256:final/tag" in self.path
            self.send_response(201 if known else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_DELETE(self) -> None:  # noqa: N802
            seen.append("DELETE " + self.path)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return None

        def address_string(self) -> str:
            return "unix"

    path = tmp_path / "docker.sock"
    server = _Server(str(path), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    yield seen
    server.shutdown()


def _result(image: str = "sha256:built") -> TargetResult:
    return TargetResult("local-cpu", True, image, ["imagebuild:local-cpu", "imagebuild:local-cpu-abc"], 0.1, 5, 5,
                        None, [], "log", "Dockerfile", [])  # fmt: skip


def test_same_built_id_restores_final_image_and_records(engine_socket: list[str], tmp_path: Path) -> None:
    report = tmp_path / "build-report.json"
    coverage = tmp_path / "coverage.json"
    coverage.write_text("{}")
    done = _result()
    done.image_id, done.coverage, done.size = "sha256:final", str(coverage), {"unpacked_bytes": 7}
    post_cache.remember({"local-cpu": "sha256:built"}, [done], report)
    again = _result()
    assert post_cache.reuse(ENGINE, [again], report) == []
    assert (again.image_id, again.coverage, again.size) == ("sha256:final", str(coverage), {"unpacked_bytes": 7})
    tags = [p for p in engine_socket if not p.startswith("DELETE")]
    assert len(tags) == 2 and all("repo=imagebuild" in p for p in tags)
    assert [p for p in engine_socket if p.startswith("DELETE")][0].endswith("/images/sha256:built")  # BuildKit's image


def test_another_built_id_a_gone_image_or_a_missing_document_is_redone(
    engine_socket: list[str], tmp_path: Path
) -> None:  # noqa: E501
    report = tmp_path / "build-report.json"
    coverage = tmp_path / "coverage.json"
    coverage.write_text("{}")
    done = _result()
    done.image_id, done.coverage = "sha256:final", str(coverage)
    post_cache.remember({"local-cpu": "sha256:built"}, [done], report)
    assert post_cache.reuse(ENGINE, [_result("sha256:other")], report) != []  # BuildKit gave another image
    coverage.unlink()
    assert post_cache.reuse(ENGINE, [_result()], report) != []  # the document it points to is gone
    gone = _result()
    gone.image_id = "sha256:final-gone"
    post_cache.remember({"local-cpu": "sha256:built"}, [gone], report)
    assert post_cache.reuse(ENGINE, [_result()], report) != []  # the engine answers 404 for the final image


def test_api_is_not_used_for_an_engine_off_a_unix_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    assert api.tag("sha256:x", "imagebuild:local-cpu") is None and api.image_id("imagebuild:local-cpu") is None


def test_with_the_engine_the_final_image_is_held_and_the_built_one_removed(
    engine_socket: list[str], tmp_path: Path
) -> None:
    done = _result()
    done.image_id = "sha256:final"
    post_cache.remember({"local-cpu": "sha256:built"}, [done], tmp_path / "r.json", engine=ENGINE)
    assert any("/images/sha256:final/tag" in p and "repo=imagebuild-post-cache" in p for p in engine_socket)
    deletes = [p for p in engine_socket if p.startswith("DELETE")]
    assert len(deletes) == 1 and deletes[0].endswith("/images/sha256:built"), engine_socket
