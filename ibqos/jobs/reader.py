"""A job file or directory read again and again: only what changed is read again.

A job source looks at its file every cycle and reads it again when it changed.  A big job
file (100k jobs) changes by a job or two at a time, and a directory of one file per job
by a file or two; so :class:`JobReader` keeps, from one read to the next, the version of
every file (by its stamp: name, mtime, size, inode) and the job of every entry (by its
text), and reads again only the files that changed, validating only their new entries.
What a read gives is what :func:`~ibqos.jobs.jobfile.load_jobs` gives, the same job
objects where nothing changed.

A *file* is valid or not, as a whole: any problem raises, naming every problem.  A
*directory* is many jobs that have nothing to do with each other (a Slurm prolog writes
one file per job), so one bad job must not hold up the others:

- an invalid job (a bad host list, a missing key, ...) is left out, the others of its
  file are taken; a job whose id a file before it already has (file name order) is left
  out, the first is taken;
- a file that cannot be read or parsed, or that is no job file at all (empty, or not a
  mapping with a list of jobs: a file being written, a permission) keeps the jobs of its
  last good version, none if it never had one;
- each such problem is in :attr:`Reading.problems` as long as it lasts, and the jobs left
  out are counted (:attr:`Reading.rejected`).

Only a directory that cannot be listed raises.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ibqos.errors import JobsError
from ibqos.jobs.jobfile import Version, job_files, read_version
from ibqos.jobs.model import Job

log = logging.getLogger(__name__)

__all__ = ["JobReader", "Reading", "Stamp"]

#: What identifies one version of a file: (name, mtime_ns, size, inode).  The inode catches
#: an atomic replace (write temp, rename) within one mtime tick.
Stamp = tuple[str, int, int, int]


def _stamp(name: str, st: os.stat_result) -> Stamp:
    return (name, st.st_mtime_ns, st.st_size, st.st_ino)


@dataclass(frozen=True)
class Reading:
    """What one read of a job source gave.

    Attributes:
        jobs: the jobs, in file name order, then file order.
        problems: why jobs were left out (a directory's only), one line each.
        rejected: how many jobs were left out (a file that cannot be read counts as one).
        files: the job files read.
    """

    jobs: tuple[Job, ...]
    problems: tuple[str, ...] = ()
    rejected: int = 0
    files: int = 1


class JobReader:
    """Reads a job file or a directory of job files, again only where it changed.

    Args:
        path: the job file or directory.
        traffic: require the traffic keys (as :func:`~ibqos.jobs.jobfile.parse_jobs`).
    """

    def __init__(self, path: Path | str, *, traffic: bool = False) -> None:
        self.path = Path(path)
        self.traffic = traffic
        # file name -> its last read: the version, or why it could not be read
        self._versions: dict[str, tuple[Stamp, Version | JobsError]] = {}
        self._good: dict[str, Version] = {}  # file name -> its last version that parsed

    def signature(self) -> tuple[Stamp, ...] | str:
        """The stamps of the job file, or of the directory's job files (which files there
        are, each one's version); an error text if they cannot be read.  Equal
        signatures: nothing to read again."""
        try:
            st = self.path.stat()
            if not stat.S_ISDIR(st.st_mode):
                return (_stamp(self.path.name, st),)
            return tuple(_stamp(f.name, f.stat()) for f in job_files(self.path))
        except OSError as err:
            return f"{type(err).__name__}: {err.strerror or err}"

    def read(self) -> Reading:
        """Read what changed since the last read.

        Raises:
            JobsError: a job file that cannot be read or has any problem (every problem,
                one per line); a directory that cannot be listed.
        """
        reading = self._read_directory() if self.path.is_dir() else self._read_file()
        log.debug(
            "loaded %d jobs from %d files under %s", len(reading.jobs), reading.files, self.path
        )
        return reading

    def _version(self, file: Path) -> Version:
        """*file*'s version: the one read before if its stamp did not change.

        Raises:
            JobsError: the file cannot be read or parsed (this version: again without
                reading it).
        """
        try:
            stamp = _stamp(file.name, file.stat())
        except OSError:
            stamp = (file.name, -1, -1, -1)  # read_version says why
        last = self._versions.get(file.name)
        if last is not None and last[0] == stamp:
            if isinstance(last[1], JobsError):
                raise last[1]
            return last[1]
        try:
            version = read_version(file, self._good.get(file.name), traffic=self.traffic)
        except JobsError as err:
            self._versions[file.name] = (stamp, err)
            raise
        self._versions[file.name] = (stamp, version)
        if not version.whole:
            self._good[file.name] = version
        return version

    def _read_file(self) -> Reading:
        name = self.path.name
        self._versions = {k: v for k, v in self._versions.items() if k == name}
        self._good = {k: v for k, v in self._good.items() if k == name}
        version = self._version(self.path)
        if version.problems:
            raise JobsError("\n".join(version.problems)) from version.cause
        return Reading(tuple(job for _, job in version.jobs))

    def _read_directory(self) -> Reading:
        try:
            files = job_files(self.path)
        except OSError as err:
            raise JobsError(f"{self.path}: cannot list job directory") from err
        names = {f.name for f in files}
        # files that are gone end their jobs and are forgotten
        self._versions = {k: v for k, v in self._versions.items() if k in names}
        self._good = {k: v for k, v in self._good.items() if k in names}
        problems: list[str] = []
        rejected = 0
        jobs: list[Job] = []
        first: dict[str, str] = {}  # job id -> where it was first found
        for file in files:
            try:
                version = self._version(file)
                if version.whole:
                    raise JobsError("\n".join(version.problems))
            except JobsError as err:
                version = self._good.get(file.name, Version(()))
                kept = f"keeping its previous {len(version.jobs)} jobs" if version.jobs else ""
                problems.append(f"{err}".replace("\n", "; ") + f" ({kept or 'no jobs from it'})")
                rejected += 0 if version.jobs else 1
            else:
                problems += [f"{line} (job left out)" for line in version.problems]
                rejected += version.rejected
            for where, job in version.jobs:
                if job.id in first:
                    problems.append(
                        f"{where}.id: duplicate id {job.id!r} (first used at {first[job.id]})"
                        " (job left out)"
                    )
                    rejected += 1
                    continue
                first[job.id] = where
                jobs.append(job)
        return Reading(tuple(jobs), tuple(problems), rejected, len(files))
