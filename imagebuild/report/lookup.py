"""The GPU lookup: a name someone types (`gfx942`, `MI300X`, `H100`, `sm_90`, `Hopper`, `9.0`) -> devices, and per
device which rows run there and why the others do not.

Computed here, in Python, with the contract's `loads_on` (the rule the in-image preflight applies) and its one
alias and product tables (imagecontract/targets.py); the page's script only looks the answers up, it re-implements
no rule.
"""

from __future__ import annotations

import re
from typing import Any

from imagebuild.report.model import Row
from imagecontract.targets import (
    AMD_FEATURES,
    AMD_PRODUCTS,
    NVIDIA_NAMED,
    NVIDIA_PRODUCTS,
    NVIDIA_SMS,
    TargetError,
    device_configs,
    loads_on,
    parse_list,
)

_DROP = re.compile(r"^(?:nvidia|amd|instinct|geforce|tesla)\s+", re.I)


def normalize(text: str) -> str:
    """The key a typed name is looked up by (the page's script does the same): lower case, vendor words dropped,
    no spaces, AMD target features in LLVM's (alphabetical) order."""
    text = text.strip()
    while _DROP.match(text):
        text = _DROP.sub("", text, count=1)
    key = re.sub(r"\s+", "", text.lower())
    proc, *features = key.split(":")
    return ":".join([proc, *sorted(features)]) if proc.startswith("gfx") else key  # LLVM order: alphabetical


def devices() -> dict[str, str]:
    """Every device ID the lookup knows -> its label: AMD processors bare and with each feature setting, NVIDIA SMs."""
    out: dict[str, str] = {}
    for proc, features in AMD_FEATURES.items():
        label = f"{proc} (AMD {AMD_PRODUCTS[proc]})" if proc in AMD_PRODUCTS else proc
        out[proc] = label
        for config in (device_configs(proc) or []) if features else []:
            out[config] = f"{config} (AMD {AMD_PRODUCTS.get(proc, proc)})"
    for sm, cap in NVIDIA_SMS.items():
        product = NVIDIA_PRODUCTS.get(sm)
        out[sm] = f"{sm} (compute capability {cap}" + (f", NVIDIA {product})" if product else ")")
    return out


def names() -> dict[str, list[str]]:
    """normalize(name) -> device IDs: target IDs, capabilities, architecture names (torch's), product names."""
    index: dict[str, list[str]] = {}

    def add(name: str, device: str) -> None:
        key = normalize(name)
        if key and device not in index.setdefault(key, []):
            index[key].append(device)

    for device in devices():
        add(device, device)
    for sm, cap in NVIDIA_SMS.items():
        add(cap, sm)
        add(sm.replace("_", ""), sm)
    for name in NVIDIA_NAMED:
        for target in parse_list(name):
            add(name, target.processor)
    for proc, products in AMD_PRODUCTS.items():
        for product in products.split("/"):
            add(product, proc)
    for sm, products in NVIDIA_PRODUCTS.items():
        for product in products.split("/"):
            add(product, sm)
    return index


def resolve(query: str, index: dict[str, list[str]] | None = None) -> list[str]:
    """Devices a typed name means: an exact name, else every name it starts (at least 3 characters), else a
    target ID the contract parses (`gfx942:xnack+:sramecc-`)."""
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
        return [t.id for t in parse_list(query, variants=True)]
    except TargetError:
        return []


def _vendor(device: str) -> str:
    return "amd" if device.startswith("gfx") else "nvidia"


def verdict(row: Row, device: str) -> tuple[bool, str]:
    """Does this row's image code load on `device` (loads_on), and if not, why."""
    arches = ", ".join(row.image_arches) or "none"
    if row.vendor == "cpu":
        return False, "CPU image: no GPU code (it runs on the host CPU)"
    if row.vendor != _vendor(device):
        return False, f"{row.vendor.upper()} image ({arches}); {device} is an {_vendor(device).upper()} GPU"
    if loads_on(row.arch, device):
        return True, f"{row.arch} code loads on {device}"
    other = [a for a in row.image_arches if loads_on(a, device)]
    if other:
        return False, f"this row is the image's {row.arch} build; its {other[0]} row runs on {device}"
    same = [a for a in row.image_arches if a.split(":")[0] == device.split(":")[0]]
    if same:
        return False, f"code for {same[0]} does not load on {device} (target features differ: LLVM's rule)"
    return False, f"no code for {device} in this image (it has {arches}); build one: imagebuild build --arch {device}"


def table(rows: list[Row]) -> dict[str, Any]:
    """What the page's script needs: names -> devices, device labels, and per device each row's (runs, why)."""
    devs = devices()
    return {
        "names": names(),
        "devices": devs,
        "verdicts": {d: {row.id: list(verdict(row, d)) for row in rows} for d in devs},
    }
