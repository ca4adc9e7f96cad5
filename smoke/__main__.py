"""Entry point for ``python -m smoke``."""

from __future__ import annotations

from smoke.cli import main

raise SystemExit(main())
