"""The kernel-iteration loop (R19-R25): its requests, rules, deciders, preflight and runs."""
