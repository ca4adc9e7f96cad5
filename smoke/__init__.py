"""In-image smoke suite: proves an image's torch, kernels and attention work on the GPU it runs on.

Runs inside images (``python -m smoke``) and never imports ``imagebuild``: the contract with the host is the
manifest it reads and the report it writes (docs/contracts.md).
"""

from __future__ import annotations

__version__ = "0.1.0"
