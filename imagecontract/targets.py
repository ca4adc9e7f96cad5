"""The one arch table: GPU target IDs, the names people type for them, and whether code runs on a GPU.

The one parser the host (arch resolution: `imagebuild arches`, the plan, `build --arch`) and the image (verifier,
smoke, preflight) both use, and the one the compatibility page's lookup (imagebuild/report/lookup.py) and `doctor`
read. A target ID written by the host must mean the same thing when the image reads it back; four parsers with
four alias tables did not (`sm_90+PTX` rendered by the host was an unknown arch to the in-image verifier; the page
took `MI300X` while `--arch MI300X` was refused).

Accepted spellings (resolve_name): AMD target IDs as LLVM takes them (`gfx942`, `gfx942:xnack-`,
`gfx90a:sramecc+:xnack-`, features in any order, any case) and as rocminfo prints them
(`amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`); NVIDIA `sm_90`, `sm_90a`, `sm_100f`, capabilities `9.0`,
`9.0a`, `12.0f`, each optionally `+PTX`; torch's architecture names (`Hopper`, `Ampere+PTX`); product names
(imagecontract/gpu_products.py: `MI300X`, `RX 7900 XTX`, `H100`, `DGX Spark`; a family name such as `RDNA4` names
several processors and says so). Refused: `compute_90` (a PTX arch is no GPU: `sm_90+PTX` says what is meant) and
`+PTX` on an AMD name. Processors: every AMDGCN processor of LLVM's table (below) and every EF_CUDA_SM* SM with its
`a` and `f` variants; the ELF e_flags machine value of each AMD processor is imagecontract/amdgpu_elf.py's.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from imagecontract import gpu_products
from imagecontract.cuda_fatbin import cuda_cell
from imagecontract.numbers import shown

Vendor = Literal["amd", "nvidia"]

# AMD processors (LLVM AMDGPU names) and the target features each accepts: every AMDGCN processor and generic
# target of LLVM's AMDGCNGPUs table (ROCm/llvm-project@824fcf6d59fddd88706409c87640b6ed5073c00f:
# llvm/lib/TargetParser/TargetParser.cpp, AMDGCNGPUs, lines ~63-140: FEATURE_XNACK / FEATURE_SRAMECC per processor),
# plus the gfx1170/gfx1250/gfx1251/gfx125f/gfx1310 of ROCm/llvm-project@06c62775's ELF.h AMDGPU_MACH_LIST, whose
# features that table does not give yet (none assumed). gfx940/gfx941 were removed from LLVM later (their EF_AMDGPU_MACH
# values 0x040/0x04b are "reserved" now) but ROCm 5.7-6.2 libraries ship code objects for them: kept.
_XS = frozenset({"sramecc", "xnack"})
_X = frozenset({"xnack"})
_NONE: frozenset[str] = frozenset()
AMD_FEATURES: dict[str, frozenset[str]] = {
    **dict.fromkeys(("gfx600", "gfx601", "gfx602", "gfx700", "gfx701", "gfx702", "gfx703", "gfx704", "gfx705"), _NONE),
    "gfx801": _X,
    **dict.fromkeys(("gfx802", "gfx803", "gfx805"), _NONE),
    "gfx810": _X,
    **dict.fromkeys(("gfx900", "gfx902", "gfx904", "gfx909", "gfx90c"), _X),
    **dict.fromkeys(("gfx906", "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950"), _XS),
    **dict.fromkeys(("gfx1010", "gfx1011", "gfx1012", "gfx1013"), _X),
    **dict.fromkeys(("gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"), _NONE),
    **dict.fromkeys(("gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"), _NONE),
    **dict.fromkeys(("gfx1170", "gfx1200", "gfx1201", "gfx1250", "gfx1251", "gfx125f", "gfx1310"), _NONE),
    "gfx9-generic": _X,
    "gfx9-4-generic": _XS,
    "gfx10-1-generic": _X,
    "gfx10-3-generic": _NONE,
    "gfx11-generic": _NONE,
    "gfx12-generic": _NONE,
    "gfx12-5-generic": _NONE,
}
# Generic targets and the processors their code objects run on (LLVM's llvm/docs/AMDGPUUsage.rst, table
# amdgpu-generic-processor-table; gfx12-5-generic's members are not listed there yet).
AMD_GENERIC_MEMBERS: dict[str, tuple[str, ...]] = {
    "gfx9-generic": ("gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"),
    "gfx9-4-generic": ("gfx940", "gfx941", "gfx942", "gfx950"),
    "gfx10-1-generic": ("gfx1010", "gfx1011", "gfx1012", "gfx1013"),
    "gfx10-3-generic": ("gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"),
    "gfx11-generic": ("gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"),
    "gfx12-generic": ("gfx1200", "gfx1201"),
}
# Product names per processor (`MI300X/MI300A/MI325X`): the single-processor names of the one product table
# (imagecontract/gpu_products.py), plus labels for processors no product name of that table stands for.
AMD_PRODUCTS: dict[str, str] = {
    **{proc: label for proc, label in gpu_products.labels().items() if proc.startswith("gfx")},
    "gfx803": "Radeon RX 470/480/570/580 (Polaris), R9 Fury/Nano (Fiji)",
    "gfx940": "MI300 (early)",
    "gfx941": "MI300 (early)",
}
# NVIDIA SMs: every EF_CUDA_SM* processor of LLVM's ELF.h (ROCm/llvm-project@06c62775e4cd479fbfde1c5863016e2665110136:
# llvm/include/llvm/BinaryFormat/ELF.h, "NVPTX specific e_flags", EF_CUDA_SM20 .. EF_CUDA_SM121) and the
# accelerator ("a") variants of sm_90 and later (EF_CUDA_ACCELERATORS): name -> compute capability.
_SM_NUMBERS = (
    20,
    21,
    30,
    32,
    35,
    37,
    50,
    52,
    53,
    60,
    61,
    62,
    70,
    72,
    75,
    80,
    86,
    87,
    88,
    89,
    90,
    100,
    101,
    103,
    110,
    120,
    121,
)
# The family-specific ("f") variants CUDA 12.9 introduced for Blackwell (sm_100f, sm_103f, sm_120f, sm_121f, and
# sm_101f renamed sm_110f in CUDA 13.0): NVIDIA, "NVIDIA Blackwell and NVIDIA CUDA 12.9 Introduce Family-Specific
# Architecture Features" (https://developer.nvidia.com/blog/nvidia-blackwell-and-nvidia-cuda-12-9-introduce-family-
# specific-architecture-features); the rule each suffix follows is cuda_status below.
_FAMILY_SPECIFIC = (100, 101, 103, 110, 120, 121)
NVIDIA_SMS: dict[str, str] = {}
for _n in _SM_NUMBERS:
    NVIDIA_SMS[f"sm_{_n}"] = f"{_n // 10}.{_n % 10}"
    if _n >= 90:
        NVIDIA_SMS[f"sm_{_n}a"] = f"{_n // 10}.{_n % 10}a"
    if _n in _FAMILY_SPECIFIC:
        NVIDIA_SMS[f"sm_{_n}f"] = f"{_n // 10}.{_n % 10}f"
# The CUDA toolkits that build each SM: clang's MinVersionForOffloadArch / MaxVersionForOffloadArch
# (llvm/llvm-project@adf82cffbb872f5ae354cf230a7ff2e88680b1ea:clang/lib/Basic/Cuda.cpp: sm_35/37 up to 11.8, sm_89/90
# from 11.8, sm_90a 12.0, sm_100(a) 12.8; ROCm/llvm-project's copy adds sm_101(a)/sm_120(a) at 12.8). Not from a file
# read here, from NVIDIA's CUDA release notes: sm_103(a)/sm_121(a) from 12.9, sm_110(a) from 13.0 (sm_101 renamed),
# and CUDA 13.0 dropped everything below sm_75 (seen on the build machines: ../shared/notes). sm_88: no toolkit known.
CUDA_MIN: dict[str, tuple[int, int]] = {
    **dict.fromkeys(("sm_20", "sm_21", "sm_30", "sm_32", "sm_35", "sm_37", "sm_50", "sm_52", "sm_53"), (7, 0)),
    **dict.fromkeys(("sm_60", "sm_61", "sm_62"), (8, 0)),
    "sm_70": (9, 0),
    "sm_72": (9, 1),
    "sm_75": (10, 0),
    "sm_80": (11, 0),
    "sm_86": (11, 1),
    "sm_87": (11, 4),
    "sm_89": (11, 8),
    "sm_90": (11, 8),
    "sm_90a": (12, 0),
    **dict.fromkeys(("sm_100", "sm_100a", "sm_101", "sm_101a", "sm_120", "sm_120a"), (12, 8)),
    **dict.fromkeys(("sm_103", "sm_103a", "sm_121", "sm_121a"), (12, 9)),
    **dict.fromkeys(("sm_100f", "sm_101f", "sm_103f", "sm_120f", "sm_121f"), (12, 9)),
    **dict.fromkeys(("sm_110", "sm_110a", "sm_110f"), (13, 0)),
}
CUDA_MAX: dict[str, tuple[int, int]] = {
    **dict.fromkeys(("sm_20", "sm_21"), (8, 0)),
    **dict.fromkeys(("sm_30", "sm_32"), (10, 2)),
    **dict.fromkeys(("sm_35", "sm_37"), (11, 8)),
    **dict.fromkeys(("sm_50", "sm_52", "sm_53", "sm_60", "sm_61", "sm_62", "sm_70", "sm_72"), (12, 9)),
    **dict.fromkeys(("sm_101", "sm_101a", "sm_101f"), (12, 9)),
}
# What torch's TORCH_CUDA_ARCH_LIST accepts (supported_arches in torch/utils/cpp_extension.py, torch 2.13.0 wheel,
# lines 2683-2686): the capability spelling of each SM (`12.0a` for sm_120a); 10.1, 8.8 and below 3.5 are refused.
TORCH_CUDA_ARCHES: tuple[str, ...] = (
    "3.5", "3.7", "5.0", "5.2", "5.3", "6.0", "6.1", "6.2", "7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0",
    "9.0a", "10.0", "10.0a", "11.0", "11.0a", "10.3", "10.3a", "12.0", "12.0a", "12.1", "12.1a",
)  # fmt: skip
# Product names per SM (`H100/H200/GH200`), from the one product table (imagecontract/gpu_products.py).
NVIDIA_PRODUCTS: dict[str, str] = {
    proc: label for proc, label in gpu_products.labels().items() if proc.startswith("sm_")
}
# The one alias table: architecture names TORCH_CUDA_ARCH_LIST accepts, expanded as torch expands them
# (named_arches in torch/utils/cpp_extension.py, torch 2.13.0 wheel, git cf30153c4c13, lines 2666-2681).
NVIDIA_NAMED: dict[str, str] = {
    "kepler+tesla": "3.7",
    "kepler": "3.5+PTX",
    "maxwell+tegra": "5.3",
    "maxwell": "5.0;5.2+PTX",
    "pascal": "6.0;6.1+PTX",
    "volta+tegra": "7.2",
    "volta": "7.0+PTX",
    "turing": "7.5+PTX",
    "ampere+tegra": "8.7",
    "ampere": "8.0;8.6+PTX",
    "ada": "8.9+PTX",
    "hopper": "9.0+PTX",
    "blackwell+tegra": "11.0",
    "blackwell": "10.0;10.3;12.0;12.1+PTX",
}
# LLVM knows only these target ID features (getAllPossibleAMDGPUTargetIDFeatures, clang/lib/Basic/TargetID.cpp).
AMDGPU_FEATURES = ("sramecc", "xnack")
_CAPABILITY_TO_SM = {cap: sm for sm, cap in NVIDIA_SMS.items()}
KNOWN_NAMES: tuple[str, ...] = tuple(AMD_FEATURES) + tuple(NVIDIA_SMS)

_LIST_SEPARATORS = re.compile(r"[;,]")
_AMD_FEATURE = re.compile(r"^(sramecc|xnack)([+-])$")
_FEATURE_RE = re.compile(r"^([a-z0-9_]+)([+-])$")
# What tools print before an AMD target ID: rocminfo's agent name (`amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`,
# the triple, an empty environment field, the ID) and a clang offload bundle's entry (`hipv4-amdgcn-amd-amdhsa--`).
_AMD_TRIPLE = re.compile(r"^(?:hipv4-|hip-)?amdgcn-amd-amdhsa-{1,2}", re.IGNORECASE)
_SM_NAME = re.compile(r"^sm_(\d{2,3})([af]?)$")
_CAPABILITY = re.compile(r"^(\d{1,2})\.(\d)([af]?)$")
MAX_SPEC = 4096  # characters of one arch list: longer is refused before it is parsed (or echoed)


class TargetError(ValueError):
    """A target ID or list that does not parse; `hint` says what would."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint

    def __str__(self) -> str:
        return self.message + (f" ({self.hint})" if self.hint else "")


