"""Job profiles: what ibqos expects of an application before it has measured its job.

A profile is one YAML file in the profile directory (``profiles.dir``), keyed by the
application name (a job's ``name``) and, optionally, a user and a node count::

    version: 1
    application: lammps
    user: alice            # optional: only alice's lammps jobs
    nodes: 16              # optional: only jobs of 16 nodes
    expected_class: moderate
    confidence: 0.67       # 0..1: how sure the profile is of expected_class
    model:                 # optional: the traffic, to predict the class on a placement
      pattern: halo        # a pattern of docs/jobs.md; the attribution prior
      halo_dims: [4, 4]
      rate_bytes_per_s: 4.5e8   # mean bytes/s each node sends, compute phases included
      duty: 0.4            # optional: share of each iteration spent communicating
      period_s: 0.02       # optional: iteration length alone, seconds
      phase_trials: 3      # optional: duty and period_s were fitted on 3 setups tried
    characterized: [...]   # per-level figures of the placements characterized (shown)
    observations: [...]    # {source, class, intensity, time_s}: what built it

``expected_class`` and ``confidence`` follow the observations: the class most of them saw
(ties: the latest), and the share that saw it, shrunk towards 0 by one pseudo-observation
(``agree / (n + 1)``: one observation gives 0.5, three that agree 0.75), so a lone
measurement counts for less than a consistent record.  An admin may edit both; the next
observation recomputes them.  Every file of the directory is checked on load
(:mod:`ibqos.classify.profile_schema`, ``schemas/profile.schema.json``); a bad one is an
error naming the file and the key path of each of its problems, all at once, and nothing
is written half-way (atomic writes).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ibqos.classify.profile_schema import NAME_PATTERN, VERSION, describes, validate_profile
from ibqos.classify.traffic import NodeTraffic
from ibqos.config.classes import Class
from ibqos.errors import ProfileError
from ibqos.fsio import atomic_write
from ibqos.jobs.model import Job

#: observations kept per profile (the oldest go first)
MAX_OBSERVATIONS = 50
#: a traced matrix is kept only up to this many nodes (a bigger one is no longer readable)
MAX_MATRIX_NODES = 64
#: sources of observations measured on the fabric (the agent's learning, ``characterize
#: learn``, ``characterize history``), as opposed to characterized from a trace or job file
MEASURED_SOURCES = ("job ", "history of job ")
#: measured observations needed before they may overrule a profile's model
MIN_MEASURED = 2


@dataclass(frozen=True)
class Model:
    """An application's traffic, as the lab's job format describes it.

    Attributes:
        pattern: one of :data:`ibqos.jobs.jobfile.PATTERNS`.
        rate_bytes_per_s: mean bytes per second each node sends, over all nodes (0.0:
            not known; then only the pattern is used, as the attribution prior).
        halo_dims: for ``halo``; None: one dimension.
        matrix: for ``matrix``: relative weights, rows send to columns, of the whole
            matrix: node i sends ``rate * n * w[i][j] / sum(w)`` bytes per second to j
            (:meth:`traffic`), so rows that send nothing keep the total right.
        duty: share of each iteration spent communicating, (0, 1]; None: not known.
        period_s: iteration length alone on the fabric, seconds; None: not known.  With
            *duty*, the phases the tuner's prediction gives the job (else it assumes them).
        phase_trials: the setups tried on the fabric that *duty* and *period_s* were
            fitted on (:mod:`ibqos.sim.learn`); None: they were declared or characterized.
    """

    pattern: str
    rate_bytes_per_s: float = 0.0
    halo_dims: tuple[int, ...] | None = None
    matrix: tuple[tuple[float, ...], ...] | None = None
    duty: float | None = None
    period_s: float | None = None
    phase_trials: int | None = None

    def fits(self, nodes: int) -> bool:
        """The model describes a job of *nodes* nodes (a matrix or halo grid has a size)."""
        return describes(nodes, self.halo_dims, self.matrix)

    def job(self, job: Job) -> Job:
        """*job* with this model's pattern (and rate, as a mean: always communicating)."""
        return replace(
            job,
            pattern=self.pattern,
            halo_dims=self.halo_dims,
            matrix=self.matrix,
            seed=job.seed if self.pattern == "random-pairs" else None,
            rate_bytes_per_s=self.rate_bytes_per_s or job.rate_bytes_per_s,
            duty=1.0 if self.rate_bytes_per_s else job.duty,
            period_s=1.0 if self.rate_bytes_per_s else job.period_s,
        )

    def traffic(self, job_id: str, hosts: Sequence[str]) -> NodeTraffic:
        """The traffic this model (with a rate) predicts for a job on *hosts* (node order).

        A ``matrix`` model is scaled as a whole, so nodes send in the matrix's proportions
        and the mean over all nodes is the rate: a traced job in which only some nodes send
        keeps its total (the lab's job format instead gives every sending row the full
        rate).  Other patterns are the lab's (``docs/jobs.md``), every node sending the rate.
        """
        job = self.job(Job(job_id, tuple(hosts)))
        if self.matrix is not None:
            weights = np.array(self.matrix, dtype=np.float64)
            scale = self.rate_bytes_per_s * len(weights) / float(weights.sum())
            return NodeTraffic.from_matrix(weights * scale)
        return NodeTraffic.from_job(job)


