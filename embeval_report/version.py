"""The package version (one place; ``embeval_report.__version__`` re-exports it)."""
__version__ = "0.1.0"
