"""``fleet.toml`` (next to ``pins.toml``): the hosts a fleet command runs on.

::

    [hosts.desk]                       # host name: letters, digits, "-" and "_"
    target = "alice@desk.lan:2222"     # [user@]host[:port], or an alias from ~/.ssh/config
    workspace = "llamaforge"           # remote folder (relative: to the login's home)
    machine = "3090-desk"              # stable machine name stored with every run (default: the host name)
    backends = ["cuda", "vulkan"]      # default backends of fleet.build / fleet.bench on this host
    gateway = "bastion"                # optional jump host (Fabric gateway), same syntax as target
    identity = "~/.ssh/id_ed25519"     # optional private key file
    python = "python3"                 # the host's Python (>= 3.11) that makes the venv
    system_site_packages = false       # let the venv see the host Python's packages
    threads = 8                        # optional: llama.cpp's CPU threads in fleet.history's starts on this
                                       # host (default: its physical cores; set it where hosts share cores)
    host_key = "strict"                # "strict" (default): the host's key must be in known_hosts;
                                       # "accept-new": an unknown key is trusted once and saved there
    known_hosts = "~/.ssh/known_hosts" # the known-hosts file read (and, with accept-new, appended to)
    [hosts.desk.env]                   # extra environment of every llamaforge command on the host:
    CUDA_VISIBLE_DEVICES = "0"         # only ENV_ALLOWED names (llamaforge's settings, GPU selection,
                                       # proxies); what chooses a program (the build root, glslc) is
                                       # set on the host itself (ENV_HOST_ONLY)

The file is written by strangers: every value is checked here (names, targets, paths, environment
names) so nothing reaches a remote shell unvalidated; remote command lines are still built from
argument lists and quoted (:mod:`llamaforge.fleet.remote`).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..backends import names as backend_names
from ..config import read_config_text
from ..errors import ConfigError
from ..variants.icd import refused_why

FLEET_FILE = "fleet.toml"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")
_USER = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}"
_HOST = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,252}"
TARGET_RE = re.compile(rf"^(?:(?P<user>{_USER})@)?(?P<host>{_HOST}|\[[0-9A-Fa-f:.]+\])(?::(?P<port>[0-9]{{1,5}}))?$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
#: what ``[hosts.X.env]`` may set (SECURITY.md): llamaforge's own settings, GPU device selection and
#: proxies. Anything else is refused by name: ``GIT_CONFIG_COUNT``/``KEY_0=core.fsmonitor``/``VALUE_0=CMD``
#: runs CMD at the builder's first ``git status``, ``LD_PRELOAD`` loads a library into every process,
#: ``PATH``, ``PYTHONPATH``, ``BASH_ENV``, ``VK_ICD_FILENAMES``... choose the code that runs.
ENV_ALLOWED = frozenset({
    "LLAMAFORGE_CACHE", "LLAMAFORGE_DATA", "LLAMAFORGE_DEBUG", "LLAMAFORGE_VERBOSE", "LLAMAFORGE_LOCK_DIR",
    "LLAMAFORGE_MACHINE_ID", "LLAMAFORGE_NET_TIMEOUT", "LLAMAFORGE_RESULTS",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "GGML_VK_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
})
#: llamaforge's settings that choose the programs that run on the host (the shader compiler, the build root
#: whose binaries are run, Vulkan headers compiled in, a config folder that moves the build root, the ICD
#: manifests past their limit): the host's own business, never a shared fleet.toml's (issue 41)
ENV_HOST_ONLY = frozenset({"LLAMAFORGE_GLSLC", "LLAMAFORGE_BUILD_ROOT", "LLAMAFORGE_VULKAN_INCLUDE",
                           "LLAMAFORGE_CONFIG", "LLAMAFORGE_ALLOW_ICD"})
#: ``python =``: a Python found on the host's PATH by name, or an absolute path outside the folders anyone can
#: write to (a Python planted there by another user would run as ours)
PYTHON_NAME_RE = re.compile(r"python(?:3(?:\.[0-9]{1,2})?)?")
SHARED_TMP = ("/tmp/", "/var/tmp/", "/dev/shm/", "/run/shm/")
#: set by the fleet itself from the host's table (workspace, machine) or per command (the bench log)
_ENV_FROM_TABLE = {"LLAMAFORGE_WORKSPACE": "workspace", "LLAMAFORGE_MACHINE": "machine",
                   "LLAMAFORGE_FLEET_LOG": None}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HOST_KEYS = {"target", "workspace", "machine", "backends", "gateway", "identity", "python",
              "system_site_packages", "env", "host_key", "known_hosts", "threads"}
HOST_KEY_POLICIES = ("strict", "accept-new")
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
_EXAMPLE = 'e.g. [hosts.desk] target = "alice@desk.lan:22" workspace = "llamaforge"'


@dataclass(frozen=True)
class Target:
    """Where SSH goes: ``host`` (a name, address or ssh-config alias), optional user and port."""

    host: str
    user: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, text: str, where: str) -> Target:
        m = TARGET_RE.match(text) if isinstance(text, str) else None
        if not m:
            raise ConfigError(f"{where}: {text!r} is not an SSH target",
                              "write [user@]host[:port] (letters, digits, '.', '-', '_'), or an alias from ~/.ssh/config")
        port = int(m["port"]) if m["port"] else None
        if port is not None and not 1 <= port <= 65535:
            raise ConfigError(f"{where}: port {port} is out of range", "give a port 1..65535")
        return cls(m["host"].strip("[]"), m["user"], port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return (f"{self.user}@" if self.user else "") + host + (f":{self.port}" if self.port else "")


@dataclass(frozen=True)
class FleetHost:
    name: str
    target: Target
    workspace: str
    machine: str
    backends: tuple[str, ...] = ()
    gateway: Target | None = None
    identity: str | None = None
    python: str = "python3"
    system_site_packages: bool = False
    env: dict[str, str] = field(default_factory=dict)
    host_key: str = "strict"
    known_hosts: str = str(Path(DEFAULT_KNOWN_HOSTS).expanduser())
    threads: int | None = None      # fleet.history's --threads on this host (None: the host's physical cores)


@dataclass
class Fleet:
    hosts: dict[str, FleetHost]
    path: Path | None = None

    def select(self, names: list[str] | None) -> list[FleetHost]:
        """The named hosts (all when ``names`` is empty), in the file's order; an unknown name is an error."""
        if not names:
            return list(self.hosts.values())
        out = []
        for n in names:
            if n not in self.hosts:
                raise ConfigError(f"unknown host {n!r}" + (f" in {self.path}" if self.path else ""),
                                  f"use one of: {', '.join(self.hosts) or '(none defined)'}, or add [hosts.{n}]"
                                  " to fleet.toml")
            if self.hosts[n] not in out:
                out.append(self.hosts[n])
        return out


