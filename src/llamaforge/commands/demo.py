"""demo commands (filled in by its issue)."""

TASKS: list = []