@dataclass(frozen=True, order=True)
class GpuTarget:
    """One GPU code target: an AMD target ID (processor + features) or an NVIDIA SM (optionally + PTX)."""

    vendor: Vendor
    processor: str
    features: tuple[str, ...] = ()
    ptx: bool = False

    @property
    def id(self) -> str:
        """The full ID, as compilers take it: `gfx942:sramecc+:xnack-`, `sm_90`, `sm_90+PTX`."""
        if self.vendor == "amd":
            return ":".join((self.processor, *self.features))
        return self.processor + ("+PTX" if self.ptx else "")

    @property
    def capability(self) -> str:
        """Compute capability (`9.0`) for NVIDIA targets."""
        return NVIDIA_SMS[self.processor]

    @property
    def bare(self) -> GpuTarget:
        """The processor alone: no features, no PTX."""
        return GpuTarget(self.vendor, self.processor)

    @property
    def ptx_id(self) -> str | None:
        """`compute_90` for an NVIDIA target with PTX (how fat binaries list it), else None."""
        return "compute_" + self.processor.removeprefix("sm_") if self.ptx else None

    def __str__(self) -> str:
        return self.id


def _unknown(raw: str) -> TargetError:
    close = difflib.get_close_matches(raw.lower()[:32], KNOWN_NAMES, n=3, cutoff=0.5)
    # The full table is ~100 names: name the families, not every processor, so the error stays one short line.
    families = (
        "gfx6..gfx13 (e.g. gfx90a, gfx942, gfx1100), sm_20..sm_121 with a/f variants (e.g. sm_80, sm_90a, "
        "sm_120), or a product such as MI300X or H100"
    )
    hint = f"closest known: {', '.join(close)}" if close else f"known: {families}"
    return TargetError(f"unknown GPU target {shown(raw)}", hint=hint)


