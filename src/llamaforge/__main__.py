"""``python -m llamaforge`` = the ``llamaforge`` program."""

from .cli import main

main()
