"""The RPC backend: llama.cpp's CPU backend plus ggml-rpc, which offloads to ``rpc-server`` processes on
this or other machines (``llama-server --rpc host:port,…``). It builds the RPC server too — the target is
``ggml-rpc-server`` in llama.cpp since late 2025 (``tools/rpc``), ``rpc-server`` before — and verification
refuses an rpc build without it. Without ``--rpc`` its builds run on the CPU; ``bench --rpc`` places layers
on the RPC devices (:mod:`llamaforge.llamacpp.rpc`)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from .base import Backend, DoctorCheck, HostFacts, Problem

if TYPE_CHECKING:
    from .toolchain import Toolchain

#: the RPC server's target and binary, newest name first
RPC_SERVER_NAMES = ("ggml-rpc-server", "rpc-server")


class Rpc(Backend):
    name = "rpc"
    label = "RPC"
    device_kind = "remote"
    flags = MappingProxyType({"GGML_RPC": "ON"})
    extra_targets = RPC_SERVER_NAMES
    rank = 60
    note = "devices appear only with --rpc host:port (an rpc-server here or elsewhere): bench --rpc"

    def doctor_checks(self, tc: Toolchain, host: HostFacts) -> DoctorCheck:
        """Its builds run here on the CPU; its devices are rpc-servers, none of them listed here."""
        return DoctorCheck(True, reasons=[*host.cpu_warnings, ("no RPC device without --rpc host:port", self.note)])

    def binary_checks(self, binaries: Mapping[str, object]) -> tuple[dict, list[Problem]]:
        """The RPC server must have been built: its name is recorded (``capabilities.rpc_server``)."""
        name = next((n for n in RPC_SERVER_NAMES if n in binaries), None)
        if name is None:
            return {}, [("the rpc build has no RPC server binary (ggml-rpc-server / rpc-server)",
                         "rebuild: `llamaforge build --backends rpc --rebuild` (GGML_RPC=ON builds tools/rpc)")]
        return {"rpc_server": name}, []

    def describe_capabilities(self, caps: Mapping) -> list[str]:
        return [f"RPC server: {caps['rpc_server']}"] if caps.get("rpc_server") else []


RPC = Rpc()
