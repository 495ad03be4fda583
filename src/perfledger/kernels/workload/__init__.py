"""The workload path: perfledger runs a subject, owns the clock, the inputs and every output."""
