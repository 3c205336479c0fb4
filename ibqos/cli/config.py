"""``ibqos config``: the configuration as loaded, after validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import yaml

from ibqos.cli.options import config_option
from ibqos.config.load import find_config, load_config


@click.command("config")
@config_option()
def show_config(path: Path | None) -> None:
    """Validate the ibqos configuration and print it as loaded."""
    config = load_config(find_config(path))
    out = {
        "source": config.source,
        "mode": config.mode,
        "opensm": {k: str(v) if v is not None else None for k, v in vars(config.opensm).items()},
        "jobs": {
            "source": config.jobs.source,
            "path": str(config.jobs.path),
            "host_pattern": config.jobs.host_pattern,
        },
        "slurm": _plain(vars(config.slurm)),
    }
    for section in ("fabric", "collect", "classify"):
        out[section] = _plain(vars(getattr(config, section)))
    lanes = _plain(vars(config.lanes.base))
    out["lanes"] = {k: "auto" if k in config.lanes.auto else v for k, v in lanes.items()}
    if config.lab is not None:
        out["lab"] = {"name": config.lab.name, "dir": str(config.lab.dir)}
    click.echo(yaml.safe_dump(out, sort_keys=False), nl=False)


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    """Config values as YAML scalars and lists (paths as text, tuples as lists)."""

    def plain(v: Any) -> Any:
        if isinstance(v, Path):
            return str(v)
        return [plain(x) for x in v] if isinstance(v, tuple) else v

    return {k: plain(v) for k, v in values.items()}
