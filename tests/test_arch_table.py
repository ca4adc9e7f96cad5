"""One arch table (issue 32 item 3, issue 34's lookup): every processor, product name and target ID spelling resolves
to the same answer through `imagebuild arches`, the in-image preflight (on simulated hosts: no AMD GPU here) and
the compatibility page's lookup (its Python and, where chromium is installed, its script in a real browser); the
coverage scanner decodes each AMD processor's ELF e_flags value; CUDA's cubin/`a`/`f`/PTX rule is one rule.

The expected answers below are written by hand (from the sources imagecontract/gpu_products.py and targets.py
cite), not read from the table, so a wrong table entry fails here.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from imagebuild.report import lookup
from imagebuild.report.model import Row
from imagecontract import gpu_products, preflight
from imagecontract import targets as T
from imagecontract.amdgpu_elf import MACH_NAMES, amdgpu_target
from imagecontract.coverage import COVERED, status
from tests.test_preflight_simulated import CONTAINER, manifest, rocm_host
from tests.test_report import rocm_evidence
from tests.test_report_browser import browser, type_query, write_page  # noqa: F401 (browser: the fixture)

# Issue 32's processors and their EF_AMDGPU_MACH_* values, read in LLVM's ELF.h (ROCm/llvm-project@
# 06c62775e4cd479fbfde1c5863016e2665110136, llvm/include/llvm/BinaryFormat/ELF.h, the AMDGPU_MACH_LIST X-macro:
# `X(0x4f, EF_AMDGPU_MACH_AMDGCN_GFX950, "gfx950")` ...).
AMD_MACH = {
    "gfx908": 0x030,
    "gfx90a": 0x03F,
    "gfx942": 0x04C,
    "gfx950": 0x04F,
    "gfx1030": 0x036,
    "gfx1100": 0x041,
    "gfx1101": 0x046,
    "gfx1102": 0x047,
    "gfx1150": 0x043,
    "gfx1151": 0x04A,
    "gfx1152": 0x055,
    "gfx1153": 0x058,
    "gfx1200": 0x048,
    "gfx1201": 0x04E,
}
NVIDIA = ["sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_100", "sm_103", "sm_110", "sm_120", "sm_121"]
VARIANTS = ["sm_90a", "sm_100a", "sm_103a", "sm_110a", "sm_120a", "sm_121a"]
VARIANTS += ["sm_100f", "sm_103f", "sm_110f", "sm_120f", "sm_121f"]

# Product names -> processors, by hand (NVIDIA's cuda-gpus table, ROCm's GPU specifications, LLVM's processor table).
PRODUCTS = {
    "MI300X": ["gfx942"],
    "MI300A": ["gfx942"],
    "MI325X": ["gfx942"],
    "MI355X": ["gfx950"],
    "MI350X": ["gfx950"],
    "MI250X": ["gfx90a"],
    "MI210": ["gfx90a"],
    "RX 7900 XTX": ["gfx1100"],
    "RX 7800 XT": ["gfx1101"],
    "Radeon AI PRO R9700": ["gfx1201"],
    "RX 9070 XT": ["gfx1201"],
    "Ryzen AI Max 395": ["gfx1151"],
    "Ryzen AI Max+ 395": ["gfx1151"],
    "Strix Halo": ["gfx1151"],
    "H100": ["sm_90"],
    "H200": ["sm_90"],
    "GH200": ["sm_90"],
    "B200": ["sm_100"],
    "GB200": ["sm_100"],
    "B300": ["sm_103"],
    "RTX 5090": ["sm_120"],
    "RTX 4090": ["sm_89"],
    "A100": ["sm_80"],
    "L40S": ["sm_89"],
    "DGX Spark": ["sm_121"],
    "GB10": ["sm_121"],
    "Jetson Thor": ["sm_110"],
    "RDNA4": ["gfx1200", "gfx1201"],  # a family: says it names 2 GPUs
}

# (typed, what `arches` builds, the devices the page shows): every spelling LLVM, rocminfo, nvcc or torch uses.
FORMS = [
    ("gfx942", ["gfx942"], ["gfx942"]),
    ("GFX942", ["gfx942"], ["gfx942"]),
    ("gfx942:xnack-", ["gfx942:xnack-"], ["gfx942:xnack-"]),
    ("gfx90a:xnack+", ["gfx90a:xnack+"], ["gfx90a:xnack+"]),
    ("gfx90a:sramecc+:xnack-", ["gfx90a:sramecc+:xnack-"], ["gfx90a:sramecc+:xnack-"]),
    ("gfx90a:xnack-:sramecc+", ["gfx90a:sramecc+:xnack-"], ["gfx90a:sramecc+:xnack-"]),
    ("amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", ["gfx942:sramecc+:xnack-"], ["gfx942:sramecc+:xnack-"]),
    ("AMDGCN-AMD-AMDHSA--GFX942:SRAMECC+:XNACK-", ["gfx942:sramecc+:xnack-"], ["gfx942:sramecc+:xnack-"]),
    ("sm_90", ["sm_90"], ["sm_90"]),
    ("SM_90", ["sm_90"], ["sm_90"]),
    ("sm_90a", ["sm_90a"], ["sm_90"]),
    ("sm_100f", ["sm_100f"], ["sm_100", "sm_101", "sm_103"]),
    ("sm_120a", ["sm_120a"], ["sm_120"]),
    ("9.0", ["sm_90"], ["sm_90"]),
    ("9.0a", ["sm_90a"], ["sm_90"]),
    ("12.0f", ["sm_120f"], ["sm_120", "sm_121"]),
    ("8.6+PTX", ["sm_86+PTX"], ["sm_86"]),
    ("Hopper", ["sm_90+PTX"], ["sm_90"]),
    ("NVIDIA H100", ["sm_90"], ["sm_90"]),
    ("AMD Instinct MI300X", ["gfx942"], ["gfx942"]),
    ("Radeon RX 7900 XTX", ["gfx1100"], ["gfx1100"]),
    ("GeForce RTX 5090", ["sm_120"], ["sm_120"]),
]
REFUSED = ["compute_90", "gfx942:xnack", "gfx1100:sramecc+", "tpu", "sm_91", "sm90"]


def kfd_version(processor: str) -> int:
    """gfx942 -> 90402, gfx90a -> 90010, gfx1151 -> 110501 (the KFD's gfx_target_version)."""
    return int(processor[3:-2]) * 10000 + int(processor[-2]) * 100 + int(processor[-1], 16)


def arches_answer(cli, typed: str) -> list[str]:
    """What `imagebuild arches --arch TYPED` resolves it to: the arches of the targets that build it, else the
    arches its one-line error names (no target's platform has them)."""
    res = cli("arches", "--arch", typed, "--json", "--allow-experimental")
    if res.exit_code == 0:
        docs = json.loads(res.stdout)
        docs = docs if isinstance(docs, list) else [docs]
        answers = {tuple(d["arches"]) for d in docs if "arches" in d}
        assert len(answers) == 1, answers
        return list(answers.pop())
    assert res.exit_code == 2 and res.stderr.count("\n") == 1 and res.exception is None, res.stderr
    found = re.search(r"no target's platform has arch (.+?)(?: \(|$)", res.stderr.strip())
    if found:
        return found.group(1).split(", ")
    # A target's platform has some of them, but it cannot build one (gfx1102: rocm7.14-gfx110x has no torch for it;
    # RDNA3: that platform has no gfx1103): the error names that one, and the request stays what was typed.
    typed_ids = [t.id for t in T.parse_list(typed)]
    named = re.search(r"(?:pytorch does not support|error: ) ?(gfx[0-9a-z]+|sm_[0-9]+[af]?)\b", res.stderr)
    assert named and named.group(1) in typed_ids and "target rocm7.14-" in res.stderr, res.stderr
    return typed_ids


def preflight_passes(tmp: Path, arches: list[str], device: str) -> bool:
    """The in-image preflight on a simulated host holding one GPU `device` (its processor: a KFD reports no
    features; a CUDA driver a compute capability), for an image with code for `arches`."""
    tmp.mkdir(parents=True, exist_ok=True)
    processor = device.split(":")[0]
    if processor.startswith("gfx"):
        root, kind, query = rocm_host(tmp, [kfd_version(processor)]), "rocm", None
    else:
        (tmp / "dev").mkdir(exist_ok=True)
        for name in ("nvidiactl", "nvidia0"):
            (tmp / "dev" / name).write_bytes(b"")
            (tmp / "dev" / name).chmod(0o666)
        root, kind = tmp, "cuda"
        capability = T.NVIDIA_SMS[processor]

        def query() -> str:
            return f"0, NVIDIA test GPU, {capability}\n"

    extra = {"query": query} if query else {}
    found = preflight.check(manifest(arches, kind=kind), {}, root, who=CONTAINER, **extra)
    assert not [f for f in found if f.level == "refuse" and "is not covered" not in f.message], found
    return not any("is not covered" in f.message for f in found)


def row_for(arch: str) -> Row:
    vendor = "amd" if arch.startswith("gfx") else "nvidia"
    return Row(f"t|linux/amd64|{arch}", "t", "linux/amd64", arch, vendor, [arch], "p", "2.13.0", None)


def page_devices(typed: str, index: dict[str, list[str]]) -> list[str]:
    """What the page's script does: the index at normalize(typed) (exact names; prefixes only when none)."""
    return list(index.get(lookup.normalize(typed), []))


@pytest.fixture(scope="module")
def index() -> dict[str, list[str]]:
    return lookup.names()


def _same_answer(cli, tmp: Path, index: dict[str, list[str]], typed: str, built: list[str], devices: list[str]):
    assert [t.id for t in T.parse_list(typed)] == built
    assert arches_answer(cli, typed) == built
    assert page_devices(typed, index) == devices
    assert lookup.resolve(typed, index) == devices
    for n, device in enumerate(devices):
        assert T.covers(built, device), (built, device)
        assert lookup.verdict(row_for(built[0]), device)[0] or len(built) > 1
        assert preflight_passes(tmp / str(n), built, device), (built, device)


@pytest.mark.parametrize(("typed", "built", "devices"), FORMS)
def test_every_spelling_resolves_the_same_everywhere(cli, tmp_path, index, typed, built, devices) -> None:
    _same_answer(cli, tmp_path, index, typed, built, devices)


@pytest.mark.parametrize(("typed", "processors"), sorted(PRODUCTS.items()))
def test_product_names_resolve_the_same_everywhere(cli, tmp_path, index, typed, processors) -> None:
    _same_answer(cli, tmp_path, index, typed, processors, processors)


@pytest.mark.parametrize("processor", [*AMD_MACH, *NVIDIA, *VARIANTS])
def test_every_processor_resolves_the_same_everywhere(cli, tmp_path, index, processor) -> None:
    devices = T.devices_of(T.parse_target(processor))
    if processor.startswith("sm_") and not processor.endswith("f"):
        assert devices == (processor.rstrip("a"),)  # `sm_90a` code is for the sm_90 GPU
    _same_answer(cli, tmp_path, index, processor, [processor], list(devices))


@pytest.mark.parametrize(("name", "processors"), gpu_products.PRODUCTS, ids=[n for n, _ in gpu_products.PRODUCTS])
def test_the_table_itself_resolves_the_same_everywhere(cli, tmp_path, index, name, processors) -> None:
    """Every product name of the table, as written: known processors, one answer on every path."""
    assert all(p in T.AMD_FEATURES or p in T.NVIDIA_SMS for p in processors)
    assert all(T.parse_target(name) for name in processors)
    with pytest.raises(T.TargetError):
        T.parse_target(name)  # a product name is never also a target ID
    _same_answer(cli, tmp_path, index, name, list(processors), list(processors))


@pytest.mark.parametrize("typed", REFUSED)
def test_what_is_no_gpu_is_refused_everywhere(cli, index, typed) -> None:
    res = cli("arches", "--arch", typed)
    assert res.exit_code == 2 and res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
    assert page_devices(typed, index) == []
    # The page completes a name being typed (`gfx942:xnack` -> both settings), as its script does; else nothing.
    completions = [d for name, devs in index.items() if name.startswith(lookup.normalize(typed)) for d in devs]
    assert lookup.resolve(typed, index) == list(dict.fromkeys(completions))
    assert completions == [] or typed == "gfx942:xnack"


def test_plus_ptx_changes_what_is_built_not_which_gpu(cli, index) -> None:
    """`+PTX` adds PTX to an NVIDIA build; the page, asked which GPU, ignores it. On an AMD name it is refused."""
    assert page_devices("H100+PTX", index) == ["sm_90"] and T.parse_list("H100+PTX")[0].id == "sm_90+PTX"
    res = cli("arches", "--arch", "MI300X+PTX")
    assert res.exit_code == 2 and "+PTX is for NVIDIA GPUs; MI300X is an AMD GPU" in res.stderr


def test_a_name_for_several_processors_says_so(cli) -> None:
    res = cli("arches", "--arch", "RDNA4")  # built by rocm7.14-gfx120x-torch2.12 (issue 32)
    assert res.exit_code == 0 and res.stdout.startswith("--arch: RDNA4 names 2 GPUs: gfx1200, gfx1201\n"), res.stderr
    assert "rocm7.14-gfx120x-torch2.12: gfx1200;gfx1201  [from --arch]" in res.stdout
    res = cli("arches", "--arch", "MI300X")
    assert res.exit_code == 0 and res.stdout.startswith("--arch: MI300X is gfx942\n")
    assert T.resolve_name("H100").note == "H100 is sm_90" and T.resolve_name("sm_90").note is None
    several = [(name, procs) for name, procs in gpu_products.PRODUCTS if len(procs) > 1]
    assert several and all(T.resolve_name(name).note.startswith(f"{name} names {len(p)} GPUs") for name, p in several)


def test_arches_without_a_target_lists_the_targets_that_build_it(cli) -> None:
    """Was: every target resolved with --arch gfx942, the CUDA one refusing it, so the command failed."""
    res = cli("arches", "--arch", "gfx942")
    assert res.exit_code == 0, res.stderr
    built = re.findall(r"^(\S+): (\S+)  \[from --arch\]$", res.stdout, re.M)
    assert built and all(arches == "gfx942" for _, arches in built)
    assert {"rocm6.1-torch2.3", "rocm7.14-gfx942-torch2.12"} == set(dict(built))  # not the other ROCm families
    res = cli("arches", "--arch", "H100", "--json")
    docs = json.loads(res.stdout)
    docs = docs if isinstance(docs, list) else [docs]
    assert {d["target"] for d in docs} >= {"cuda12.1-torch2.3"} and all(d["arches"] == ["sm_90"] for d in docs)
    assert all(d["names"] == ["H100 is sm_90"] for d in docs)
    assert cli("build", "--arch", "MI300X", "--dry-run").exit_code == 0  # build's filter is the same one


def test_a_100_kb_arch_is_not_echoed(cli) -> None:
    for args in (["--arch", "x" * 100_000], ["local-cpu", "--arch", "gfx942" * 600], ["--arch", "gfx9" + "4" * 3000]):
        res = cli("arches", *args)
        assert res.exit_code == 2 and res.exception is None
        assert res.stderr.count("\n") == 1 and len(res.stderr) < 400, res.stderr[:500]


@pytest.mark.parametrize(("processor", "mach"), sorted(AMD_MACH.items()))
def test_coverage_scanner_reads_each_processor_from_e_flags(processor: str, mach: int) -> None:
    ident = b"\x7fELF" + bytes([2, 1, 1, 64, 2]) + bytes(7)  # ELFOSABI_AMDGPU_HSA, ABI version 2 (code object v4)
    xnack = "xnack" in T.AMD_FEATURES[processor]  # v4: 0x200 xnack off; 0 where the processor has no xnack
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 224, 1, 0, 0, 0, mach | (0x200 * xnack), 64, 0, 0, 64, 0, 0)
    assert MACH_NAMES[mach] == processor
    expected = processor + (":xnack-" if xnack else "")
    assert amdgpu_target(header) == expected
    assert T.parse_target(expected).id == expected


