"""The request models' documentation: field descriptions and example requests."""
