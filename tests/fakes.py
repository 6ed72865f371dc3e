"""Stand-ins shared by the unit tests (not collected: no ``test_`` prefix).

* :class:`FakeBuild` — what the bench, smoke and verify code need of a build (``builds.Build``'s
  duck type): a key, a folder of binaries, a manifest, the environment its binaries run with.
* :func:`fake_binaries` — a folder of fake llama.cpp binaries: the Python fakes in ``tests/unit/``
  (``bench_fake_server.py``, ``bench_fake_llamabench.py``) made executable, steered by ``FAKE_MODE``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

UNIT = Path(__file__).parent / "unit"
FAKE_SERVER = UNIT / "bench_fake_server.py"
FAKE_LLAMABENCH = UNIT / "bench_fake_llamabench.py"


@dataclass
class FakeBuild:
    """A build whose binaries live in ``dir``; they run with ``FAKE_MODE=mode`` (none where ``mode`` is
    ``None``) and ``extra_env``."""
    key: str
    dir: Path = Path("/nonexistent")
    mode: str | None = "ok"
    backend: str = "cpu"
    commit: str = "0123456789abcdef"
    pin: str = "default"
    manifest: dict = field(default_factory=dict)
    extra_env: dict = field(default_factory=dict)

    def binary(self, name: str) -> Path:
        return self.dir / name

    @property
    def env(self) -> dict[str, str]:
        return ({} if self.mode is None else {"FAKE_MODE": self.mode}) | self.extra_env

    @property
    def source_dir(self) -> Path:
        return self.dir


def write_executable(path: Path, python_source: str) -> Path:
    """``python_source`` as an executable script run by this interpreter."""
    path.write_text(f"#!{sys.executable}\n" + python_source)
    path.chmod(0o755)
    return path


def fake_binaries(d: Path, *, server: bool = True, llamabench: bool = True, model: bool = False,
                  **more: str) -> Path:
    """``d`` (made if missing) with the fake ``llama-server``/``llama-bench``, the binaries named in
    ``more`` (name → Python source) and, with ``model``, a stub ``m.gguf``."""
    d.mkdir(parents=True, exist_ok=True)
    sources = {"llama-server": FAKE_SERVER.read_text() if server else None,
               "llama-bench": FAKE_LLAMABENCH.read_text() if llamabench else None, **more}
    for name, text in sources.items():
        if text is not None:
            write_executable(d / name, text)
    if model:
        (d / "m.gguf").write_bytes(b"GGUF")
    return d
