"""The results database: schema, ingestion of metrics files, and queries as DataFrames.

Only the orchestrator process writes (compute nodes never open the database); it
never launches anything.
"""

from .store import connect, resolve_db_url

__all__ = ["connect", "resolve_db_url"]
