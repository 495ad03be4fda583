"""The workload path: what perfledger does around each call of a measured subject."""
