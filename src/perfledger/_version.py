"""The package version (one place; ``perfledger.__version__`` and the CLI read it here)."""

__version__ = "0.1.0"
