"""The package version: always the advlock extension version it was released with (scripts/lint.sh
checks it against Cargo.toml and pyproject.toml)."""

__version__ = "0.6.0"