def _parse_amd(raw: str) -> GpuTarget:
    processor, *features = _AMD_TRIPLE.sub("", raw).split(":")
    processor = processor.lower()
    if processor not in AMD_FEATURES:
        raise _unknown(raw)
    allowed = AMD_FEATURES[processor]
    seen: dict[str, str] = {}
    for feature in features:
        match = _AMD_FEATURE.match(feature.lower())
        if not match or match.group(1) not in allowed:
            valid = ", ".join(f"{name}+/-" for name in sorted(allowed)) or "none"
            raise TargetError(
                f"invalid feature {shown(feature)} in GPU target {shown(raw)}", hint=f"{processor} takes: {valid}"
            )
        if match.group(1) in seen:
            raise TargetError(f"feature '{match.group(1)}' given twice in GPU target {shown(raw)}")
        seen[match.group(1)] = match.group(0)
    # LLVM requires the features of a target ID in alphabetical order.
    return GpuTarget("amd", processor, tuple(seen[name] for name in sorted(seen)))


def _split_ptx(text: str) -> tuple[str, bool]:
    return (text[: -len("+PTX")], True) if text.upper().endswith("+PTX") else (text, False)


def _parse_nvidia(raw: str) -> GpuTarget:
    """`sm_90`, `sm_90a`, `sm_100f`, `9.0`, `9.0a`, `12.0f`, each optionally `+PTX`; `compute_90` refused (and
    `sm90`, which no compiler takes)."""
    text, ptx = _split_ptx(raw.strip())
    lowered = text.lower()
    if lowered.startswith("compute_"):  # a virtual (PTX) arch: taking it for sm_XX would drop the PTX silently
        sm = "sm_" + lowered.split("_", 1)[1][:8]
        raise TargetError(
            f"GPU target {shown(raw)} is a PTX (virtual) arch, not a GPU",
            hint=f"write {sm}+PTX for {sm} code plus PTX, or {sm} for {sm} code only",
        )
    name = ""
    if m := _SM_NAME.match(lowered):
        name = f"sm_{m.group(1)}{m.group(2)}"
    elif m := _CAPABILITY.match(lowered):
        name = _CAPABILITY_TO_SM.get(lowered, "")
    if name not in NVIDIA_SMS:
        raise _unknown(raw)
    return GpuTarget("nvidia", name, (), ptx)


