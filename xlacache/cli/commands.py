"""Store commands: inspect, stats, prune, verify, rm, export, import."""

import typer


def register(app: typer.Typer) -> None:
    """Add the store commands to the app."""
