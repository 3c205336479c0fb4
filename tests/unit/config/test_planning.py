"""Config sections of planning: jobs.host_pattern, classify and lanes."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

from ibqos.config import AUTO_LANE_KEYS, CLASSES, LaneConfig, Thresholds, json_schema, parse_config
from ibqos.config.planning import ClassifySection, ClassIntensity, LanesSection
from ibqos.errors import ConfigError
from tests.support.paths import ROOT


def test_defaults() -> None:
    cfg = parse_config({}, "c.yaml")
    assert cfg.jobs.host_pattern == r"^(\S+)"
    assert cfg.classify == Thresholds()
    assert cfg.lanes.base == LaneConfig(reserved_sls=(0,))  # SL 0: the DEFAULT level
    assert cfg.lanes.auto == AUTO_LANE_KEYS  # read from the fabric unless given


def test_values_are_read() -> None:
    cfg = parse_config(
        {
            "jobs": {"host_pattern": r"^node-(\S+)"},
            "classify": {"moderate": 0.05, "high": 0.5, "hysteresis": 0.1, "tau_s": 30},
            "lanes": {
                "data_vls": 4,
                "mtu": 4096,
                "vlarb_low_cap": "auto",
                "reserved_sls": [15, 14, 14],
                "reserved_vls": [3],
                "reserved_sl2vl": {14: 3, 15: 3},
                "vlarb_high": ["3:255"],
                "high_limit": 4,
                "weight_law": "linear",
                "weight_ratio": 3,
                "min_hold_s": 0,
                "routing_engine": "ftree",
                "default_class": "low",
                "class_intensity": {"high": 0.9},
            },
        },
        "c.yaml",
    )
    assert cfg.jobs.host_pattern == r"^node-(\S+)"
    assert cfg.classify == Thresholds(0.05, 0.5, 0.1, 30.0)
    lanes = cfg.lanes.base
    assert (lanes.data_vls, lanes.mtu, lanes.reserved_sls, lanes.reserved_vls) == (
        4,
        4096,
        (14, 15),
        (3,),
    )
    assert lanes.reserved_sl2vl == ((14, 3), (15, 3))
    assert (lanes.vlarb_high, lanes.high_limit) == (((3, 255),), 4)
    assert (lanes.weight_law, lanes.weight_ratio, lanes.min_hold_s) == ("linear", 3.0, 0.0)
    assert (lanes.routing_engine, lanes.default_class) == ("ftree", "low")
    assert lanes.class_intensity == (0.05, 0.25, 0.9)
    assert cfg.lanes.auto == ("vlarb_low_cap", "vlarb_high_cap")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"jobs": {"host_pattern": "("}}, "jobs.host_pattern: host pattern '(': invalid regular"),
        ({"jobs": {"host_pattern": r"\S+"}}, "jobs.host_pattern: host pattern '\\S+': expected"),
        ({"classify": {"moderate": 0.5}}, "classify.moderate, high: expected 0 < moderate < high"),
        ({"classify": {"hysteresis": 1}}, "classify.hysteresis: expected a fraction < 1"),
        ({"classify": {"tau_s": -1}}, "classify.tau_s: expected a number >= 0, got -1"),
        ({"classify": {"tau": 1}}, "classify.tau: unknown key"),
        ({"lanes": {"data_vls": 16}}, "lanes.data_vls: expected an integer >= 1 and <= 15"),
        ({"lanes": {"data_vls": "eight"}}, "lanes.data_vls: expected an integer >= 1"),
        ({"lanes": {"mtu": 3000}}, "lanes.mtu: expected one of 256, 512, 1024, 2048, 4096"),
        ({"lanes": {"reserved_sls": [16]}}, "lanes.reserved_sls: expected a list of integers 0-15"),
        ({"lanes": {"reserved_vls": [15]}}, "lanes.reserved_vls: expected a list of integers 0-14"),
        ({"lanes": {"reserved_sl2vl": {1: 15}}}, "lanes.reserved_sl2vl: 1:15: expected integers"),
        ({"lanes": {"vlarb_high": "0:4"}}, "lanes.vlarb_high: expected a mapping or a list"),
        ({"lanes": {"vlarb_high": ["0:256"]}}, "lanes.vlarb_high: 0:256: expected integers"),
        ({"lanes": {"weight_law": "cubic"}}, "lanes.weight_law: expected one of geometric"),
        ({"lanes": {"weight_ratio": 0.05}}, "lanes.weight_ratio: expected a number >= 0.1"),
        ({"lanes": {"default_class": "huge"}}, "lanes.default_class: expected one of low"),
        ({"lanes": {"class_intensity": {"top": 1}}}, "lanes.class_intensity.top: unknown key"),
        ({"lanes": {"routing_engine": ""}}, "lanes.routing_engine: expected a non-empty string"),
        ({"lanes": {"vls": 4}}, "lanes.vls: unknown key"),
    ],
)
def test_bad_values_name_their_key(doc: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(doc, "c.yaml")
    assert str(info.value).startswith(f"c.yaml: {message}"), str(info.value)
    assert "\n" not in str(info.value)


def test_the_shipped_example_is_valid() -> None:

    from ibqos.config import load_config

    example = ROOT / "opensm_conf" / "ibqos.yaml"
    cfg = load_config(example)
    assert cfg.lanes.base.reserved_sls == (0,) and cfg.opensm.port_types == ("ca", "swe")


def test_the_shipped_example_names_every_key() -> None:
    """Every key a section accepts appears in the example (set, or commented out)."""
    import re

    schema = json_schema()

    def keys(prop: dict[str, Any]) -> list[str]:
        """The keys of a section (its properties), through $ref."""
        if "$ref" in prop:
            prop = schema["$defs"][prop["$ref"].rsplit("/", 1)[1]]
        return list(prop.get("properties", ()))

    example = ROOT / "opensm_conf" / "ibqos.yaml"
    text = example.read_text()
    sections = {m.group(1): m.start() for m in re.finditer(r"^(\w+):", text, re.M)}
    top = [k for k in schema["properties"] if k != "lab"]  # lab: written by `ibqos lab up` only
    missing = [k for k in top if not re.search(rf"^(# )?{k}:", text, re.M)]
    for section in top:
        start = sections[section]
        block = text[start : min([s for s in sections.values() if s > start] + [len(text)])]
        for key in keys(schema["properties"][section]):
            if not re.search(rf"^  (# )?{key}:", block, re.M):
                missing.append(f"{section}.{key}")
    assert not missing, missing


def test_the_section_models_have_the_runtime_classes_keys() -> None:
    """The YAML sections of classify and lanes take exactly the fields of the classes
    the planner uses, in their order (so the messages list them so)."""
    assert [f.name for f in fields(LanesSection)] == [f.name for f in fields(LaneConfig)]
    assert [f.name for f in fields(ClassifySection)] == [f.name for f in fields(Thresholds)]
    assert tuple(f.name for f in fields(ClassIntensity)) == CLASSES
    assert set(AUTO_LANE_KEYS) <= {f.name for f in fields(LaneConfig)}


def test_lane_values_are_checked_all_at_once() -> None:
    doc = {"lanes": {"data_vls": 16, "weight_ratio": 0.05, "class_intensity": {"top": 1}}}
    with pytest.raises(ConfigError) as info:
        parse_config(doc, "c.yaml")
    assert str(info.value).splitlines() == [
        "c.yaml: lanes.data_vls: expected an integer >= 1 and <= 15, got 16",
        "c.yaml: lanes.weight_ratio: expected a number >= 0.1, got 0.05",
        "c.yaml: lanes.class_intensity.top: unknown key (expected one of low, moderate, high)",
    ]