def parse_target(raw: str) -> GpuTarget:
    """Parse one target ID in any accepted spelling (no product names: resolve_name takes those); unknown IDs raise
    TargetError with the closest names."""
    text = raw.strip()
    if not text:
        raise TargetError("empty GPU target")
    if text.lower().startswith("gfx") or _AMD_TRIPLE.match(text):
        return _parse_amd(text)
    return _parse_nvidia(text)


@dataclass(frozen=True)
class Named:
    """What one typed name stands for: a target ID, torch's architecture name (`Hopper`), or a product name."""

    query: str
    targets: tuple[GpuTarget, ...]
    product: str | None = None  # the product or family name it matched, as the table writes it

    @property
    def note(self) -> str | None:
        """`MI300X is gfx942`; `RDNA4 names 2 GPUs: gfx1200, gfx1201` (said wherever a name stands for several)."""
        if self.product is None:
            return None
        ids = ", ".join(t.id for t in self.targets)
        many = len(self.targets) > 1
        return f"{self.product} names {len(self.targets)} GPUs: {ids}" if many else f"{self.product} is {ids}"


def resolve_name(item: str) -> Named:
    """One typed name -> what it stands for (the one resolution `arches`, the plan, the page's lookup and the
    preflight's device reading share)."""
    text = item.strip()
    lowered = text.lower()
    torch_name = lowered if lowered in NVIDIA_NAMED else lowered.removesuffix("+ptx")
    if torch_name in NVIDIA_NAMED:
        extra_ptx = torch_name != lowered
        found = [
            GpuTarget("nvidia", t.processor, (), t.ptx or extra_ptx)
            for t in map(_parse_nvidia, NVIDIA_NAMED[torch_name].split(";"))
        ]
        return Named(text, tuple(found))
    name, ptx = _split_ptx(text)
    product = gpu_products.lookup(name)
    if product is None:
        return Named(text, (parse_target(text),))
    label, processors = product
    if ptx and not processors[0].startswith("sm_"):
        raise TargetError(f"{shown(text)}: +PTX is for NVIDIA GPUs; {label} is an AMD GPU")
    vendor: Vendor = "nvidia" if processors[0].startswith("sm_") else "amd"
    return Named(text, tuple(GpuTarget(vendor, proc, (), ptx) for proc in processors), label)


