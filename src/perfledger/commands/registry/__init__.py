"""The operation registry (name -> request model, decider, event kind) and its example requests:
above the workflow and the loop, which it binds, and below the CLI, MCP server and auditor."""
