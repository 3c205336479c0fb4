"""Real applications' communication matrices, as jobs of the ``matrix`` pattern.

The matrices are mpiP's rank-to-rank byte counts of proxy applications run at 64 ranks,
recorded under ``tests/data/apps/`` (:data:`APPS_DIR`; ``SOURCE.md`` there names the
repository, commit, reports and licence).  A file holds one ``source target bytes`` line
per rank pair that exchanged bytes; ``#`` starts a comment.

:func:`app_job` turns one into a job: the ranks folded onto the job's hosts in rank order,
``ranks / hosts`` consecutive ranks per host (Slurm's default block distribution), the bytes
between ranks on one host dropped (they do not cross the fabric), and the host-to-host
bytes the weights of the ``matrix`` pattern.  The pattern keeps each row's shape (who a
host sends to, in what shares); every host sends the job's rate while communicating
(:func:`ibqos.attribute.patterns.traffic_matrix`), which the caller chooses with the
phases: the reports say how many bytes, not at what rate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from bench import ROOT
from ibqos.jobs.model import Job

APPS_DIR = ROOT / "tests" / "data" / "apps"
#: the recorded applications, by file stem
APPS = ("amg2013", "cloverleaf", "lulesh", "minife", "cg", "mg", "miniamr", "minimd")
#: ranks of every recorded run
RANKS = 64
#: significant digits the job's weights keep (a job file stays readable)
DIGITS = 4

FloatArray = npt.NDArray[np.float64]


def parse_pairs(text: str, source: str = "<pairs>") -> list[tuple[int, int, int]]:
    """The ``(source rank, target rank, bytes)`` lines of a pairs file, in file order.

    Raises:
        ValueError: a line that is not three whole numbers, a negative one, or a rank
            sending to itself.
    """
    out = []
    for k, line in enumerate(text.splitlines(), 1):
        body = line.split("#", 1)[0].split()
        if not body:
            continue
        try:
            a, b, n = (int(x) for x in body)
        except ValueError:
            raise ValueError(
                f"{source}:{k}: expected 'source target bytes', got {line!r}"
            ) from None
        if min(a, b, n) < 0 or a == b:
            raise ValueError(f"{source}:{k}: {line!r}: ranks and bytes of 0 or more, two ranks")
        out.append((a, b, n))
    return out


def rank_matrix(pairs: Sequence[tuple[int, int, int]], ranks: int = RANKS) -> FloatArray:
    """Bytes from rank i (row) to rank j (column), *ranks* square.

    Raises:
        ValueError: a rank at or beyond *ranks*, or a pair given twice.
    """
    m = np.zeros((ranks, ranks))
    for a, b, n in pairs:
        if a >= ranks or b >= ranks:
            raise ValueError(f"rank pair {a} {b}: expected ranks below {ranks}")
        if m[a, b]:
            raise ValueError(f"rank pair {a} {b}: given twice")
        m[a, b] = n
    return m


def load(app: str) -> FloatArray:
    """The recorded rank matrix of *app* (:data:`APPS`), bytes.

    Raises:
        ValueError: an unknown application.
    """
    if app not in APPS:
        raise ValueError(f"application {app!r}: expected one of {', '.join(APPS)}")
    path = APPS_DIR / f"{app}.pairs"
    return rank_matrix(parse_pairs(path.read_text(), str(path)))


def fold(m: FloatArray, hosts: int) -> FloatArray:
    """*m* (ranks square) folded onto *hosts* in rank order: rank r on host
    ``r // (ranks / hosts)``; bytes within a host dropped.

    Raises:
        ValueError: *hosts* not a divisor of the ranks, or below 2.
    """
    ranks = m.shape[0]
    if hosts < 2 or ranks % hosts:
        raise ValueError(f"{ranks} ranks on {hosts} hosts: expected a divisor of the ranks, 2+")
    per = ranks // hosts
    out = m.reshape(hosts, per, hosts, per).sum(axis=(1, 3))
    np.fill_diagonal(out, 0.0)
    return np.asarray(out, dtype=np.float64)


def weights(m: FloatArray) -> tuple[tuple[float, ...], ...]:
    """*m* scaled to its largest entry and rounded to :data:`DIGITS` significant digits,
    as a job's ``matrix``."""
    top = float(m.max())
    if top <= 0:
        raise ValueError("the matrix carries no bytes between hosts")
    return tuple(tuple(float(f"{x / top:.{DIGITS}g}") for x in row) for row in m)


def app_job(
    jid: str,
    app: str,
    nodes: Sequence[str],
    rate_bytes_per_s: float,
    duty: float,
    period_s: float,
) -> Job:
    """A job of the ``matrix`` pattern from *app*'s recorded matrix folded onto *nodes*
    (sorted, as a job's nodes are: the first host gets the first ranks); *rate_bytes_per_s*: each
    host's rate while communicating; *duty*, *period_s*: its phases (share, seconds)."""
    m = weights(fold(load(app), len(nodes)))
    return Job(
        jid,
        tuple(sorted(nodes)),
        "matrix",
        rate_bytes_per_s,
        duty,
        period_s,
        name=app,
        matrix=m,
    )


def job_dict(job: Job) -> dict[str, object]:
    """*job* as a job file's entry (the lab's and ``ibqos simulate``'s form), node list
    folded as a node set."""
    return {k: v for k, v in job.to_dict().items() if v is not None}


#: the named mixes of real applications: (name, XGFT, placement, jobs as (app, hosts,
#: share of the host link while communicating, duty, period in seconds)).  The phases are
#: chosen, not measured (the reports give bytes, not times): a heavy, a moderate and a
#: light application and one in between, with iterations of 5-20 ms.
APP_MIXES: tuple[tuple[str, str, str, tuple[tuple[str, int, float, float, float], ...]], ...] = (
    (
        "apps LULESH+CG+AMG+miniFE 2L 4:1",
        "2;16,4;1,4",
        "interleaved",
        (
            ("lulesh", 16, 0.8, 0.5, 0.010),
            ("cg", 16, 0.6, 0.4, 0.005),
            ("amg2013", 16, 0.3, 0.3, 0.020),
            ("minife", 16, 0.7, 0.35, 0.008),
        ),
    ),
    (
        "apps AMG+CloverLeaf+miniMD 2L 8 leaves 4:1",
        "2;8,8;1,2",
        "interleaved",
        (
            ("amg2013", 32, 0.85, 0.5, 0.020),
            ("cloverleaf", 16, 0.6, 0.35, 0.010),
            ("minimd", 16, 0.3, 0.2, 0.010),
        ),
    ),
    (
        "apps MG+miniAMR+LULESH+CG 3L 4:1",
        "3;4,4,4;1,2,2",
        "fragmented",
        (
            ("mg", 16, 0.7, 0.5, 0.015),
            ("miniamr", 16, 0.5, 0.4, 0.010),
            ("lulesh", 16, 0.8, 0.3, 0.010),
            ("cg", 16, 0.4, 0.3, 0.005),
        ),
    ),
)
