"""The MCP adapter (``perfledger mcp``; SPEC.md section 6): perfledger's tools over the Model
Context Protocol, calling the application layer (:mod:`perfledger.app`) in this process; the
server and its tools are :mod:`perfledger.commands.mcp.server`."""

from __future__ import annotations

from perfledger.app.command_lines import tool_call, translate_hints
from perfledger.commands.mcp.server import INSTRUCTIONS, READ_TOOLS, Tools, build_server, serve

__all__ = [
    "INSTRUCTIONS",
    "READ_TOOLS",
    "Tools",
    "build_server",
    "serve",
    "tool_call",
    "translate_hints",
]
