"""The command line: Typer commands by concern, put on one app (app.py); the progress
view; GitHub annotations.

`serve-pipeline = pipeline.cli:main` is the console script."""

from pipeline.cli.app import main

__all__ = ["main"]