def _text(v: object, where: str, *, fix: str) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ConfigError(f"{where} must be a non-empty string", fix)
    if _CONTROL.search(v):
        raise ConfigError(f"{where} contains a control character", "remove it (values are single-line strings)")
    return v.strip()


def _remote_path(v: object, where: str) -> str:
    p = _text(v, where, fix="give a folder, e.g. workspace = \"llamaforge\" (relative to the login's home)")
    if p.startswith("-"):
        raise ConfigError(f"{where} {p!r} starts with '-'", "give a folder name or an absolute path")
    if p == "~" or p.startswith("~/"):
        p = p[2:] or "."
    elif p.startswith("~"):
        raise ConfigError(f"{where} {p!r} names another user's home", "give a path under your home or an absolute path")
    return p


def _python(v: object, where: str) -> str:
    p = _text(v, where, fix="give a command name or an absolute path, e.g. python3")
    if not re.fullmatch(r"(/[A-Za-z0-9._+-]+)+|[A-Za-z0-9._+-]+", p) or p.startswith("-"):
        raise ConfigError(f"{where} {p!r} is not a command name or absolute path",
                          "give e.g. python3 or /usr/bin/python3.12 (no spaces, no arguments)")
    if not PYTHON_NAME_RE.fullmatch(p.rsplit("/", 1)[-1]) or "/../" in p + "/" or "/./" in p + "/":
        raise ConfigError(f"{where} {p!r} is not a Python (the program it names runs on the host)",
                          "give python3, python3.12 or an absolute path ending in one, e.g. /usr/bin/python3.12")
    if p.startswith(SHARED_TMP):
        raise ConfigError(f"{where} {p!r} lies in a folder every user can write to",
                          "install Python elsewhere (e.g. /usr/bin, /opt, your home) and name it there")
    return p


def _env_name(k: str, w: str, host: str) -> None:
    if not ENV_NAME_RE.match(k):
        raise ConfigError(f"{w}.env: {k!r} is not an environment variable name",
                          "use letters, digits and '_' (not starting with a digit)")
    if k in _ENV_FROM_TABLE:
        key = _ENV_FROM_TABLE[k]
        raise ConfigError(f"{w}.env: {k} is set by llamaforge itself",
                          f'set {key} = "..." under [hosts.{host}] instead' if key else f"remove {k}")
    if k in ENV_HOST_ONLY:
        raise ConfigError(f"{w}.env: {k} is refused: it chooses a program that runs on the host",
                          "set it on the host itself (its workspace's llamaforge.toml, e.g. [paths] builds, "
                          "or the login's environment), not in fleet.toml")
    if k not in ENV_ALLOWED:
        raise ConfigError(f"{w}.env: {k} is not an allowed variable (it {refused_why(k) or 'could change what runs on the host'})",
                          "use only llamaforge's settings, GPU selection and proxies: " + ", ".join(sorted(ENV_ALLOWED)))


