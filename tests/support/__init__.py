"""What the test suites share: an agent on a lab, recorded fabrics' rates, the
dashboards' queries, systemd units, the repository's paths."""
