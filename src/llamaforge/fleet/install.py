"""``fleet.install``: a wheel of this checkout, installed into a venv in each host's workspace.

The wheel is built from a copy of the checkout's package files (``pip wheel --no-deps``, so the
workspace's ``build/`` folder of llama.cpp builds is never touched); on the host,
``python -m venv WS/venv`` then ``pip install WHEEL`` (the host's own package index settings pick
the dependencies) and a forced reinstall of the wheel itself (a same-version llamaforge elsewhere on
the host must not shadow it). Every later fleet command first checks the host runs this version.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from pathlib import Path

from .. import __version__
from ..errors import FleetError
from ..proc import run as run_local
from .remote import VENV, Remote

_PACKAGE_FILES = ("pyproject.toml", "README.md", "LICENSE", "src")


def checkout_root() -> Path:
    """The source checkout this llamaforge runs from (the folder with pyproject.toml above src/)."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "pyproject.toml").is_file() or not (root / "src" / "llamaforge").is_dir():
        raise FleetError(f"llamaforge runs from {Path(__file__).resolve().parents[1]}, not from a source checkout",
                         "run the fleet commands from a llamaforge checkout (`inv fleet.install` in the repo)")
    return root


def build_wheel(out_dir: Path, checkout: Path | None = None) -> Path:
    """``pip wheel --no-deps`` of the checkout's package files, built in a temp copy; the wheel's path."""
    src = checkout or checkout_root()
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llamaforge-wheel-") as tmp:
        stage = Path(tmp) / "pkg"
        stage.mkdir()
        for name in _PACKAGE_FILES:
            p = src / name
            if p.is_dir():
                shutil.copytree(p, stage / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
            elif p.is_file():
                shutil.copy2(p, stage / name)
        for old in out_dir.glob("llamaforge-*.whl"):
            old.unlink()
        r = run_local([sys.executable, "-m", "pip", "wheel", "--no-deps",
                       "--disable-pip-version-check", "-q", "-w", str(out_dir), "--", str(stage)], timeout=600)
        wheels = sorted(out_dir.glob("llamaforge-*.whl"))
        if not r.ok or not wheels:
            raise FleetError(f"building the llamaforge wheel failed: {r.output.strip().splitlines()[-1:] or '?'}",
                             "run `python -m pip wheel --no-deps .` in the checkout to see why")
    return wheels[-1]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def install(remote: Remote, wheel: Path, pins_file: Path, log: object = None) -> dict:
    """Install ``wheel`` into the host's workspace venv and copy ``pins.toml`` there; the host's ``info``."""
    h = remote.host
    remote.python_ok(h.python)
    remote.mkdir(remote.ws("wheels"))
    remote.mkdir(remote.ws("results"))
    dest = remote.ws("wheels", wheel.name)
    remote.put(wheel, dest)
    remote.put(pins_file, remote.ws("pins.toml"))
    probe = remote.run(["test", "-x", remote.venv_python], check=False)
    if probe.exited != 0:
        remote.run([h.python, "-m", "venv", *(["--system-site-packages"] if h.system_site_packages else []), "--",
                    remote.ws(VENV)], what="python -m venv", stream=log)
    pip = [remote.venv_python, "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    remote.run([*pip, "--", dest], what="pip install (dependencies)", stream=log)
    remote.run([*pip, "--force-reinstall", "--no-deps", "--", dest], what="pip install (llamaforge)", stream=log)
    info = remote.agent("info")
    if info.get("version") != __version__:
        raise FleetError(f"host {h.name}: installed llamaforge {info.get('version')} but this checkout is {__version__}",
                         f"check pip's output on the host ({remote.ws(VENV)})")
    return info


def check_version(remote: Remote) -> dict:
    """The host's ``info``; a FleetError when its llamaforge is missing or not this checkout's version."""
    info = remote.agent("info")
    if info.get("version") != __version__:
        raise FleetError(f"host {remote.host.name} runs llamaforge {info.get('version')}, this checkout is {__version__}",
                         "run `inv fleet.install` to install this checkout there")
    return info
