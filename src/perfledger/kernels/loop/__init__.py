"""The kernel-iteration loop's measurement backends (SPEC.md section 5, R19-R25): the preflight of a
baseline/reference/dims contract, correctness and paired timing of CUDA kernels through CuPy,
workload runs through the driver, and the processes Nsight Compute profiles. The loop's commands
(:mod:`perfledger.commands.cli.loop`) call these; nothing here imports ``commands``."""
