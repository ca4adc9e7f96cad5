"""Everything a check needs to know about where it runs, built once per suite run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from smoke import torch_names
from smoke.device import DeviceInfo
from smoke.manifest import Manifest


@dataclass
class Context:
    info: DeviceInfo
    manifest: Manifest
    debug: bool = False
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        return self.info.torch_device

    @property
    def on_gpu(self) -> bool:
        return self.info.device == torch_names.GPU

    def gpu_expected(self) -> bool:
        """The image claims GPU arches, so running it without a GPU proves nothing about it."""
        return bool(self.manifest.present and self.manifest.image_arches())

    def copy_bandwidth(self) -> float:
        """Bytes/s of a device copy, measured once per run as the reference for memory-bound checks."""
        if "copy_Bps" not in self.cache:
            from smoke.measure import copy_bandwidth

            nbytes = (1 << 30) if self.on_gpu else (64 << 20)
            self.cache["copy_Bps"] = copy_bandwidth(self.device, nbytes)
        return float(self.cache["copy_Bps"])