# (code, device, CUDA's answer): cubin forward within a major; `a` only its own chip; `f` its family; PTX forward.
CUDA_RULE = [
    ("sm_80", "sm_86", "cubin compatible"),
    ("sm_86", "sm_80", None),
    ("sm_80", "sm_90", None),
    ("sm_90a", "sm_90", "cubin exact"),
    ("sm_100a", "sm_103", None),
    ("sm_100", "sm_103", "cubin compatible"),
    ("sm_100f", "sm_103", "family"),
    ("sm_100f", "sm_110", None),
    ("sm_120f", "sm_121", "family"),
    ("sm_121f", "sm_120", None),
    ("sm_80+PTX", "sm_120", "ptx-jit"),
    ("compute_90a", "sm_100", None),
    ("compute_100f", "sm_103", "ptx-jit"),
    ("compute_100f", "sm_120", None),
    ("sm_90", "9.0", "cubin exact"),
]


@pytest.mark.parametrize(("code", "device", "answer"), CUDA_RULE)
def test_cuda_rule(code: str, device: str, answer: str | None) -> None:
    assert T.runs_on(code, device) == answer


def test_preflight_page_and_scanner_agree_on_every_pair(tmp_path: Path) -> None:
    """Every (image arch, GPU) pair of the table: the in-image rule, the page's verdict and the coverage scanner's
    status say the same (the page once compared NVIDIA IDs exactly: sm_80 code 'did not run' on an sm_86 GPU the
    preflight let through)."""
    codes = [*AMD_MACH, *NVIDIA, *VARIANTS, "sm_80+PTX", "sm_90+PTX"]
    devices = [*AMD_MACH, "gfx942:sramecc+:xnack-", "gfx90a:xnack+", *NVIDIA]
    disagree = []
    for code in codes:
        for device in devices:
            rule = preflight.covers([code], device)
            page = lookup.verdict(row_for(code), device)[0]
            sass, ptx = [code.removesuffix("+PTX")], ["compute_" + code[3:-4]] if code.endswith("+PTX") else []
            scanner = status(device, [code] if code.startswith("gfx") else sass, ptx) in COVERED
            if not rule == page == scanner:
                disagree.append((code, device, rule, page, scanner))
    assert disagree == []
    assert preflight_passes(tmp_path / "a", ["sm_80"], "sm_86") and not preflight_passes(
        tmp_path / "b", ["sm_86"], "sm_80"
    )


@pytest.mark.skipif(
    not (Path("/usr/bin/chromium").exists() and Path("/usr/bin/chromedriver").exists()),
    reason="chromium / chromium-driver not installed",
)
def test_the_pages_script_answers_the_same_in_a_browser(browser, tmp_path: Path) -> None:  # noqa: F811
    """The page's own script (normalize with the patterns it is handed, the index), typed into in Debian's chromium:
    each spelling and product name names the devices the table resolves it to (was: `gfx942:xnack-`, `gfx90a:xnack+`
    and rocminfo's form answered "No GPU known")."""
    labels = lookup.devices()
    rocm_evidence(tmp_path)
    browser.get(write_page(tmp_path).as_uri())
    cases = [(typed, devices) for typed, _built, devices in FORMS] + [(n, p) for n, p in PRODUCTS.items()]
    wrong = []
    for typed, devices in cases:
        said = type_query(browser, typed)
        if not said.startswith("; ".join(labels[d] for d in devices) + ":"):
            wrong.append((typed, said[:120]))
    for typed in ("compute_90", "tpu", "sm90"):
        if "No GPU known" not in type_query(browser, typed):
            wrong.append((typed, "answered"))
    assert wrong == []
