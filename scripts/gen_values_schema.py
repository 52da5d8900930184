"""Keep the parts of the chart's values schema that code defines in step with that code.

`scheduler.placement` accepts every registered placement policy (and "" for the scheduler's default);
the list comes from `scheduler.placement.registry`, so a new policy is installable the day it is
registered. Usage, from the repository root:

    python scripts/gen_values_schema.py           # rewrite deploy/helm/tessera/values.schema.json
    python scripts/gen_values_schema.py --check   # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from scheduler.placement.registry import policy_names  # noqa: E402

SCHEMA = ROOT / "deploy" / "helm" / "tessera" / "values.schema.json"


def derived(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with the code-defined parts filled in (a copy; the rest is kept as written)."""
    out = json.loads(json.dumps(schema))
    scheduler = out["properties"]["scheduler"]["properties"]
    scheduler["placement"] = {"enum": ["", *policy_names()]}
    return out


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail if the schema on disk is stale")
    parser.add_argument("--file", type=Path, default=SCHEMA, help="the values schema to update")
    args = parser.parse_args(argv)
    current = args.file.read_text()
    wanted = render(derived(json.loads(current)))
    if args.check:
        if current != wanted:
            print(f"stale: {args.file} (run python scripts/gen_values_schema.py)")
            return 1
        return 0
    args.file.write_text(wanted)
    print(f"wrote {args.file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
