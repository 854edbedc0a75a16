"""The store: the schema and its migrations, connecting, runs' life cycle, the run rows and queries
as DataFrames, model fits, timeline event files, study copies. Imports only ``stats`` and ``workloads``'s
run contract (never analysis, ingest, report or publish).
"""
