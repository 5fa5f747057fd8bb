"""``python -m rxagent``: the command line (see :mod:`rxagent.cli`)."""

from __future__ import annotations

import sys

from rxagent.cli import main

sys.exit(main())
