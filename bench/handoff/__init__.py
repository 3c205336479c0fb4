"""The job-SL server under a burst of questions: ``python -m bench.handoff.bench`` (its
askers run as ``python -m bench.handoff.child``)."""
