"""The click skin (and the MCP server): commands that parse, call the workflow and render.

``main`` (the console script, :func:`perfledger.commands.cli.app.main`) loads on first access so
that importing one CLI module does not import the whole command line.
"""

from __future__ import annotations

from typing import Any

from perfledger.commands.cli.app import main


def __getattr__(name: str) -> Any:
    """Return :func:`perfledger.commands.cli.app.main` for ``main`` (installs whose console script
    still names ``perfledger.commands.cli:main``); AttributeError otherwise."""
    if name == "main":
        return main
    raise AttributeError(name)
