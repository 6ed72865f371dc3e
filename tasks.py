"""Invoke entry point: `inv --list`. The tasks live in src/llamaforge/commands/ and are the same
collection as the installed `llamaforge` program."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "src"))

from llamaforge.cli import ns  # noqa: E402

__all__ = ["ns"]
