"""pins / doctor / build / verify commands (issue: foundation)."""

TASKS: list = []
