"""The ``llamaforge`` program: the same Invoke collection as ``tasks.py``.

Namespaces: top-level tasks (``pins``, ``doctor``, ``build``, ``verify``, ``bench``, ``fitmap``,
``report``, ``compare``, ``bisect``, ``demo``, ``export``) and ``model.*`` (``info``, ``synth``,
``twin``, ``fetch``).
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator

from invoke import Collection, Program

from . import __version__
from .commands import bench as bench_cmds
from .commands import builds as build_cmds
from .commands import compare as compare_cmds
from .commands import demo as demo_cmds
from .commands import fleet as fleet_cmds
from .commands import model as model_cmds
from .commands import report as report_cmds
from .invoke_help import install as install_help_fix

install_help_fix()   # `inv TASK --help` for tasks with positional arguments (also under plain `inv`)


def make_collection() -> Collection:
    ns = Collection()
    for mod in (build_cmds, bench_cmds, report_cmds, compare_cmds, demo_cmds):
        for t in getattr(mod, "TASKS", []):
            ns.add_task(t)
    ns.add_collection(Collection.from_module(model_cmds, name="model"))
    ns.add_collection(Collection.from_module(fleet_cmds, name="fleet"))
    ns.configure({"run": {"echo": False}})
    return ns


class _Program(Program):
    """Invoke's program, with option values it cannot convert (``--repeats abc`` for an int option)
    reported as one line instead of a ValueError traceback."""

    def parse_core(self, argv: list[str] | None) -> None:
        with _bad_values(argv):
            super().parse_core(argv)

    def parse_tasks(self) -> None:
        with _bad_values(self.core.unparsed if self.core else None):
            super().parse_tasks()


@contextlib.contextmanager
def _bad_values(argv: list[str] | None) -> Iterator[None]:
    try:
        yield
    except ValueError as e:
        from .console import print_error
        from .errors import ConfigError

        m = re.search(r"'(.*)'$", str(e))
        value = m.group(1) if m else None
        flag = None
        args = list(argv or [])
        for i, a in enumerate(args):
            if value is not None and a.startswith("-") and a.endswith("=" + value):
                flag = a.split("=", 1)[0]
            elif value is not None and a == value and i and args[i - 1].startswith("-"):
                flag = args[i - 1]
        what = f"{flag} {value!r}" if flag else (repr(value) if value is not None else "an option value")
        err = ConfigError(f"{what} is not a whole number", f"give {flag or 'the option'} a whole number, e.g. 3")
        print_error(err)
        sys.exit(err.exit_code)


ns = make_collection()
program = _Program(namespace=ns, version=__version__, name="llamaforge", binary="llamaforge")


def main() -> None:
    from .proc import install_signal_handlers

    install_signal_handlers()
    program.run()


if __name__ == "__main__":
    main()
