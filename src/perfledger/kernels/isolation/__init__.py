"""Subject isolation: the worker process, its protocol, and the reveal channel."""
