"""Write the JSON Schemas of ibqos's YAML files from the models that validate them.

Usage: python scripts/gen_schemas.py [--check]

- ``schemas/ibqos.schema.json``: the configuration (``ibqos.config``);
- ``schemas/jobs.schema.json``: job files (``ibqos.jobs``);
- ``schemas/profile.schema.json``: job profiles (``ibqos.classify.profile_schema``).

Editors read them (``# yaml-language-server: $schema=...`` at the top of a file).  The
files are checked in; ``--check`` exits 1 if one differs from what the models give, or if
``schemas/`` holds a schema no model gives (a unit test runs it), so run this after
changing a model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ibqos.classify.profile_schema import json_schema as profile_schema
from ibqos.config import json_schema as config_schema
from ibqos.jobs import json_schema as jobs_schema

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"


def render() -> dict[str, str]:
    """The schema files' names and text."""
    return {
        name: json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
        for name, schema in (
            ("ibqos.schema.json", config_schema()),
            ("jobs.schema.json", jobs_schema()),
            ("profile.schema.json", profile_schema()),
        )
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    stale = []
    rendered = render()
    for name, text in rendered.items():
        path = SCHEMAS / name
        if path.is_file() and path.read_text() == text:
            continue
        stale.append(name)
        if not args.check:
            path.write_text(text)
            print(f"wrote {path}")
    if args.check and stale:
        print(f"out of date: {', '.join(stale)} (run scripts/gen_schemas.py)", file=sys.stderr)
        return 1
    extra = sorted(p.name for p in SCHEMAS.glob("*.json") if p.name not in rendered)
    if args.check and extra:
        print(f"made by no model: {', '.join(extra)} (remove them)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
