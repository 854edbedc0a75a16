"""Ingestion: a run folder's rank files, timeline events, Slurm energy into the store (the
orchestrator's process only). Imports ``store``, ``stats`` and ``analysis`` (the binding audit), never report or publish.
"""
