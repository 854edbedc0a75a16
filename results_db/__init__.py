"""The results database, in rooms by kind of work (``docs/explanation/layout.md``): ``stats`` (pure)
under ``store`` (schema, migrations, runs, queries) under ``analysis``, over which sit ``ingest`` and
``report``, and ``publish`` on top. Only the orchestrator process writes (compute nodes never open the
database); it never launches anything.
"""

from .store.connect import connect, resolve_db_url

__all__ = ["connect", "resolve_db_url"]
