"""``pins.toml``: named pins -> llama.cpp commits and where to get them.

A pin is the unit the user names (``default``, ``b6000``, ...). Its ``sources`` are tried in
order by :mod:`llamaforge.sources`.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError

UPSTREAM_URL = "https://github.com/ggml-org/llama.cpp"
SOURCE_KINDS = ("git", "path", "tarball", "pypi")
_HEX = re.compile(r"^[0-9a-f]{7,40}$")


# Remote URL schemes a git source may use (``ext::``, ``fd::`` and friends run commands: refused).
GIT_SCHEMES = ("https", "http", "ssh", "git", "file")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# scp-like ``[user@]host:path`` (what ``git clone git@github.com:o/r`` takes); the host may not start with "-"
_SCP = re.compile(r"^(?:[A-Za-z0-9._~+-]+@)?[A-Za-z0-9][A-Za-z0-9.-]*:(?!//)[^\s]*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHA_FRAGMENT = re.compile(r"^(?P<base>.*)#sha256=(?P<hex>[0-9A-Fa-f]{64})$")


def _option_like_authority(rest: str) -> str | None:
    """``"user"`` or ``"host"`` when the URL authority (``rest`` is what follows ``scheme://``) has a
    user or host that starts with ``-`` (also percent-encoded, also in ``[...]``): git hands
    ``user@host`` to ssh as one argument, so ``ssh://-oProxyCommand=CMD@h/x`` or
    ``ssh://[-oProxyCommand=CMD]:22/x`` would be an option. Every ``@`` is looked at, not only the last."""
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    *users, hostport = authority.split("@")
    host = hostport[1:] if hostport.startswith("[") else hostport

    def dash(part: str) -> bool:
        return part.startswith("-") or part.lower().startswith("%2d")

    if any(dash(u) for u in users):
        return "user"
    return "host" if dash(host) else None


def source_problem(kind: str, arg: str, sha256: str | None = None) -> tuple[str, str] | None:
    """Why ``kind:arg`` must not be used (problem, fix), or None when it is acceptable.

    Pins files are written by others: an argument reaches git, pip and HTTP clients, so it must not
    look like an option (``git:--upload-pack=CMD`` would run CMD), carry control characters or use
    a transport that runs commands (``ext::``). Plain-http tarballs need a pinned sha256.
    """
    if _CONTROL.search(arg):
        return "contains a control character", "remove it (pins are single-line strings)"
    if arg.startswith("-"):
        return "starts with \"-\" (it would be read as a command-line option)", \
            "give a URL (https://...) or an absolute path"
    if sha256 is not None and not _SHA256.match(sha256):
        return f"sha256 {sha256!r} is not 64 hex digits", "copy the full sha256 (sha256sum FILE)"
    if kind == "git":
        m = _SCHEME.match(arg)
        if m:
            if m.group(1).lower() not in GIT_SCHEMES:
                return (f"uses the URL scheme {m.group(1)!r}",
                        f"use one of {', '.join(s + '://' for s in GIT_SCHEMES)} or user@host:path")
            bad = _option_like_authority(arg[m.end():])
            if bad:
                return f"has a {bad} starting with \"-\" (ssh would read it as an option)", f"fix the {bad}"
        elif "::" in arg or not _SCP.match(arg):
            return ("is not a git URL",
                    f"use {', '.join(s + '://' for s in GIT_SCHEMES)} or user@host:path "
                    "(a local clone: \"path:DIR\")")
    if kind == "tarball":
        m = _SCHEME.match(arg)
        if m and m.group(1).lower() not in ("https", "http", "file"):
            return f"uses the URL scheme {m.group(1)!r}", "use https://, a file:// URL or a path"
        if m and m.group(1).lower() == "http" and not sha256:
            return ("is a plain-http download without a sha256 (anyone on the path could swap it)",
                    "use https://, or append #sha256=<64 hex digits> to the URL")
    return None


@dataclass(frozen=True)
class SourceSpec:
    """One place a commit can come from: ``kind`` in SOURCE_KINDS and its argument.

    Validated on construction (see :func:`source_problem`): an unsafe spec cannot exist."""

    kind: str
    arg: str = ""
    sha256: str | None = None

    def __post_init__(self) -> None:
        bad = source_problem(self.kind, self.arg, self.sha256)
        if bad:
            raise ConfigError(f"source {self.kind}:{self.arg!r} {bad[0]}", bad[1])

    @classmethod
    def parse(cls, text: str, *, where: str = "pins.toml", sha256: str | None = None) -> SourceSpec:
        kind, _, arg = text.partition(":")
        kind = kind.strip()
        if kind not in SOURCE_KINDS:
            raise ConfigError(f"{where}: unknown source kind {kind!r} in {text!r}",
                              f"use one of {', '.join(SOURCE_KINDS)} (e.g. \"git\", \"pypi:llama-cpp-python==0.3.36\")")
        arg = arg.strip()
        if kind == "tarball" and (m := _SHA_FRAGMENT.match(arg)):
            frag = m.group("hex").lower()
            if sha256 and sha256.lower() != frag:
                raise ConfigError(f"{where}: source {text!r} has two different sha256s",
                                  "keep one: the #sha256= fragment or the [pins.NAME.sha256] entry")
            arg, sha256 = m.group("base"), frag
        if kind == "git" and not arg:
            arg = UPSTREAM_URL
        if kind in ("path", "tarball") and not arg:
            raise ConfigError(f"{where}: source {text!r} needs an argument", f"write \"{kind}:/path/or/url\"")
        if kind == "pypi" and not re.fullmatch(r"[A-Za-z0-9_.-]+==[A-Za-z0-9_.+-]+", arg):
            raise ConfigError(f"{where}: pypi source {text!r} must name an exact version",
                              "write \"pypi:llama-cpp-python==0.3.36\"")
        sha256 = sha256.lower() if sha256 else None
        bad = source_problem(kind, arg, sha256)
        if bad:
            raise ConfigError(f"{where}: source {text!r} {bad[0]}", bad[1])
        return cls(kind, arg, sha256)

    def __str__(self) -> str:
        return f"{self.kind}:{self.arg}" if self.arg else self.kind


@dataclass(frozen=True)
class Pin:
    name: str
    commit: str
    sources: tuple[SourceSpec, ...]
    build_number: int | None = None
    description: str = ""

    @property
    def short(self) -> str:
        return self.commit[:9]


@dataclass
class Pins:
    pins: dict[str, Pin] = field(default_factory=dict)
    default: str = "default"
    path: Path | None = None

    def get(self, name: str | None) -> Pin:
        name = name or self.default
        if name in self.pins:
            return self.pins[name]
        raise ConfigError(f"unknown pin {name!r}" + (f" in {self.path}" if self.path else ""),
                          f"use one of: {', '.join(sorted(self.pins)) or '(none defined)'}, or add [pins.{name}] to pins.toml")

    def resolve(self, ref: str | None) -> Pin:
        """A pin name, or a bare commit hash (then the default pin's sources are used)."""
        if ref is None or ref in self.pins:
            return self.get(ref)
        if _HEX.match(ref.lower()):
            base = self.get(None)
            same = base.commit.startswith(ref.lower()) or ref.lower().startswith(base.commit)
            # a snapshot source (pypi, tarball) holds one commit: another commit takes only the git-native ones
            native = tuple(s for s in base.sources if s.kind in ("git", "path")) or (SourceSpec("git", UPSTREAM_URL),)
            return Pin(name=ref[:9], commit=ref.lower(), sources=base.sources if same else native, build_number=None)
        return self.get(ref)


def _sha_table(sha: object, sources: list[str], where: str) -> dict[str, str]:
    """``sha256 = { "SOURCE" = "HEX" }``: a table whose keys are sources of the pin and values strings."""
    example = 'e.g. sha256 = { "pypi:llama-cpp-python==0.3.36" = "<64 hex digits>" }'
    if not isinstance(sha, dict):
        raise ConfigError(f"{where}.sha256 must be a table mapping a source to its sha256, not {sha!r:.40}", example)
    for key, value in sha.items():
        if key not in sources:
            raise ConfigError(f"{where}.sha256 names {key!r}, which is not one of the pin's sources",
                              f"use one of: {', '.join(sources)} (spelled as in sources)")
        if not isinstance(value, str):
            raise ConfigError(f"{where}.sha256.{key!r} must be a string of 64 hex digits", example)
    return sha


#: the keys a pins file may hold: a typo (``sha265``) would otherwise leave a tarball unchecked, silently
PINS_KEYS = ("default", "pins")
PIN_KEYS = ("commit", "description", "sources", "sha256", "build_number")


def _unknown_key(keys: object, known: tuple[str, ...], where: str) -> None:
    import difflib

    for k in keys:       # type: ignore[attr-defined]
        if k not in known:
            close = difflib.get_close_matches(str(k), known, n=1, cutoff=0.6)
            raise ConfigError(f"{where}: unknown key {str(k)!r}" + (f" (did you mean {close[0]!r}?)" if close else ""),
                              f"use only: {', '.join(known)}")


def parse_pins(text: str, path: Path | None = None) -> Pins:
    where = str(path or "pins.toml")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where} is not valid TOML: {e}", "fix the syntax (see the comments at the top of pins.toml)") from e
    if "default" in data and not isinstance(data["default"], str):
        raise ConfigError(f"{where}: default must be a string naming a pin, not {type(data['default']).__name__}",
                          'e.g. default = "default"')
    raw = data.get("pins")
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{where} defines no pins", "add a table like [pins.default] with commit = \"...\" and sources = [...]")
    _unknown_key(data, PINS_KEYS, where)
    pins: dict[str, Pin] = {}
    for name, body in raw.items():
        if not isinstance(body, dict):
            raise ConfigError(f"{where}: pins.{name} must be a table", f"write [pins.{name}] with commit and sources")
        _unknown_key(body, PIN_KEYS, f"{where}: pins.{name}")
        for key, kind in (("commit", str), ("description", str)):
            if key in body and not isinstance(body[key], kind):
                raise ConfigError(f"{where}: pins.{name}.{key} must be a string, not {type(body[key]).__name__}",
                                  f'quote it, e.g. {key} = "..."')
        commit = str(body.get("commit", "")).strip().lower()
        if not _HEX.match(commit):
            raise ConfigError(f"{where}: pins.{name}.commit {body.get('commit')!r} is not a commit hash",
                              "use a full or abbreviated (>= 7 hex digits) llama.cpp commit")
        srcs = body.get("sources", ["git"])
        if isinstance(srcs, str) or not isinstance(srcs, list) or not srcs or not all(isinstance(x, str) for x in srcs):
            raise ConfigError(f"{where}: pins.{name}.sources must be a non-empty list of strings", "e.g. sources = [\"git\"]")
        sha = _sha_table(body.get("sha256", {}), [str(s) for s in srcs], f"{where}: pins.{name}")
        specs = []
        for s in srcs:
            given = sha.get(str(s))
            specs.append(SourceSpec.parse(str(s), where=f"{where}: pins.{name}",
                                          sha256=given.strip().lower() if given is not None else None))
        bn = body.get("build_number")
        if bn is not None and (isinstance(bn, bool) or not isinstance(bn, int) or bn < 0):
            raise ConfigError(f"{where}: pins.{name}.build_number must be a whole number >= 0 (not {bn!r:.20})",
                              "e.g. build_number = 6000")
        pins[name] = Pin(name=name, commit=commit, sources=tuple(specs), build_number=bn,
                         description=str(body.get("description", "")))
    default = str(data.get("default", "default" if "default" in pins else next(iter(pins))))
    if default not in pins:
        raise ConfigError(f"{where}: default pin {default!r} is not defined", f"set default to one of {', '.join(pins)}")
    return Pins(pins=pins, default=default, path=path)


def read_config_text(path: Path, what: str) -> str:
    """A TOML file's text; ConfigError (naming the file and the first bad byte) if it is unreadable or not UTF-8."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}", f"make {what} a readable file") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"{path} is not UTF-8 text: byte 0x{data[e.start]:02x} on line {line}",
                          f"save {what} as UTF-8 (TOML files are UTF-8)") from None


def load_pins(path: Path) -> Pins:
    if not path.is_file():
        raise ConfigError(f"no pins file at {path}", "give an existing pins.toml, or run `llamaforge init` to write one")
    return parse_pins(read_config_text(path, "pins.toml"), path)
