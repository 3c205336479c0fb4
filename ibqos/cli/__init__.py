from ibqos.cli.main import main

__all__ = ["main"]
