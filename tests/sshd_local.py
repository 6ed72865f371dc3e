"""A real OpenSSH server on 127.0.0.1 for the fleet tests: own host key, own user key, own port, no
system configuration read or changed (``-f /dev/null`` plus ``-o`` options). A child process in its
own process group, killed when the context ends."""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def sshd_binary() -> str | None:
    return shutil.which("sshd") or next((p for p in ("/usr/sbin/sshd", "/usr/local/sbin/sshd") if os.access(p, os.X_OK)),
                                        None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Sshd:
    port: int
    user: str
    user_key: Path
    log: Path


@contextlib.contextmanager
def local_sshd(tmp: Path) -> Iterator[Sshd]:
    exe = sshd_binary()
    if exe is None:
        raise FileNotFoundError("sshd")
    tmp.mkdir(parents=True, exist_ok=True)
    for name in ("host_key", "user_key"):
        for old in (tmp / name, tmp / f"{name}.pub"):
            old.unlink(missing_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / name)], check=True)
    (tmp / "authorized_keys").write_text((tmp / "user_key.pub").read_text())
    os.chmod(tmp / "authorized_keys", 0o600)
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)   # sshd's privilege-separation folder
    port = free_port()
    log = tmp / "sshd.log"
    args = [exe, "-D", "-e", "-f", "/dev/null", "-p", str(port), "-h", str(tmp / "host_key"),
            "-o", "ListenAddress=127.0.0.1", "-o", f"AuthorizedKeysFile={tmp / 'authorized_keys'}",
            "-o", "PasswordAuthentication=no", "-o", "KbdInteractiveAuthentication=no", "-o", "UsePAM=no",
            "-o", "StrictModes=no", "-o", f"PidFile={tmp / 'sshd.pid'}", "-o", "PermitRootLogin=prohibit-password",
            "-o", "Subsystem=sftp internal-sftp", "-o", "MaxStartups=50", "-o", "MaxSessions=50", "-o", "LogLevel=ERROR"]
    with log.open("wb") as lf:
        p = subprocess.Popen(args, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if p.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not start: {log.read_text(errors='replace')[-500:]}")
            time.sleep(0.1)
        yield Sshd(port=port, user=getpass.getuser(), user_key=tmp / "user_key", log=log)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, 15)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, 9)
