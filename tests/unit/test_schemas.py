"""The JSON Schemas shipped in schemas/: made from the models, and the shipped files fit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ibqos.classify.profiles import load_profile
from ibqos.config import load_config
from ibqos.jobs import load_jobs
from tests.support.paths import ROOT


def test_the_checked_in_schemas_are_what_the_models_give() -> None:
    """The generator's own check: each schema is what its model gives, and schemas/ holds
    no other.  Run scripts/gen_schemas.py when this fails."""
    check = [sys.executable, str(ROOT / "scripts/gen_schemas.py"), "--check"]
    out = subprocess.run(check, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(
    ("name", "top", "required"),
    [
        ("ibqos.schema.json", {"mode", "opensm", "jobs", "collect", "lanes", "lab"}, None),
        ("jobs.schema.json", {"jobs"}, ["jobs"]),
        (
            "profile.schema.json",
            {"version", "application", "expected_class", "confidence", "model", "observations"},
            ["version", "application", "expected_class", "confidence"],
        ),
    ],
)
def test_the_schemas_are_json_schemas_of_closed_mappings(
    name: str, top: set[str], required: list[str] | None
) -> None:
    schema = json.loads((ROOT / "schemas" / name).read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert (schema["type"], schema["additionalProperties"]) == ("object", False)
    assert top <= set(schema["properties"]) and schema.get("required") == required
    assert schema["title"] and schema["description"]
    for section in schema["$defs"].values():  # every section refuses unknown keys too
        assert section["additionalProperties"] is False
        assert all("description" in prop for prop in section["properties"].values())


def test_the_shipped_config_names_its_schema_and_fits_it() -> None:
    example = ROOT / "opensm_conf/ibqos.yaml"
    first = example.read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=../schemas/ibqos.schema.json"
    assert (example.parent / first.split("=", 1)[1]).is_file()
    load_config(example)  # the models the schema is made from


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.yaml")), ids=str)
def test_the_shipped_job_files_fit_the_schema(example: Path) -> None:
    assert load_jobs(example, traffic=True)


@pytest.mark.parametrize(
    "example", sorted((ROOT / "characterize/profiles").glob("*.yaml")), ids=lambda p: p.name
)
def test_the_shipped_profiles_fit_the_schema(example: Path) -> None:
    assert load_profile(example).application
