"""The RPC backend: llama.cpp's CPU backend plus ggml-rpc, which offloads to ``rpc-server`` processes on
other machines (``--rpc host:port``). It builds ``rpc-server`` too; without ``--rpc`` its builds run on the
CPU. Placing layers on RPC devices is issue 43's."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from .base import Backend, DoctorCheck, HostFacts

if TYPE_CHECKING:
    from .toolchain import Toolchain


class Rpc(Backend):
    name = "rpc"
    label = "RPC"
    device_kind = "remote"
    flags = MappingProxyType({"GGML_RPC": "ON"})
    extra_targets = ("rpc-server",)
    rank = 60
    note = "devices appear only with --rpc host:port (an rpc-server elsewhere); placing on them is issue 43's"

    def doctor_checks(self, tc: Toolchain, host: HostFacts) -> DoctorCheck:
        """Its builds run here on the CPU; its devices are other machines' rpc-servers, none of them listed here."""
        return DoctorCheck(True, reasons=[*host.cpu_warnings, ("no RPC device without --rpc host:port", self.note)])


RPC = Rpc()
