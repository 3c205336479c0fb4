pytest_plugins = ["ibqos.lab.pytest_plugin"]
