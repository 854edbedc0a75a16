"""The MPI training program: one process per rank, driven only by a spec file.

It imports neither ``orchestrator`` nor ``results_db``: its whole contract with the
rest of scalestudy is the spec it reads and the metrics files it writes, so it runs
by hand as ``mpiexec -n 4 python -m workloads spec.json``.
"""
