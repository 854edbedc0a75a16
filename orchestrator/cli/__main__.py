"""``python -m orchestrator.cli``: the ``scalestudy`` command (a detached sweep's driver runs so)."""

import sys

from . import main

sys.exit(main())
