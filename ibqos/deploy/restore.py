"""``ibqos restore``: take ibqos's lines out of OpenSM's files, keep the rest, and check.

**What goes.**  Only what ibqos put there: the marked block of opensm.conf
(:func:`ibqos.opensm.conf.strip_conf`) and the marked block of the QoS policy
(:func:`ibqos.opensm.policy.strip_policy`).  Every other line of the files as they are now
stays byte for byte, so an admin's edits made since ibqos's first write survive.  The
admin's own lines for the keys ibqos took over (``qos``, ``qos_<type>_sl2vl`` ...) come
back from the copy ibqos first found (``<state_dir>/backup/<name>.orig``), each after the
line it followed there.  A file ibqos created (``<name>.orig.absent``) that holds nothing
once the block is out is removed.  A file without ibqos's block is left as it is.

**How.**  Through the same apply as the agent's: the one atomic write, the current files
kept as ``.prev``, OpenSM signalled, its log read until the heavy sweep ends, and on an
error in the log the files of before the restore go back.  A restore that OpenSM took ends
every hold (:mod:`ibqos.opensm.hold`) and forgets what ibqos last wrote: the next agent
starts afresh from the files on disk.

**Verified through the SA.**  Once OpenSM took the files, restore asks the SA for the
PathRecord between the first and the last port of each job ibqos's policy block bound (up
to :data:`VERIFY_PATHS` of them; LIDs from the fabric as the config's ``fabric`` section
gives it).  Where the admin's policy has no match rule and no ULP line but ``default``,
every such path must carry the admin's DEFAULT SL (0 without one, and without a policy
file).  Where the admin's own rules decide (ibqos does not evaluate them), the SL each
path carries is reported, and the check is that the SA serves one.  A check that fails is
the apply's verification failing: the files of before the restore go back and restore
exits 1.  No fabric to find the jobs' LIDs in, or no job bound: a note says the SA was
not asked, and OpenSM's log alone decides.

Restore refuses while any agent runs on the state directory (``ibqos.agent.lock``): one
in enforce mode would rewrite the files at its next cycle, and one in observe mode
rewrites state.json from memory each cycle, erasing restore's record of what it did.
Restore holds the agent lock itself until it is done, so no agent can start in between
(no check-then-act race).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ibqos.agent.lock import AgentLock, holder, opensm_dirs
from ibqos.agent.state import load_state, save_state
from ibqos.collect.discover import fabric_from_config
from ibqos.collect.portinfo import SmpqueryRunner
from ibqos.config.models import Config
from ibqos.errors import AgentLockError, ApplyError, IbqosError
from ibqos.fsio import atomic_remove
from ibqos.opensm.apply import Applier, make_signaller, read_file
from ibqos.opensm.conf import strip_conf
from ibqos.opensm.hold import HOLD_FILE, WRITTEN_FILE
from ibqos.opensm.outcome import ApplyResult
from ibqos.opensm.policy import Policy, job_ports, parse_policy, strip_policy
from ibqos.opensm.verify import Expected, PathCheck, check_until, parse_path_sl

#: the managed blocks' first lines (ibqos.opensm.conf and ibqos.opensm.policy)
_MARKERS = ("# BEGIN ibqos managed keys", "# BEGIN ibqos managed block")
#: jobs of ibqos's removed block whose PathRecord the SA is asked for (one saquery each)
VERIFY_PATHS = 8


@dataclass(frozen=True)
class Restored:
    """What a restore did.

    Attributes:
        result: the apply of the restored files.
        files: each file ibqos wrote and its content as restored (None: removed, there
            was none before ibqos).
        notes: things the admin should know, one line each.
        verified: what the SA serves on the paths checked, one line each.
    """

    result: ApplyResult
    files: dict[Path, str | None]
    notes: tuple[str, ...] = ()
    verified: tuple[str, ...] = ()


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


def stripped(config: Config) -> dict[Path, str | None]:
    """OpenSM's files as they are now without ibqos's lines, for each file ibqos ever
    wrote (None: remove it, ibqos created it and nothing else is left in it).

    Raises:
        ApplyError: a file cannot be read, or its ibqos markers do not delimit one block
            (fix them first); nothing restored.
    """
    first = originals(config)
    conf, policy = config.opensm.conf, config.opensm.policy_file
    out: dict[Path, str | None] = {}
    for path, original in first.items():
        try:
            text = read_file(path)
        except OSError as err:
            raise ApplyError(f"{path}: cannot read: {err.strerror}; nothing restored") from err
        if text is None:
            continue  # gone: nothing of ibqos's left in it
        try:
            if path == conf:
                left = strip_conf(text, original, source=str(conf))
            else:
                left = strip_policy(text, source=str(policy))
        except IbqosError as err:
            raise ApplyError(f"{err}; nothing restored") from err
        out[path] = None if original is None and not left.strip() else left
    return out


def restore(config: Config) -> Restored:
    """Take ibqos's lines out of OpenSM's files, have OpenSM re-read them, check the SA.

    Raises:
        ApplyError: an agent runs on the state directory, a file cannot be read or
            written, its markers are damaged, or OpenSM cannot be signalled (nothing
            changed then).
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
    notes = []
    for path, text in originals(config).items():
        if text is not None and any(m in text for m in _MARKERS):
            notes.append(
                f"{path}: the copy ibqos first found already held an ibqos block"
                " (the state directory was new when ibqos met the file)"
            )
    before = read_file(config.opensm.policy_file) or ""
    files = stripped(config)
    if not files:
        return Restored(ApplyResult(), files, tuple(notes))
    check = None
    if config.opensm.verify and files != {p: read_file(p) for p in files}:
        check, note = sa_check(config, parse_policy(before), files)
        if note:
            notes.append(note)
    applier = Applier(
        state_dir,
        make_signaller(config.opensm),
        config.opensm.log,
        sweep_timeout_s=config.opensm.sweep_timeout_s,
    )
    result = applier.apply(files, check)
    verified = () if check is None else tuple(check.lines)
    if not result.ok:
        return Restored(result, files, tuple(notes))
    for kept in (HOLD_FILE, WRITTEN_FILE):  # the admin acted: the next agent starts afresh
        try:
            atomic_remove(state_dir / kept)
        except OSError as err:
            notes.append(f"{state_dir / kept}: cannot remove ({err.strerror}); remove it")
    if result.changed:
        _remember(config, result)
    return Restored(result, files, tuple(notes), verified)


