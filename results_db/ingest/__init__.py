"""Ingestion: a run folder's rank files (``rank_files``: JSON lines a block at a time; ``rank_events``:
a rank's binary timeline stream), timeline events into Parquet parts (``event_sink``) and their
per-step measures (``timeline``), Slurm energy, into the store (the orchestrator's process only).
Imports ``store``, ``stats`` and ``analysis`` (the binding audit), never report or publish.
"""
