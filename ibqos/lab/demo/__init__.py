"""The demo (``make demo``): what ibqos does, watched on a simulated fabric.

It brings a lab up (real ibsim + OpenSM, ftree routing, QoS on) with a mixed job workload
(``examples/demo-jobs.yaml``: one heavy all-to-all across the leaves, a moderate stencil,
light jobs; more jobs than lanes), shows the fabric and its counters, what the agent would
write (a dry run), then runs the agent (``ibqos run``) for a few minutes while jobs start,
end and turn heavy.  Every round prints what happened, the agent's log, what it measured
and decided (``ibqos status``), what OpenSM programmed into a spine switch (read back with
smpquery), what a real Prometheus scraped from the agent's metrics endpoint (the queries of
the shipped Grafana dashboards), and how fast each job iterates.

The lab runs fluid contention (``--contention fluid``, docs/lab.md): the jobs share links
the way the lanes programmed on the switches say (read back from the fabric through the
SA), so ibqos's plans change the jobs' progress; the lab serves each job's iterations per
second on its own metrics endpoint.  Once the mix holds still, the agent tunes: it tries
the favour-light law and two other setups on the fabric, a few sweeps each, and keeps the
one the jobs' own counters show them progressing best under (docs/tuning.md); the last
rounds show its trials, its scores and the jobs' progress before and after.  Everything is
taken down at the end, on error and on Ctrl-C.

Run it from a checkout (it reads ``examples/``, ``characterize/`` and ``dashboards/``):
``python -m ibqos.lab.demo``, which ``scripts/demo.sh`` does.  About 3 minutes;
``IBQOS_DEMO_ROUND_S`` (default 12) sets the seconds between two rounds.

Modules: :mod:`~ibqos.lab.demo.story` tells it, section by section and round by round
(what it says, in order); :mod:`~ibqos.lab.demo.stage` does what it shows (the lab, the
agent, Prometheus, the commands); :mod:`~ibqos.lab.demo.views` turns what it reads (the
lab's truth, the agent's state, the switches' tables, Prometheus's answers) into the lines
it prints.
"""
