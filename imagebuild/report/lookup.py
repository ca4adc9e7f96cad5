"""The GPU lookup: a name someone types (`gfx942`, `gfx942:xnack-`, `MI300X`, `H100`, `sm_90a`, `Hopper`, `9.0`,
rocminfo's `amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`) -> devices, and per device which rows run there and why
the others do not.

Computed here, in Python, from the contract's one arch table (imagecontract/targets.py: resolve_name, the names
`imagebuild arches --arch` takes; devices_of; runs_on, the rule the in-image preflight applies); the page's script
only looks the answers up (the index below, keyed by `normalize`, whose two patterns it is handed), it
re-implements no rule.
"""

from __future__ import annotations

import re
from typing import Any

from imagebuild.report.model import Row
from imagecontract import gpu_products, kinds
from imagecontract.targets import (
    AMD_FEATURES,
    AMD_PRODUCTS,
    NVIDIA_NAMED,
    NVIDIA_PRODUCTS,
    NVIDIA_SMS,
    TargetError,
    devices_of,
    parse_target,
    resolve_list,
    resolve_name,
    runs_on,
)

# What normalize removes before the lookup; the page's script gets these two patterns in its data (case-blind).
DROP = gpu_products.VENDOR_WORDS  # `NVIDIA H100`, `AMD Instinct MI300X`, `Radeon RX 7900 XTX`
STRIP = r"^(?:hipv4-|hip-)?amdgcn-amd-amdhsa-{1,2}|\+ptx$"  # rocminfo's triple; `+PTX` names no other GPU
_DROP, _STRIP = re.compile(DROP, re.I), re.compile(STRIP, re.I)
MAX_QUERY = 200  # longer text names no GPU and is not looked at


def normalize(text: str) -> str:
    """The key a typed name is looked up by (the page's script does the same): vendor words and rocminfo's
    triple dropped, lower case, no spaces, AMD target features in LLVM's (alphabetical) order."""
    text = text.strip()[:MAX_QUERY]
    while _DROP.match(text):
        text = _DROP.sub("", text, count=1)
    key = _STRIP.sub("", re.sub(r"\s+", "", text.lower()))
    proc, *features = key.split(":")
    return ":".join([proc, *sorted(features)]) if proc.startswith("gfx") else key  # LLVM order: alphabetical


def _feature_forms(proc: str) -> list[str]:
    """Every target ID of an AMD processor: bare, one feature set, all set (LLVM order)."""
    forms: list[list[str]] = [[]]
    for feature in sorted(AMD_FEATURES[proc]):
        forms = [f for form in forms for f in (form, [*form, f"{feature}+"], [*form, f"{feature}-"])]
    return [":".join([proc, *form]) for form in forms]


def devices() -> dict[str, str]:
    """Every device ID the lookup knows -> its label: AMD processors bare and with each feature setting (one or
    all given), NVIDIA SMs (the GPUs; `sm_90a` and `sm_100f` name code, resolved to the GPUs it runs on)."""
    out: dict[str, str] = {}
    for proc in AMD_FEATURES:
        product = AMD_PRODUCTS.get(proc)
        for form in _feature_forms(proc):
            out[form] = f"{form} (AMD {product})" if product else form
    for sm, cap in NVIDIA_SMS.items():
        if sm[-1].isdigit():
            product = NVIDIA_PRODUCTS.get(sm)
            out[sm] = f"{sm} (compute capability {cap}" + (f", NVIDIA {product})" if product else ")")
    return out


def names() -> dict[str, list[str]]:
    """normalize(name) -> device IDs, for every name the table resolves: target IDs in each spelling,
    capabilities, torch's architecture names, product names (a family name: each of its processors)."""
    index: dict[str, list[str]] = {}

    def add(name: str) -> None:
        key = normalize(name)
        if key and key not in index:
            index[key] = [d for t in resolve_name(name).targets for d in devices_of(t)]

    for proc in AMD_FEATURES:
        for form in _feature_forms(proc):
            add(form)
    for sm, cap in NVIDIA_SMS.items():
        for name in (sm, cap):
            add(name)
    for name in NVIDIA_NAMED:
        add(name)
    for name, _processors in gpu_products.PRODUCTS:
        add(name)
    return index


def resolve(query: str, index: dict[str, list[str]] | None = None) -> list[str]:
    """Devices a typed name means: an exact name, else every name it starts (at least 3 characters), else what
    the table resolves it to (a list, `gfx90a;MI300X`)."""
    index = names() if index is None else index
    key = normalize(query)
    if not key:
        return []
    if key in index:
        return list(index[key])
    if len(key) >= 3:
        found = [d for name, devs in index.items() if name.startswith(key) for d in devs]
        if found:
            return list(dict.fromkeys(found))
    try:
        named = resolve_list(query)
    except TargetError:
        return []
    return list(dict.fromkeys(d for n in named for t in n.targets for d in devices_of(t)))


def _vendor(device: str) -> str:
    return "amd" if device.startswith("gfx") else "nvidia"


def _how(row_arch: str, device: str) -> str | None:
    how = runs_on(row_arch, device)
    if how is None:
        return None
    note = "" if how in ("loads", "cubin exact") else f" ({how})"
    return f"{row_arch} code loads on {device}{note}"


def verdict(row: Row, device: str) -> tuple[bool, str]:
    """Does this row's image code run on `device` (runs_on: the preflight's rule), and if not, why."""
    arches = ", ".join(row.image_arches) or "none"
    if row.vendor == kinds.NO_GPU.ROW_VENDOR:
        return False, "CPU image: no GPU code (it runs on the host CPU)"
    if row.vendor != _vendor(device):
        return False, f"{row.vendor.upper()} image ({arches}); {device} is an {_vendor(device).upper()} GPU"
    how = _how(row.arch, device)
    if how:
        return True, how
    other = [a for a in row.image_arches if runs_on(a, device)]
    if other:
        return False, f"this row is the image's {row.arch} build; its {other[0]} row runs on {device}"
    same = [a for a in row.image_arches if _processor(a) == _processor(device)]
    if same:
        return False, f"code for {same[0]} does not load on {device} (target features differ: LLVM's rule)"
    return False, f"no code for {device} in this image (it has {arches}); build one: imagebuild build --arch {device}"


def _processor(arch: str) -> str:
    try:
        return parse_target(arch).processor
    except TargetError:
        return arch.split(":")[0]


def table(rows: list[Row]) -> dict[str, Any]:
    """What the page's script needs: names -> devices, device labels, per device each row's (runs, why), and the
    two patterns of normalize."""
    devs = devices()
    return {
        "names": names(),
        "devices": devs,
        "verdicts": {d: {row.id: list(verdict(row, d)) for row in rows} for d in devs},
        "normalize": {"drop": DROP, "strip": STRIP},
    }
