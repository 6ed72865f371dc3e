"""The CPU backend: llama.cpp's own CPU code, nothing beyond the common flags."""

from __future__ import annotations

from .base import Backend


class Cpu(Backend):
    name = "cpu"
    label = "CPU"
    device_kind = "cpu"
    demo = "always"
    rank = 90
    color = "#2c6fbb"


CPU = Cpu()
