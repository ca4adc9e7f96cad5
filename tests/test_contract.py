"""The host/image contract (imagecontract/): every GPU target ID the host accepts reads back unchanged in the image,
the rendered kernels stage's arch list passes the in-image verifier, and the exported schemas match the models."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import imagecontract
from imagebuild.cli import main
from imagebuild.matrix.arches import parse_list as host_parse_list
from imagecontract import targets
from imagecontract import verify as kv
from imagecontract.atomic import write_atomic
from imagecontract.codeobjects import Listing
from imagecontract.models import SCHEMAS, Manifest, ModelError, SmokeReport
from tests.test_kernel_verify import elf_with, fatbin, offload_bundle

REPO = Path(__file__).resolve().parents[1]
CONTRACT = Path(imagecontract.__file__).parent


def in_image_verify(tmp_path: Path, library: Path, arch: str) -> subprocess.CompletedProcess[str]:
    """The verifier as the kernels stage runs it: the contract package alone, isolated from imagebuild."""
    copy = tmp_path / "opt" / "imagecontract"
    if not copy.exists():
        shutil.copytree(CONTRACT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return subprocess.run(
        [sys.executable, "-I", str(copy / "verify.py"), str(library), "--arch", arch],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )


def rendered_verify_arch(dockerfile: str) -> str:
    """The --arch argument of the kernels stage's verify.py line, as the shell would pass it."""
    lines = dockerfile.splitlines()
    start = next(i for i, line in enumerate(lines) if "imagecontract/verify.py" in line and "RUN" not in line)
    command = " ".join(line.rstrip("\\") for line in lines[start : start + 3])
    words = shlex.split(command.replace("$(", "").replace(")", ""))
    return words[words.index("--arch") + 1]


def test_render_with_ptx_arch_passes_the_in_image_verifier(tmp_path: Path) -> None:
    """Issue 11: `render cuda12.1-torch2.3 --arch "sm_90+PTX"` wrote an arch string the verifier rejected (exit 2)."""
    result = CliRunner().invoke(main, ["render", "cuda12.1-torch2.3", "--arch", "sm_90+PTX"])
    assert result.exit_code == 0, result.output
    dockerfile = (REPO / "build" / "render" / "cuda12.1-torch2.3" / "Dockerfile").read_text()
    arch = rendered_verify_arch(dockerfile)
    assert arch == "sm_90+PTX"
    library = tmp_path / "lib.so"
    library.write_bytes(elf_with({".nv_fatbin": fatbin([(2, 90, False), (1, 90, False)])}))  # sm_90 SASS + PTX
    done = in_image_verify(tmp_path, library, arch)
    assert done.returncode == 0, done.stderr
    assert "ok: code objects match" in done.stdout


def _host_accepted_ids() -> list[str]:
    """Every single target ID the host accepts, in each spelling: features in any order, +PTX, capabilities."""
    ids: list[str] = []
    for processor, allowed in targets.AMD_FEATURES.items():
        ids.append(processor)
        for n in range(1, len(allowed) + 1):
            for names in itertools.permutations(sorted(allowed), n):
                for signs in itertools.product("+-", repeat=n):
                    ids.append(":".join([processor, *(f + s for f, s in zip(names, signs, strict=True))]))
    for sm, capability in targets.NVIDIA_SMS.items():
        ids += [sm, sm.upper(), f"{sm}+PTX", capability, f"{capability}+PTX"]
    return ids


HOST_SPECS = _host_accepted_ids() + [name.capitalize() for name in targets.NVIDIA_NAMED] + ["Hopper+PTX"]


@pytest.mark.parametrize("spec", HOST_SPECS)
def test_every_host_target_round_trips_through_the_image_parser_and_verifier(spec: str) -> None:
    host = host_parse_list(spec)  # what the host resolves
    written = targets.format_list(host)  # what it renders into the build
    assert targets.parse_list(written) == host  # the image reads back the same targets
    requested = kv.parse_arch_list(written)
    # a library holding exactly those code objects (and that PTX) satisfies the verifier, nothing missing or extra
    listing = Listing("lib.so", code_objects=list(requested.code_objects), ptx=list(requested.ptx))
    assert kv.compare(listing, requested).ok
    assert list(requested.code_objects) == [t.id if t.vendor == "amd" else t.processor for t in host]
    assert list(requested.ptx) == [f"compute_{t.processor[3:]}" for t in host if t.ptx]


