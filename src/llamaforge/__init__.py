"""llamaforge: build llama.cpp at pinned commits, verify it, benchmark MoE offload, compare and bisect."""

__version__ = "0.1.0"
