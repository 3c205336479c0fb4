"""``ibqos restore``: give OpenSM back the files ibqos first found.

The first time ibqos ever changes opensm.conf or the QoS policy, the apply keeps the file
as it was in ``<state_dir>/backup/<name>.orig`` (or notes ``<name>.orig.absent`` when there
was none), and never touches that copy again.  Restore puts those versions back through
the same apply as the agent's: atomic writes, the current files kept as ``.prev``, OpenSM
signalled, its log read until the heavy sweep ends, and on an error in the log the files
of before the restore go back.

Restore refuses while any agent runs on the state directory (``ibqos.agent.lock``): one
in enforce mode would rewrite the files at its next cycle, and one in observe mode
rewrites state.json from memory each cycle, erasing restore's record of what it did.
Restore holds the agent lock itself until it is done, so no agent can start in between
(no check-then-act race).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ibqos.agent.lock import AgentLock, holder, opensm_dirs
from ibqos.agent.state import load_state, save_state
from ibqos.config.models import Config
from ibqos.errors import AgentLockError, ApplyError
from ibqos.opensm.apply import Applier, make_signaller, read_file
from ibqos.opensm.outcome import ApplyResult

#: the managed blocks' first lines (ibqos.opensm.conf and ibqos.opensm.policy)
_MARKERS = ("# BEGIN ibqos managed keys", "# BEGIN ibqos managed block")


@dataclass(frozen=True)
class Restored:
    """What a restore did.

    Attributes:
        result: the apply of the original files.
        originals: each file and the content put back (None: removed, there was none).
        notes: things the admin should know, one line each.
    """

    result: ApplyResult
    originals: dict[Path, str | None]
    notes: tuple[str, ...] = ()


def originals(config: Config) -> dict[Path, str | None]:
    """The files ibqos first found, for each OpenSM file it ever wrote (None: none
    existed); files it never wrote are not listed."""
    backups = config.agent.state_dir / "backup"
    out: dict[Path, str | None] = {}
    for path in (config.opensm.conf, config.opensm.policy_file):
        orig = backups / f"{path.name}.orig"
        try:
            text = read_file(orig)
        except OSError as err:
            raise ApplyError(f"{orig}: cannot read: {err.strerror}; nothing restored") from err
        if text is not None:
            out[path] = text
        elif (backups / f"{path.name}.orig.absent").exists():
            out[path] = None
    return out


def restore(config: Config) -> Restored:
    """Put OpenSM's original files back and have OpenSM re-read them.

    Raises:
        ApplyError: an agent runs on the state directory, a kept copy cannot be read or a
            file written, or OpenSM cannot be signalled (nothing changed then).
        AgentLockError: the agent lock cannot be opened.
    """
    state_dir = config.agent.state_dir
    if not state_dir.is_dir():  # ibqos never ran here: nothing kept, nothing to lock
        return Restored(ApplyResult(), {})
    try:
        osm = config.opensm
        lock = AgentLock(state_dir, "restore", opensm_dirs(osm.conf, osm.policy_file))
    except AgentLockError as err:
        who = holder(state_dir)
        if who is None:
            raise
        raise ApplyError(
            f"an ibqos agent in {who[1]} mode runs on {state_dir} (pid {who[0]}) and would"
            " overwrite the restore at its next cycle: stop it first (systemctl stop ibqos)"
        ) from err
    try:
        return _restore(config)
    finally:
        lock.close()


def _restore(config: Config) -> Restored:
    """:func:`restore` with the agent lock held."""
    state_dir = config.agent.state_dir
    files = originals(config)
    notes = []
    for path, text in files.items():
        if text is not None and any(m in text for m in _MARKERS):
            notes.append(
                f"{path}: the copy ibqos first found already held an ibqos block"
                " (the state directory was new when ibqos met the file)"
            )
    if not files:
        return Restored(ApplyResult(), files, tuple(notes))
    applier = Applier(
        state_dir,
        make_signaller(config.opensm),
        config.opensm.log,
        sweep_timeout_s=config.opensm.sweep_timeout_s,
    )
    result = applier.apply(files)
    if result.changed:
        _remember(config, result)
    return Restored(result, files, tuple(notes))


def _remember(config: Config, result: ApplyResult) -> None:
    """Note the restore in the state file: ``ibqos status`` then shows no plan in force."""
    state = load_state(config.agent.state_dir)
    doc = result.to_doc()
    if result.ok:
        doc["summary"] = "restored the original files (ibqos restore): " + doc["summary"]
        state.plan = None
    state.last_apply = doc
    state.updated_s = time.time()
    save_state(config.agent.state_dir, state)
