"""The job sources on big inputs: ``python -m bench.jobs.big_file``."""
