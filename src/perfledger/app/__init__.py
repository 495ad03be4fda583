"""The application layer: one function per use case, taking a msgspec request and returning a msgspec result; adapters (CLI, MCP) parse, call and render."""
