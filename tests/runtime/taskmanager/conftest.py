"""The TaskManager tests import their shared helpers (tm_support.py) from this directory."""

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
