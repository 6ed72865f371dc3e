"""Which machine measured a launch: a short stable id, recorded with every launch of a sweep.

Two VMs of one image can share a host name (both were "vm" on the lent H200s), so the id is derived
from what does differ (sha256 of the parts found, first 12 hex digits):

* ``/proc/sys/kernel/random/boot_id`` — new at every boot: a reboot or another VM changes the id;
* ``/etc/machine-id`` — the OS install (absent in some containers);
* the NVIDIA GPU UUIDs (NVML, :mod:`llamaforge.gpu`) — another card changes it.

The same digest without the boot id is kept as ``extra.stable`` (:func:`stable_id`): a performance history
spans reboots of one machine and compares machines by it (two clones of one image without GPUs may share it).

Only the hash is stored, never the raw ids; the host name is kept for display. :data:`OVERRIDE_ENV`
(``LLAMAFORGE_MACHINE_ID``) replaces the derived id: it exists for tests that play "another machine",
and for a user who wants two boots of one box to count as one machine (the parts then say ``override``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .gpu import gpu_uuids
from .records import LaunchRecord, MachineRecord

OVERRIDE_ENV = "LLAMAFORGE_MACHINE_ID"
BOOT_ID = Path("proc/sys/kernel/random/boot_id")
MACHINE_ID = Path("etc/machine-id")


def _read(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return text or None


def identify(root: Path = Path("/"), *, nvml_module: Any = None, env: Mapping[str, str] | None = None,
             host: str | None = None) -> MachineRecord:
    """This machine's identity, read under ``root`` (tests pass a folder with fake /proc files and a fake
    pynvml as ``nvml_module``). :data:`OVERRIDE_ENV` in ``env`` (default: the process's) wins."""
    env = os.environ if env is None else env
    host = host if host is not None else platform.node()
    override = (env.get(OVERRIDE_ENV) or "").strip()
    if override:
        return MachineRecord(id=override[:64], host=host, parts=["override"])
    parts: list[tuple[str, str]] = []
    for name, rel in (("boot_id", BOOT_ID), ("machine_id", MACHINE_ID)):
        v = _read(root / rel)
        if v:
            parts.append((name, v))
    uuids = gpu_uuids(nvml_module)
    if uuids:
        parts.append((f"gpu_uuids×{len(uuids)}", ",".join(sorted(uuids))))
    if not parts:   # nothing readable: the host name is all there is (and says so)
        parts.append(("host", host))
    digest = hashlib.sha256("\n".join(f"{k}={v}" for k, v in parts).encode()).hexdigest()[:12]
    lasting = [(k, v) for k, v in parts if k != "boot_id"]
    stable = hashlib.sha256("\n".join(f"{k}={v}" for k, v in lasting).encode()).hexdigest()[:12] \
        if lasting and lasting != parts else None
    return MachineRecord(id=digest, host=host, parts=[k for k, _v in parts], stable=stable)


def stable_id(rec: MachineRecord | None) -> str | None:
    """The id without the boot: what stays the same across reboots of one machine (its OS install and GPUs;
    ``stable``), else the id itself. A history kept across nights compares machines by this."""
    if rec is None:
        return None
    return str(rec.stable or rec.id) if rec.id else None


@functools.cache
def _derived() -> MachineRecord:
    return identify(env={})


def current() -> MachineRecord:
    """The machine running this process (derived once per process; the override is read every time)."""
    if (os.environ.get(OVERRIDE_ENV) or "").strip():
        return identify()
    return MachineRecord.from_json(_derived().to_json())


def launch_machines(launches: Iterable[LaunchRecord]) -> Counter[str]:
    """Launches per machine id (``unknown`` for launches stored before machines were recorded)."""
    return Counter(r.machine_id for r in launches)


def hosts_of(launches: Iterable[LaunchRecord]) -> dict[str, str]:
    """Machine id → host name, as recorded in the launches."""
    out: dict[str, str] = {}
    for r in launches:
        if r.machine and r.machine.id and r.machine.host:
            out.setdefault(r.machine.id, r.machine.host)
    return out


def mixed_note(counts: Mapping[str, int]) -> str | None:
    """``launches from 2 machines`` when a point's launches come from more than one machine, else None."""
    return f"launches from {len(counts)} machines" if len(counts) > 1 else None


def describe_counts(counts: Mapping[str, int], hosts: Mapping[str, str] | None = None) -> str:
    """``a1b2c3d4e5f6 (vm): 10, 0f9e8d7c6b5a (vm): 10`` — launches per machine, most first."""
    hosts = hosts or {}
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{m}" + (f" ({hosts[m]})" if m in hosts else "") + f": {n}" for m, n in ranked)
