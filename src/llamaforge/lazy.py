"""Third-party modules loaded on first use, so that a command that never downloads or serves does not pay for them.

``requests = lazy("requests")`` gives a stand-in whose every attribute is read from the real module, imported
(under Python's import lock) the first time one is asked for. Nothing is cached here: ``sys.modules`` holds the
module, so a test that patches ``requests.Session`` patches what every caller sees. Measured: ``requests``
(with urllib3, charset_normalizer and certifi) was ~0.14 s of a ~0.7 s ``llamaforge`` start.

Type checkers see the real module: import it under ``TYPE_CHECKING`` and bind the stand-in otherwise.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class _Lazy(ModuleType):
    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self.__name__), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self.__name__!r}>"


def lazy(name: str) -> Any:
    """A stand-in for the module ``name``, imported when one of its attributes is first read."""
    return _Lazy(name)