def split_items(spec: str) -> list[str]:
    """A list's items: `;` or `,` separate, white space too except inside a product name (`RX 7900 XTX`)."""
    items: list[str] = []
    for chunk in _LIST_SEPARATORS.split(spec):
        words, i = chunk.split(), 0
        while i < len(words):
            for j in range(min(len(words), i + gpu_products.MAX_WORDS), i + 1, -1):
                if gpu_products.lookup(_split_ptx(" ".join(words[i:j]))[0]) is not None:
                    items.append(" ".join(words[i:j]))
                    i = j
                    break
            else:
                items.append(words[i])
                i += 1
    return items


def resolve_list(spec: str | Iterable[str]) -> list[Named]:
    """Every item of a list, resolved (the list bounded: MAX_SPEC characters)."""
    if isinstance(spec, str):
        if len(spec) > MAX_SPEC:
            raise TargetError(f"GPU target list of {len(spec)} characters (at most {MAX_SPEC})")
        items = split_items(spec)
    else:
        items = [item for item in spec if item.strip()]
    return [resolve_name(item) for item in items]


def parse_list(spec: str | Iterable[str], variants: bool = False) -> list[GpuTarget]:
    """Parse a list (`;`, `,` or space separated, or an iterable); keep order, drop exact duplicates.

    variants: accept one processor with several feature settings (`gfx90a:xnack+;gfx90a:xnack-`), as a code
    object listing may hold; a build's arch list may not (its variables would disagree on the processor).
    """
    targets: list[GpuTarget] = []
    for named in resolve_list(spec):
        targets.extend(target for target in named.targets if target not in targets)
    processors = [target.processor for target in targets]
    duplicates = sorted({name for name in processors if processors.count(name) > 1})
    if duplicates and not variants:
        raise TargetError(
            f"GPU target(s) {', '.join(duplicates)} listed more than once with different features or PTX flags"
        )
    return targets