def test_a_feature_list_round_trips_through_the_standalone_verifier(tmp_path: Path) -> None:
    """The whole path in one: host list with features -> rendered string -> isolated verifier on a real bundle."""
    written = targets.format_list(host_parse_list("gfx942:xnack-:sramecc+;gfx90a:xnack+"))
    ids = ["host-x86_64-unknown-linux--"] + [f"hipv4-amdgcn-amd-amdhsa--{t}" for t in written.split(";")]
    library = tmp_path / "hip.so"
    library.write_bytes(elf_with({".hip_fatbin": offload_bundle(ids)}))
    done = in_image_verify(tmp_path, library, written)
    assert done.returncode == 0, done.stderr
    assert "code object  gfx942:sramecc+:xnack-" in done.stdout


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_exported_schemas_are_in_sync(name: str) -> None:
    committed = json.loads((REPO / "schema" / name).read_text())
    assert committed == SCHEMAS[name].json_schema(), "run `python3 -m imagecontract.models` to re-export schema/"


@pytest.mark.parametrize("target", ["rocm6.1-torch2.3", "cuda12.1-torch2.3", "local-cpu"])
def test_committed_manifests_fit_the_model(target: str) -> None:
    data = json.loads((REPO / "dockerfiles" / target / "manifest.json").read_text())
    manifest = Manifest.from_dict(data)
    assert manifest.to_dict() == data
    for arch in manifest.gpu_arches:
        targets.parse_target(arch)  # every arch the host wrote parses on the image side


def test_models_name_the_bad_key() -> None:
    data = json.loads((REPO / "dockerfiles" / "local-cpu" / "manifest.json").read_text())
    data["runtime"]["serve"][1] = 7
    with pytest.raises(ModelError, match=r"runtime\.serve\[1\]: expected str"):
        Manifest.from_dict(data)
    with pytest.raises(ModelError, match="unknown key 'pased'"):
        SmokeReport.from_dict({"schema_version": 1, "pased": True, "passed": True, "checks": []})
    with pytest.raises(ModelError, match=r"checks\[0\]\.status"):
        SmokeReport.from_dict({"schema_version": 1, "passed": True, "checks": [{"name": "x", "status": "ok"}]})


def test_write_atomic_leaves_a_0644_file_and_no_temp(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        path = write_atomic(tmp_path / "sub" / "manifest.json", "{}\n")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["manifest.json"]
    write_atomic(path, b"\x00\x01", mode=0o600)
    assert path.read_bytes() == b"\x00\x01" and path.stat().st_mode & 0o777 == 0o600


# --- TunableOp results files: lines split where torch's reader splits (std::getline on '\n') -------------

HIDDEN = "Validator,PT_VERSION,2.3.0\nValidator,GCN_ARCH_NAME,gfx942{sep}Validator,HIPBLASLT_VERSION,0.7\n"


@pytest.mark.parametrize("sep", ["\x0c", "\u2028", "\x1e", "\x85", "\r"])
def test_tunableop_lines_split_only_on_newline_as_torch_does(sep: str, tmp_path: Path) -> None:
    """Issue 12's class: str.splitlines split on form feed, U+2028, ... and saw a validator torch never reads."""
    from imagebuild.errors import ConfigError
    from imagebuild.tunableop import results as top
    from imagecontract import tunableop_csv
    from tests.test_tunableop_image import entry

    text = HIDDEN.format(sep=sep)
    torch_reads = {"PT_VERSION": "2.3.0", "GCN_ARCH_NAME": f"gfx942{sep}Validator"}  # parts[2] of the one line
    assert tunableop_csv.validators(text) == torch_reads
    path = tmp_path / "r.csv"
    path.write_bytes(text.encode("utf-8"))
    assert entry.read_validators(path) == torch_reads  # the image entrypoint: the same reader
    with pytest.raises(ConfigError, match=r"r\.csv:2: "):  # the host's strict check refuses the file
        top.load(path)


def test_crlf_results_file_is_refused_by_the_host_check(tmp_path: Path) -> None:
    """torch keeps the `\\r` in the last field (PT_VERSION `2.3.0\\r` never validates); the host says so."""
    from imagebuild.errors import ConfigError
    from imagebuild.tunableop import results as top
    from imagecontract import tunableop_csv

    path = tmp_path / "crlf.csv"
    path.write_bytes(b"Validator,PT_VERSION,2.3.0\r\nGemmTunableOp_Half_TN,tn_8_8_8,Gemm_Rocblas_1,0.01\r\n")
    assert tunableop_csv.validators(tunableop_csv.read_text(path)) == {"PT_VERSION": "2.3.0\r"}
    with pytest.raises(ConfigError, match="carriage return"):
        top.load(path)


def test_trailing_empty_field_is_dropped_as_getline_does() -> None:
    from imagecontract import tunableop_csv

    assert tunableop_csv.split_fields("a,b,") == ["a", "b"]
    assert tunableop_csv.split_fields("a,,b") == ["a", "", "b"]
    assert tunableop_csv.split_fields(",") == [""]
