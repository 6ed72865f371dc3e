"""One Fabric ``Connection`` per fleet host, and the only place remote command lines are made.

Fabric's ``Connection.run`` takes a shell command string. Every command here is built from an argument
list with :func:`shlex.join` (each operand quoted), behind ``cd -- DIR &&`` and ``exec env -- NAME=VALUE``
(``--`` before operands), so a value from ``fleet.toml`` or an option can never become shell syntax.
Connection failures become one :class:`FleetError` line naming the host and the fix.

Host keys: Fabric trusts any key (paramiko's AutoAddPolicy, no known_hosts read). Here every
connection (and its gateway) reads the host's ``known_hosts`` file; a key that differs from the
stored one is always refused. An unknown key is refused under ``host_key = "strict"`` (the default,
with the ``ssh-keyscan`` line that adds it) and, under ``"accept-new"``, trusted and appended to the
file (OpenSSH's ``StrictHostKeyChecking=accept-new``).
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import shlex
import socket
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from ..errors import FleetError
from .config import FleetHost, Target

VENV = "venv"


def command_line(argv: Sequence[str], *, cwd: str | None = None, env: dict[str, str] | None = None) -> str:
    """``cd -- CWD && exec env -- K=V ... ARGV`` with every operand quoted (no shell syntax from data)."""
    if not argv:
        raise ValueError("empty command")
    line = ""
    if cwd:
        line += f"cd -- {shlex.quote(cwd)} && "
    if env:
        line += "exec env -- " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " "
    else:
        line += "exec "
    return line + shlex.join([str(a) for a in argv])


_KNOWN_HOSTS_LOCK = threading.Lock()


def fingerprint(key: Any) -> str:
    """OpenSSH's ``SHA256:...`` fingerprint of a paramiko key (what ``ssh-keygen -lf`` prints)."""
    import base64
    import hashlib

    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


def keyscan_line(target: Target, known_hosts: str) -> str:
    """The command that adds ``target``'s host key to ``known_hosts`` (after checking its fingerprint)."""
    port = f"-p {target.port} " if target.port and target.port != 22 else ""
    return f"ssh-keyscan {port}{shlex.quote(target.host)} >> {shlex.quote(known_hosts)}"


class UnknownHostKey(Exception):
    """The server's host key is not in known_hosts and the policy is strict."""

    def __init__(self, hostname: str, key: Any) -> None:
        super().__init__(f"{hostname}: unknown {key.get_name()} host key {fingerprint(key)}")
        self.hostname, self.key = hostname, key


