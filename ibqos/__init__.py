"""ibqos: an InfiniBand QoS companion agent for OpenSM."""

__version__ = "0.1.0"
__all__ = ["__version__"]
