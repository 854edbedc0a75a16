"""``python -m orchestrator.cli``: the ``scalestudy`` command (a detached sweep's driver runs so)."""

from . import run

run()
