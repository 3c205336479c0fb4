"""The adaptive agent in the closed loop, on labs with fluid contention:
``python -m bench.closedloop.bench``."""
