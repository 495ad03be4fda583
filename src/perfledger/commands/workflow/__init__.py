"""The workflow's write path: requests, rules, deciders, the operation registry (SPEC.md section 1)."""