@dataclass(frozen=True)
class Observation:
    """One thing seen of the application.

    Attributes:
        source: what: ``trace app.csv: contiguous on 2;8,4;1,2``, ``job 1234``, ...
        cls: the class it showed.
        intensity: its intensity, if known (a fraction).
        time_s: when, seconds since the epoch, if known.
    """

    source: str
    cls: Class
    intensity: float | None = None
    time_s: float | None = None


@dataclass(frozen=True)
class Profile:
    """One application's profile (see the module docstring).

    Attributes:
        application: the application (job) name.
        user: only this user's jobs; None: anyone's.
        nodes: only jobs of this size; None: any size.
        expected_class: the class a new job of it is expected to have.
        confidence: 0..1.
        model: its traffic, if known.
        characterized: per-level figures of characterized placements (for people: kept
            as written).
        observations: oldest first.
        path: the file it was read from (None: not saved yet).
    """

    application: str
    expected_class: Class
    confidence: float
    user: str | None = None
    nodes: int | None = None
    model: Model | None = None
    characterized: tuple[Mapping[str, Any], ...] = ()
    observations: tuple[Observation, ...] = ()
    path: Path | None = field(default=None, compare=False)

    @property
    def key(self) -> tuple[str, str | None, int | None]:
        """(application, user, nodes): what a job is matched by."""
        return (self.application, self.user, self.nodes)

    def file_name(self) -> str:
        """The file name it is saved under: ``app[@user][-nN].yaml``."""
        user = f"@{self.user}" if self.user else ""
        nodes = f"-n{self.nodes}" if self.nodes is not None else ""
        return f"{self.application}{user}{nodes}.yaml"

    def matches(self, name: str, user: str | None, nodes: int) -> bool:
        """A job of this name, user and size is one this profile is for."""
        return (
            self.application == name
            and (self.user is None or self.user == user)
            and (self.nodes is None or self.nodes == nodes)
        )

    def measured_class(self, min_confidence: float) -> tuple[Class, float] | None:
        """The class its measured observations (:data:`MEASURED_SOURCES`) agree on, and
        how sure (``agree / (n + 1)``, as ``confidence``): None with fewer than
        :data:`MIN_MEASURED` of them or below *min_confidence*."""
        measured = [o for o in self.observations if o.source.startswith(MEASURED_SOURCES)]
        if len(measured) < MIN_MEASURED:
            return None
        counts = Counter(o.cls for o in measured)
        top = max(counts.values())
        cls = next(o.cls for o in reversed(measured) if counts[o.cls] == top)
        sure = top / (len(measured) + 1)
        return (cls, sure) if sure >= min_confidence else None

    def observe(self, obs: Observation) -> Profile:
        """This profile with one more observation, its class and confidence recomputed."""
        kept = (*self.observations, obs)[-MAX_OBSERVATIONS:]
        counts = Counter(o.cls for o in kept)
        top = max(counts.values())
        # ties go to the class seen last
        cls = next(o.cls for o in reversed(kept) if counts[o.cls] == top)
        return replace(
            self,
            observations=kept,
            expected_class=cls,
            confidence=round(top / (len(kept) + 1), 4),
        )

    def to_yaml(self) -> str:
        """The file's text."""
        doc: dict[str, Any] = {
            "version": VERSION,
            "application": self.application,
            "user": self.user,
            "nodes": self.nodes,
            "expected_class": self.expected_class,
            "confidence": self.confidence,
        }
        if self.model is not None:
            m = self.model
            model: dict[str, Any] = {"pattern": m.pattern}
            if m.halo_dims is not None:
                model["halo_dims"] = list(m.halo_dims)
            if m.matrix is not None:
                model["matrix"] = [list(row) for row in m.matrix]
            if m.rate_bytes_per_s:
                model["rate_bytes_per_s"] = m.rate_bytes_per_s
            if m.duty is not None:
                model["duty"] = m.duty
            if m.period_s is not None:
                model["period_s"] = m.period_s
            if m.phase_trials is not None:
                model["phase_trials"] = m.phase_trials
            doc["model"] = model
        doc["characterized"] = [dict(row) for row in self.characterized]
        doc["observations"] = [
            {
                k: v
                for k, v in {
                    "source": o.source,
                    "class": o.cls,
                    "intensity": o.intensity,
                    "time_s": o.time_s,
                }.items()
                if v is not None
            }
            for o in self.observations
        ]
        head = "# ibqos job profile (docs/characterize.md)\n"
        return head + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100)


class _Dumper(yaml.SafeDumper):
    """Short lists of numbers (matrix rows, dims) on one line: the file stays readable."""


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.SequenceNode:
    flow = all(isinstance(x, int | float) and not isinstance(x, bool) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _represent_list)


