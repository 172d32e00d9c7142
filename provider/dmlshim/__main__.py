"""``python -m dmlshim``."""

from __future__ import annotations

import sys

from .cli.main import main

sys.exit(main())
