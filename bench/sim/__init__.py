"""The contention simulator: its speed (``python -m bench.sim.bench``), the tuner's
prediction (``bench.sim.predict``), the QoS policies in its fluid model
(``bench.sim.eval``) and the fluid model against the packet model
(``bench.sim.validate``)."""
