"""ibqos: an InfiniBand QoS companion agent for OpenSM."""

__version__ = "0.3.0"
__all__ = ["__version__"]
