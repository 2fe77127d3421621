"""The SDK's version, sent in Hello as ``wfhost-python/<version>``."""

__version__ = "0.1.0"