class SACheck:
    """The SA check after a restore (the module docstring): PathRecords of ibqos's
    removed jobs, each on the admin's DEFAULT SL (*default*), or, where the admin's own
    rules decide (*default* None), served at all.

    Attributes:
        lines: what the SA served, one line each, once checked.
    """

    def __init__(
        self, paths: Sequence[tuple[str, int, int]], default: int | None, runner: SmpqueryRunner
    ) -> None:
        self.paths = tuple(paths)
        self.default = default
        self.runner = runner
        self.lines: list[str] = []

    def __call__(self) -> list[str]:
        """Problems, one line each (the apply rolls the restore back on any)."""
        self.lines.clear()
        if self.default is not None:
            checks = tuple(PathCheck(j, a, b, self.default) for j, a, b in self.paths)
            problems = check_until(Expected(paths=checks), self.runner)
            if not problems:
                self.lines.append(
                    f"the SA serves SL {self.default} (the admin's DEFAULT) on"
                    f" {len(self.paths)} path(s) of ibqos's jobs"
                )
            return problems
        problems = []
        for job_id, slid, dlid in self.paths:
            argv = ["saquery", "PR", "--slid", str(slid), "--dlid", str(dlid)]
            try:
                sl = parse_path_sl(self.runner(argv))
            except IbqosError as err:
                problems.append(f"job {job_id}: no PathRecord lid {slid}->{dlid}: {err}")
                continue
            self.lines.append(
                f"job {job_id}: the SA serves SL {sl} lid {slid}->{dlid} (the admin's rules)"
            )
        return problems


def sa_check(
    config: Config, block: Policy, files: dict[Path, str | None]
) -> tuple[SACheck | None, str]:
    """The SA check of a restore of *files* that removes ibqos's policy *block*, and a
    note when there is none (no job bound, no fabric to find the jobs' LIDs)."""
    ports = job_ports(block)
    if not ports:
        return None, ""
    try:
        fabric = fabric_from_config(config)
        runner = SmpqueryRunner(10.0, binary="saquery")
    except IbqosError as err:
        return None, f"not verified through the SA: {err}"
    lid = {
        fp.port_guid: fp.lid
        for fp in fabric.ports.values()
        if fp.port_guid is not None and fp.lid is not None
    }
    paths: list[tuple[str, int, int]] = []
    for job_id, guids in ports.items():
        lids = [lid[g] for g in guids if g in lid]
        if len(lids) >= 2 and len(paths) < VERIFY_PATHS:
            paths.append((job_id, lids[0], lids[-1]))
    if not paths:
        return None, "not verified through the SA: no job of ibqos's has two ports in the fabric"
    policy_path = config.opensm.policy_file
    admin = parse_policy(files.get(policy_path, read_file(policy_path)) or "")
    return SACheck(paths, _default_sl(admin), runner), ""


def _default_sl(admin: Policy) -> int | None:
    """The SL every job path gets from the admin's policy alone: its DEFAULT (0 without
    one); None when its own match rules or ULP lines may decide."""
    if admin.error is not None or admin.match_rules:
        return None
    if any(rule.kind != "default" for rule in admin.ulp_rules):
        return None
    sl = admin.default_sl
    return 0 if sl is None else sl


def _remember(config: Config, result: ApplyResult) -> None:
    """Note the restore in the state file: ``ibqos status`` then shows no plan in force."""
    state = load_state(config.agent.state_dir)
    doc = result.to_doc()
    if result.ok:
        doc["summary"] = (
            "restored the files without ibqos's lines (ibqos restore): " + doc["summary"]
        )
        state.plan = None
    state.last_apply = doc
    state.updated_s = time.time()
    save_state(config.agent.state_dir, state)
