"""imagebuild: GPU serving images from one version matrix, proven on GPUs before they are published."""

from __future__ import annotations

__version__ = "0.1.0"
