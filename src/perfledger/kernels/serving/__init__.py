"""The serving client: an HTTP load generator against an OpenAI-compatible endpoint."""
