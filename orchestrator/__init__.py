"""scalestudy's orchestrator: everything that runs on the login node.

Rooms by job: ``cli`` (the commands), ``sweep`` (one sweep's life), ``pools`` (where runs
execute), ``mpi`` (one run's MPI job), ``site`` (the site as data), ``terminal`` (what the
commands print). ``errors`` and ``driver_timing`` are shared by all of them.
"""