def _env(env: object, w: str, host: str) -> dict[str, str]:
    """``[hosts.X.env]``: allowed names (:data:`ENV_ALLOWED`) with single-line string values."""
    if not isinstance(env, dict):
        raise ConfigError(f"{w}.env must be a table", f"write [hosts.{host}.env] with NAME = \"value\" lines")
    out = {}
    for k, v in env.items():
        _env_name(k, w, host)
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            raise ConfigError(f"{w}.env.{k} must be a string", f"e.g. {k} = \"value\"")
        if _CONTROL.search(str(v)):
            raise ConfigError(f"{w}.env.{k} contains a control character", "remove it")
        out[k] = str(v)
    return out


def _host(name: str, body: object, where: str) -> FleetHost:
    if not NAME_RE.match(name):
        raise ConfigError(f"{where}: host name {name!r} is not allowed",
                          "use letters, digits, '-' and '_' (up to 40, starting with a letter or digit)")
    w = f"{where}: hosts.{name}"
    if not isinstance(body, dict):
        raise ConfigError(f"{w} must be a table", _EXAMPLE)
    unknown = sorted(set(body) - _HOST_KEYS)
    if unknown:
        raise ConfigError(f"{w}: unknown key {unknown[0]!r}", f"use only: {', '.join(sorted(_HOST_KEYS))}")
    if "target" not in body:
        raise ConfigError(f"{w} has no target", _EXAMPLE)
    target = Target.parse(_text(body["target"], f"{w}.target", fix=_EXAMPLE), f"{w}.target")
    gateway = Target.parse(_text(body["gateway"], f"{w}.gateway", fix="e.g. gateway = \"me@bastion\""),
                           f"{w}.gateway") if "gateway" in body else None
    workspace = _remote_path(body.get("workspace", "llamaforge"), f"{w}.workspace")
    machine = body.get("machine", name)
    if not isinstance(machine, str) or not NAME_RE.match(machine):
        raise ConfigError(f"{w}.machine {machine!r} is not allowed",
                          "use letters, digits, '-' and '_' (e.g. machine = \"h200-lab\")")
    backends = body.get("backends", [])
    if isinstance(backends, str) or not isinstance(backends, list):
        raise ConfigError(f"{w}.backends must be a list", "e.g. backends = [\"cuda\", \"vulkan\"]")
    for b in backends:
        if b not in backend_names():
            raise ConfigError(f"{w}.backends: unknown backend {b!r}", f"use some of: {', '.join(backend_names())}")
    identity = _text(body["identity"], f"{w}.identity", fix="give a key file, e.g. ~/.ssh/id_ed25519") \
        if "identity" in body else None
    sysp = body.get("system_site_packages", False)
    if not isinstance(sysp, bool):
        raise ConfigError(f"{w}.system_site_packages must be true or false", "e.g. system_site_packages = true")
    host_key = body.get("host_key", "strict")
    if host_key not in HOST_KEY_POLICIES:
        raise ConfigError(f"{w}.host_key {host_key!r} is not a host-key policy",
                          'use host_key = "strict" (the key must be in known_hosts) or "accept-new" (trust on first use)')
    known_hosts = _text(body.get("known_hosts", DEFAULT_KNOWN_HOSTS), f"{w}.known_hosts",
                        fix=f'give a file, e.g. known_hosts = "{DEFAULT_KNOWN_HOSTS}"')
    env = _env(body.get("env", {}), w, name)
    threads = body.get("threads")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 1024):
        raise ConfigError(f"{w}.threads must be a whole number from 1 to 1024", "e.g. threads = 8, or leave it out")
    return FleetHost(name=name, target=target, workspace=workspace, machine=machine, backends=tuple(backends),
                     gateway=gateway, identity=str(Path(identity).expanduser()) if identity else None,
                     python=_python(body.get("python", "python3"), f"{w}.python"),
                     system_site_packages=sysp, env=env, host_key=host_key,
                     known_hosts=str(Path(known_hosts).expanduser()), threads=threads)


def parse_fleet(text: str, path: Path | None = None) -> Fleet:
    where = str(path or FLEET_FILE)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where} is not valid TOML: {e}", "fix the syntax (see the README, \"Several machines\")") \
            from None
    unknown = sorted(set(data) - {"hosts"})
    if unknown:
        raise ConfigError(f"{where}: unknown top-level key {unknown[0]!r}", "put hosts under [hosts.NAME]")
    raw = data.get("hosts")
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{where} defines no hosts", _EXAMPLE)
    hosts = {name: _host(name, body, where) for name, body in raw.items()}
    machines: dict[str, str] = {}
    for h in hosts.values():
        if h.machine in machines:
            raise ConfigError(f"{where}: hosts {machines[h.machine]!r} and {h.name!r} have the same machine name "
                              f"{h.machine!r}", "give each host its own machine = \"...\"")
        machines[h.machine] = h.name
    return Fleet(hosts=hosts, path=path)


def load_fleet(path: Path) -> Fleet:
    if not path.is_file():
        raise ConfigError(f"no fleet file at {path}",
                          "write fleet.toml next to pins.toml (see the README, \"Several machines\"), or pass --fleet FILE")
    return parse_fleet(read_config_text(path, "fleet.toml"), path)