def parse_profile(doc: object, source: str) -> Profile:
    """Validate a loaded profile document (:mod:`ibqos.classify.profile_schema`).

    Raises:
        ProfileError: ``<source>: <key path>: <what is wrong>``, one line per problem.
    """
    entry = validate_profile(doc, source)
    m = entry.model
    return Profile(
        application=entry.application,
        user=entry.user,
        nodes=entry.nodes,
        expected_class=entry.expected_class,
        confidence=entry.confidence,
        model=None
        if m is None
        else Model(
            m.pattern, m.rate_bytes_per_s, m.halo_dims, m.matrix, m.duty, m.period_s, m.phase_trials
        ),
        characterized=entry.characterized,
        observations=tuple(
            Observation(o.source, o.cls, o.intensity, o.time_s) for o in entry.observations or ()
        ),
    )


def load_profile(path: Path) -> Profile:
    """Read one profile file (:func:`parse_profile`)."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise ProfileError(f"{path}: cannot read") from err
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ProfileError(f"{path}{where}: not valid YAML") from None
    return replace(parse_profile(doc, str(path)), path=path)


class ProfileStore:
    """The profiles of one directory (``*.yaml``, read in name order; hidden files and
    other names are ignored).

    Args:
        directory: the profile directory; it need not exist until something is saved.

    Raises:
        ProfileError: a profile file is bad, or two files have the same key.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.profiles: list[Profile] = []
        if not directory.exists():
            return
        if not directory.is_dir():
            raise ProfileError(f"{directory}: not a directory")
        seen: dict[tuple[str, str | None, int | None], Path] = {}
        for path in sorted(directory.glob("*.yaml")):
            if path.name.startswith("."):
                continue
            profile = load_profile(path)
            other = seen.setdefault(profile.key, path)
            if other != path:
                raise ProfileError(f"{path}: same application, user and nodes as {other}")
            self.profiles.append(profile)

    def match(self, name: str, user: str | None, nodes: int) -> Profile | None:
        """The most specific profile for a job (user and size > user > size > name only);
        None when none matches or the job has no name."""
        if not name:
            return None
        found = [p for p in self.profiles if p.matches(name, user, nodes)]
        return max(found, key=lambda p: (p.user is not None, p.nodes is not None), default=None)

    def get(
        self, application: str, user: str | None = None, nodes: int | None = None
    ) -> Profile | None:
        """The profile with exactly this key."""
        return next((p for p in self.profiles if p.key == (application, user, nodes)), None)

    def reread(
        self, application: str, user: str | None = None, nodes: int | None = None
    ) -> Profile | None:
        """The profile of this key as its file holds it now (None: no file), and this
        store updated to it.

        Raises:
            ProfileError: the file is bad, or now holds another key.
        """
        key = (application, user, nodes)
        old = self.get(*key)
        path = old.path if old is not None and old.path is not None else None
        path = path or self.directory / Profile(application, "low", 0.0, user, nodes).file_name()
        if not path.exists():
            self.profiles = [p for p in self.profiles if p.key != key]
            return None
        profile = load_profile(path)
        if profile.key != key:
            raise ProfileError(f"{path}: now holds {profile.file_name()}'s key, not {key}")
        self.profiles = [p for p in self.profiles if p.key != key] + [profile]
        return profile

    def save(self, profile: Profile) -> Path:
        """Write *profile* atomically (a profile of the same key is replaced in place).

        Raises:
            ProfileError: the directory cannot be created or written.
        """
        old = self.get(*profile.key)
        path = old.path if old is not None and old.path is not None else None
        path = path or self.directory / profile.file_name()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            atomic_write(path, profile.to_yaml())
        except OSError as err:
            raise ProfileError(f"{path}: cannot write") from err
        saved = replace(profile, path=path)
        self.profiles = [p for p in self.profiles if p.key != profile.key] + [saved]
        return path

    def observe(
        self,
        application: str,
        obs: Observation,
        *,
        user: str | None = None,
        nodes: int | None = None,
        model: Model | None = None,
        characterized: Sequence[Mapping[str, Any]] | None = None,
    ) -> Profile:
        """Add an observation to the profile of this key (created if missing) and save it;
        *model* and *characterized*, when given, replace the profile's.

        The profile's file is read again first (read, modify, write one file): another
        writer -- ``ibqos characterize --save``, an admin's edit, the agent's learning --
        may have changed it since this store was loaded, and its changes are kept.

        Raises:
            ProfileError: the file is bad now, or cannot be written.
        """
        profile = self.reread(application, user, nodes) or Profile(
            application, obs.cls, 0.0, user=user, nodes=nodes
        )
        if model is not None:
            profile = replace(profile, model=model)
        if characterized is not None:
            profile = replace(profile, characterized=tuple(characterized))
        profile = profile.observe(obs)
        return replace(profile, path=self.save(profile))


def check_name(name: str, what: str) -> str:
    """*name* if it can key a profile (and name its file), else ProfileError."""
    if not NAME_PATTERN.match(name):
        raise ProfileError(f"{what} {name!r}: expected letters, digits and _.+- only")
    return name
