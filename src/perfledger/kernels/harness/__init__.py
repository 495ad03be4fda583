"""The kernel harness: timing protocol, correctness checks, stopping rules, examples."""
