"""The package version: always the advlock extension version it was released with (scripts/lint.sh
checks it against Cargo.toml; pyproject.toml reads it from here)."""

__version__ = "0.5.0"
