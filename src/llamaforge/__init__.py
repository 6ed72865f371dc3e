"""llamaforge: build llama.cpp at pinned commits, verify it, benchmark MoE offload, compare and bisect."""

__version__ = "0.3.0.dev0"   # the newest CHANGELOG.md heading (.dev0: unreleased); pyproject.toml reads it
