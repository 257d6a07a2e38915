"""specscope: simulator and analytical design-space explorer for speculative decoding."""

__version__ = "0.1.0"