def format_list(targets: Iterable[GpuTarget]) -> str:
    """The list as the host writes it into a build (`gfx90a;gfx942:xnack-`, `sm_80;sm_90+PTX`): parse_list reads
    it back to the same targets."""
    return ";".join(t.id for t in targets)


# --- compatibility: does a code object load on a device ------------------------------------------------


def split_id(text: str) -> tuple[str, dict[str, str]] | None:
    """`gfx942:sramecc+:xnack-` -> ("gfx942", {"sramecc": "+", "xnack": "-"}); None when a feature is malformed or
    unknown to LLVM (such a code object never loads). Processors are not checked: code objects may name any."""
    proc, *parts = text.split(":")
    features: dict[str, str] = {}
    for part in parts:
        m = _FEATURE_RE.match(part)
        if not proc or not m or m.group(1) in features or m.group(1) not in AMDGPU_FEATURES:
            return None
        features[m.group(1)] = m.group(2)
    return proc, features


def loads_on(code_object: str, device: str) -> bool:
    """LLVM's isCompatibleTargetID (clang/lib/Basic/TargetID.cpp, llvm-project 5c3355625bc9): same processor (or a
    generic target whose members include the device's, AMD_GENERIC_MEMBERS), and every feature the code object fixes
    has the same sign on the device. A device feature left unspecified (an ID read from an override, not the GPU) is
    taken to match. NVIDIA IDs compare by processor (+PTX ignored)."""
    have, dev = split_id(code_object.removesuffix("+PTX")), split_id(device.removesuffix("+PTX"))
    if have is None or dev is None:
        return False
    if have[0] != dev[0] and dev[0] not in AMD_GENERIC_MEMBERS.get(have[0], ()):
        return False
    return all(dev[1].get(feature, sign) == sign for feature, sign in have[1].items())


def device_configs(request: str) -> list[str] | None:
    """Every concrete device setting an AMD request covers: its features as given, the others either way."""
    parsed = split_id(request)
    if parsed is None:
        return None
    configs: list[dict[str, str]] = [{}]
    for feature in AMDGPU_FEATURES:
        signs = [parsed[1][feature]] if feature in parsed[1] else ["+", "-"]
        configs = [{**c, feature: sign} for c in configs for sign in signs]
    return [":".join([parsed[0], *(f"{k}{v}" for k, v in c.items())]) for c in configs]


# --- NVIDIA: does a cubin or PTX run on a device -------------------------------------------------------
# The rule is imagecontract.cuda_fatbin.cuda_cell (cubin: same major, same or higher minor; `a`: only its own
# compute capability; `f`: its family, the same major with the same or a higher minor; PTX JIT-compiles forward,
# a weaker kind of coverage), sourced there: NVIDIA's Blackwell Compatibility Guide 1.2 and the CUDA 12.9
# family-specific features post. Here it is applied to an image's arches and a device.