def _policy(host_key: str, known_hosts: str) -> Any:
    import paramiko

    class Strict(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            raise UnknownHostKey(hostname, key)

    class AcceptNew(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            client.get_host_keys().add(hostname, key.get_name(), key)
            line = paramiko.hostkeys.HostKeyEntry([hostname], key).to_line()
            path = Path(known_hosts)
            with _KNOWN_HOSTS_LOCK:   # hosts connect from parallel threads
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                with path.open("a", encoding="utf-8") as f:
                    f.write(line)

    return Strict() if host_key == "strict" else AcceptNew()


def _connection(target: Target, host: FleetHost, gateway: Any = None, timeout: float = 15.0) -> Any:
    from fabric import Connection

    kwargs: dict[str, Any] = {"connect_timeout": timeout}
    if host.identity:
        kwargs["connect_kwargs"] = {"key_filename": [host.identity], "look_for_keys": False, "allow_agent": False}
    conn = Connection(target.host, user=target.user, port=target.port, gateway=gateway, **kwargs)
    if Path(host.known_hosts).is_file():
        conn.client.load_host_keys(host.known_hosts)
    conn.client.set_missing_host_key_policy(_policy(host.host_key, host.known_hosts))
    return conn


def unreachable(host: FleetHost, exc: BaseException) -> FleetError:
    """The one-line error for a host SSH cannot reach or log in to."""
    import paramiko

    what = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, UnknownHostKey):
        via = host.gateway if host.gateway and exc.hostname.strip("[]").split("]:")[0] == host.gateway.host else host.target
        return FleetError(f"host {host.name} ({host.target}): SSH host key of {exc.hostname} is not in {host.known_hosts} "
                          f"(host_key = \"strict\"; it offers {exc.key.get_name()} {fingerprint(exc.key)})",
                          f"check that fingerprint, then add the key: {keyscan_line(via, host.known_hosts)} "
                          f"(or log in once with ssh), or set host_key = \"accept-new\" for the host in fleet.toml")
    if isinstance(exc, paramiko.BadHostKeyException):
        return FleetError(f"host {host.name} ({host.target}): SSH host key of {exc.hostname} CHANGED (now "
                          f"{exc.key.get_name()} {fingerprint(exc.key)}, {host.known_hosts} has "
                          f"{fingerprint(exc.expected_key)}); refused",
                          "if the host was reinstalled, remove the old key (ssh-keygen -R "
                          f"{shlex.quote(exc.hostname)} -f {shlex.quote(host.known_hosts)}) and add the new one; "
                          "otherwise do not connect (someone may be in between)")
    if isinstance(exc, paramiko.AuthenticationException):
        return FleetError(f"host {host.name} ({host.target}): SSH login refused ({what})",
                          "check the user and key (identity = \"...\" in fleet.toml, or ~/.ssh/config)")
    if isinstance(exc, socket.gaierror):
        return FleetError(f"host {host.name} ({host.target}): unknown host name ({what})",
                          "fix target in fleet.toml (or add the alias to ~/.ssh/config)")
    return FleetError(f"host {host.name} ({host.target}) is unreachable ({what})",
                      "check that the machine is up, sshd runs there, and the target/port in fleet.toml")


class Remote:
    """A fleet host over SSH: ``run`` an argument list in its workspace, ``put``/``get`` files."""

    def __init__(self, host: FleetHost, *, timeout: float = 15.0) -> None:
        self.host = host
        gw = _connection(host.gateway, host, timeout=timeout) if host.gateway else None
        self.conn = _connection(host.target, host, gw, timeout)
        self._workspace: str | None = None

    def open(self) -> Remote:
        import paramiko

        try:
            self.conn.open()
        except (OSError, paramiko.SSHException, EOFError, UnknownHostKey) as e:
            raise unreachable(self.host, e) from None
        return self

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Remote:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- paths ---------------------------------------------------------------------------
    @property
    def workspace(self) -> str:
        """The host's workspace as an absolute path (a relative one is under the login's home)."""
        if self._workspace is None:
            ws = self.host.workspace
            if not ws.startswith("/"):
                home = self.run_raw("pwd").stdout.strip() or "."
                ws = posixpath.join(home, ws)
            self._workspace = posixpath.normpath(ws)
        return self._workspace

    def ws(self, *parts: str) -> str:
        return posixpath.join(self.workspace, *parts)

    @property
    def venv_python(self) -> str:
        return self.ws(VENV, "bin", "python")

    @property
    def llamaforge(self) -> str:
        return self.ws(VENV, "bin", "llamaforge")

    def env(self) -> dict[str, str]:
        """The environment of every llamaforge command on the host: workspace, machine name, plain output."""
        return {"LLAMAFORGE_WORKSPACE": self.workspace, "LLAMAFORGE_MACHINE": self.host.machine,
                "NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "160", **self.host.env}

    # ---- running -------------------------------------------------------------------------
    def run_raw(self, line: str, **kw: Any) -> Any:
        """``Connection.run`` of a line made by :func:`command_line` (or a constant); hidden, never raises
        on a non-zero exit."""
        import paramiko

        kw.setdefault("hide", True)
        try:
            return self.conn.run(line, warn=True, in_stream=False, **kw)
        except (OSError, paramiko.SSHException, EOFError) as e:
            raise unreachable(self.host, e) from None

    def run(self, argv: Sequence[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
            stream: IO[str] | None = None, pty: bool = False, check: bool = True, what: str | None = None) -> Any:
        """Run ``argv`` on the host; ``stream`` receives the output as it comes (``pty``: the remote process
        is the session's, so it gets SIGHUP when the connection is lost)."""
        line = command_line(argv, cwd=cwd, env=env)
        kw: dict[str, Any] = {"pty": pty}
        if stream is not None:
            kw.update(hide=False, out_stream=stream, err_stream=stream)
        r = self.run_raw(line, **kw)
        if check and r.exited != 0:
            tail = _last_line(r.stdout + "\n" + r.stderr)
            raise FleetError(f"host {self.host.name}: {what or argv[0]} failed (exit {r.exited}): {tail}",
                             "see the host's output above; fix it there and run the fleet command again")
        return r

    def python_ok(self, python: str) -> str:
        """The host Python's version, or a FleetError when it is missing or older than 3.11."""
        r = self.run([python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"], check=False)
        if r.exited == 127 or not r.stdout.strip():
            raise FleetError(f"host {self.host.name} has no Python at {python!r}",
                             "install Python >= 3.11 there, or set python = \"/path/to/python3\" for the host in fleet.toml")
        ver = r.stdout.strip().splitlines()[-1]
        if tuple(int(x) for x in ver.split(".")[:2]) < (3, 11):
            raise FleetError(f"host {self.host.name}: {python} is Python {ver}, llamaforge needs >= 3.11",
                             "install a newer Python there and set python = \"...\" for the host in fleet.toml")
        return ver

    def agent(self, command: str, *args: str) -> dict:
        """``python -m llamaforge.fleet.agent COMMAND -- ARGS`` in the host's venv: its one JSON line."""
        r = self.run([self.venv_python, "-m", "llamaforge.fleet.agent", command, "--", *args],
                     cwd=self.workspace, env=self.env(), check=False)
        lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
        if r.exited == 127 or (r.exited != 0 and not lines and "No such file" in r.stderr + r.stdout):
            raise FleetError(f"host {self.host.name}: llamaforge is not installed in {self.ws(VENV)}",
                             "run `inv fleet.install` (or `llamaforge fleet.install`)")
        if not lines:
            raise FleetError(f"host {self.host.name}: agent {command} failed: {_last_line(r.stderr + r.stdout)}",
                             "run `inv fleet.install` again; if it persists, run it there by hand to see why")
        out = json.loads(lines[-1])
        if out.get("error"):
            raise FleetError(f"host {self.host.name}: {out['error']}", out.get("fix") or "see the host")
        return out

    def mkdir(self, path: str) -> None:
        self.run(["mkdir", "-p", "--", path], what="mkdir")

    def put(self, local: Path, remote: str) -> None:
        with self._copying(f"copying {local.name} to {remote}"):
            self.conn.put(str(local), remote=remote)

    def get(self, remote: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        with self._copying(f"copying {remote} back"):
            self.conn.get(remote, local=str(local))

    @contextlib.contextmanager
    def _copying(self, what: str) -> Iterator[None]:
        import paramiko

        try:
            yield
        except (OSError, paramiko.SSHException, EOFError) as e:
            raise FleetError(f"host {self.host.name}: {what} over SFTP failed ({' '.join(str(e).split()) or type(e).__name__})",
                             "check the host's sshd has the sftp subsystem and the workspace is writable") from None


def _last_line(text: str) -> str:
    lines = [x.strip() for x in text.replace("\r", "\n").splitlines() if x.strip()]
    errs = [x for x in lines if x.lower().startswith("error")]
    line = (errs or lines or ["(no output)"])[-1]
    return line if len(line) <= 300 else line[:300] + "…"
