"""The agent's job file source on a big job file: time per change and memory.

Usage: python -m bench.jobs.big_file [--jobs 100000] [--changes 3] [--form file,json,dir]

Per form, a job source (:class:`ibqos.attribute.jobmap.FileJobSource`, as the agent builds
it for ``jobs.path``) reads the jobs once, then the jobs change *changes* times (one job
ends, one starts: a new id on the ended job's hosts, as a scheduler's file would change)
and the source is asked again after each.  Timed: the first read and each read after a
change (what the agent's loop waits for); the loop's own look at an unchanged source
(``unchanged``), too.  The resident set size (``VmRSS``) is read before the first read,
after it, and after the last change.

Forms: ``file`` is one YAML file of every job, ``json`` the same as JSON, ``dir`` a
directory of one YAML file per job (a Slurm prolog's form; writing 100k files takes a
while, so ``--dir-jobs`` bounds it, 10k by default).  Each job runs on 4 hosts of its own,
declares a pattern and a name, as docs/jobs.md's example.  Wall-clock times on a shared
machine: read the orders of magnitude.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from bench.machine import machine
from bench.report import say, table
from ibqos.attribute.jobmap import FileJobSource

FORMS = ("file", "json", "dir")


def rss_mb() -> float:
    """This process's resident set size, MiB (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def entry(i: int) -> dict[str, object]:
    """Job *i* in job file form: 4 hosts of its own, a pattern, a name."""
    return {
        "id": str(100000 + i),
        "name": "lammps",
        "nodes": f"cn[{4 * i:06d}-{4 * i + 3:06d}]",
        "pattern": "ring",
    }


def write(path: Path, form: str, entries: list[dict[str, object]]) -> None:
    """Write the job source of *form* at *path* (atomically per file, as a scheduler would)."""
    if form == "dir":
        path.mkdir(exist_ok=True)
        want = {f"{e['id']}.yaml" for e in entries}
        for old in path.iterdir():
            if old.name not in want:
                old.unlink()
        for e in entries:
            file = path / f"{e['id']}.yaml"
            if not file.exists():
                file.write_text(yaml.safe_dump({"jobs": [e]}, sort_keys=False))
        return
    if form == "json":
        text = json.dumps({"jobs": entries})
    else:
        text = yaml.safe_dump({"jobs": entries}, sort_keys=False, width=200)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def run(form: str, n: int, changes: int) -> list[str]:
    """One form: its table row."""
    entries = [entry(i) for i in range(n)]
    with tempfile.TemporaryDirectory(prefix="ibqos-bench-jobs-") as tmp:
        path = Path(tmp) / {"file": "jobs.yaml", "json": "jobs.json", "dir": "jobs.d"}[form]
        write(path, form, entries)
        source = FileJobSource(path)
        rss0 = rss_mb()
        t0 = time.perf_counter()
        jobs = source.jobs()
        first = time.perf_counter() - t0
        rss1 = rss_mb()
        assert len(jobs) == n, (len(jobs), n)
        t0 = time.perf_counter()
        source.jobs()
        unchanged = time.perf_counter() - t0
        per_change = []
        for k in range(changes):
            # one job ends, one starts on its hosts
            ended = entries.pop(k * 7 % len(entries))
            entries.append({**ended, "id": str(900000 + k)})
            write(path, form, entries)
            time.sleep(0.01)  # a new mtime even on a coarse clock
            t0 = time.perf_counter()
            jobs = source.jobs()
            per_change.append(time.perf_counter() - t0)
            assert len(jobs) == n and jobs[-1].id == str(900000 + k), "change not seen"
        rss2 = rss_mb()
        say(f"{form}: first {first:.2f} s, per change {per_change}")
    return [
        form,
        f"{n}",
        f"{first:.2f}",
        f"{statistics.median(per_change):.2f}",
        f"{unchanged * 1e3:.1f}",
        f"{rss0:.0f}",
        f"{rss1:.0f}",
        f"{rss2:.0f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--dir-jobs", type=int, default=10_000)
    parser.add_argument("--changes", type=int, default=3)
    parser.add_argument("--form", default=",".join(FORMS))
    args = parser.parse_args()
    rows = []
    for form in args.form.split(","):
        if form not in FORMS:
            parser.error(f"--form: {form!r} is not one of {', '.join(FORMS)}")
        rows.append(run(form, args.dir_jobs if form == "dir" else args.jobs, args.changes))
    print(f"Machine: {machine()}\n")
    columns = [
        "form",
        "jobs",
        "first read s",
        "per change s",
        "unchanged ms",
        "RSS before MB",
        "after first MB",
        "after changes MB",
    ]
    print("\n".join(table(columns, rows, "lr")))


if __name__ == "__main__":
    main()
