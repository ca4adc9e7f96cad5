"""`python3 -m imagecontract.models [DIR]`: write the contract's JSON Schemas (default: schema/)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from imagecontract.atomic import write_atomic
from imagecontract.models import SCHEMAS


def main(argv: list[str]) -> int:
    folder = Path(argv[0] if argv else "schema")
    for name, model in SCHEMAS.items():
        write_atomic(folder / name, json.dumps(model.json_schema(), indent=2) + "\n")
        print(folder / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