def canonical(text: str) -> str:
    """A target ID in the one spelling (`amdgcn-amd-amdhsa--GFX942:xnack-:sramecc+` -> `gfx942:sramecc+:xnack-`,
    `9.0` -> `sm_90`); text that is no target ID comes back unchanged (`compute_90`, `amdgcn-mach-0x99`)."""
    try:
        return parse_target(text).id if len(text) <= 200 else text
    except TargetError:
        return text


def runs_on(code: str, device: str) -> str | None:
    """How code built for `code` (a manifest's arch: `gfx942`, `sm_80+PTX`, `compute_90`) runs on `device` (the
    GPU's own ID: `gfx942:sramecc+:xnack-`, `sm_90`), or None: "loads" (AMD: LLVM's rule, loads_on); CUDA the
    coverage cell's kind ("cubin exact", "cubin compatible", "family", "ptx-jit"). Both are read through the
    table's parser first (`9.0`, `GFX942`, rocminfo's `amdgcn-amd-amdhsa--gfx942:...`)."""
    code, device = canonical(code), canonical(device)
    if device.startswith("gfx"):
        return "loads" if code.startswith("gfx") and loads_on(code, device) else None
    if not code.startswith(("sm_", "compute_")):
        return None
    cubins = [] if code.startswith("compute_") else [code.removesuffix("+PTX")]
    ptx = [code] if code.startswith("compute_") else (["compute_" + cubins[0][3:]] if code.endswith("+PTX") else [])
    kind = cuda_cell(device.removesuffix("+PTX"), cubins, ptx).kind
    return None if kind == "none" else kind


def covers(arches: Iterable[str], device: str) -> bool:
    """Does an image holding code for `arches` run on `device` (the in-image preflight's and the page's rule)."""
    return any(runs_on(arch, device) for arch in arches)


def devices_of(target: GpuTarget) -> tuple[str, ...]:
    """The GPUs a target names, as device IDs: an AMD target ID itself; an NVIDIA SM's device (`sm_90a` -> sm_90);
    a family-specific SM's family (`sm_100f` -> sm_100, sm_101, sm_103: each device its cubin runs on)."""
    if target.vendor == "amd":
        return (target.id,)
    if not target.processor.endswith("f"):
        return (target.processor.rstrip("a"),)
    family = [sm for sm in NVIDIA_SMS if sm[-1].isdigit() and cuda_cell(sm, [target.processor], []).kind != "none"]
    return tuple(family)


# --- toolchains: can a platform build a target --------------------------------------------------------


def _version(text: str | None) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def toolchain_gap(target: GpuTarget, platform_vendor: Vendor | None, platform_version: str | None) -> str | None:
    """Why the platform's toolchain cannot build `target` (CUDA: nvcc's range per SM, torch's TORCH_CUDA_ARCH_LIST);
    None when it can, or when nothing is known against it (ROCm: the matrix's platform list is the only source).
    `platform_vendor` is the platform kind's (imagecontract.kinds: nvidia for CUDA)."""
    if target.vendor != "nvidia" or platform_vendor != "nvidia":
        return None
    sm, have = target.processor, _version(platform_version)
    low, high = CUDA_MIN.get(sm), CUDA_MAX.get(sm)
    if low is None:
        return f"no CUDA toolkit known here builds {sm}"
    if have is not None and have < low:
        return f"{sm} needs CUDA >= {low[0]}.{low[1]}; CUDA {platform_version}'s nvcc has no {sm}"
    if have is not None and high is not None and have > high:
        return f"CUDA {platform_version} dropped {sm} (the last toolkit with it is CUDA {high[0]}.{high[1]})"
    if target.capability not in TORCH_CUDA_ARCHES:
        return f"torch's TORCH_CUDA_ARCH_LIST does not accept {target.capability} ({sm})"
    return None
