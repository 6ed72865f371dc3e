"""The ``llamaforge`` program: the same Invoke collection as ``tasks.py``.

Namespaces: top-level tasks (``pins``, ``doctor``, ``build``, ``verify``, ``bench``, ``fitmap``,
``report``, ``compare``, ``bisect``, ``demo``, ``export``) and ``model.*`` (``info``, ``synth``,
``twin``, ``fetch``).
"""

from __future__ import annotations

from invoke import Collection, Program

from . import __version__
from .commands import bench as bench_cmds
from .commands import builds as build_cmds
from .commands import compare as compare_cmds
from .commands import demo as demo_cmds
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
    ns.configure({"run": {"echo": False}})
    return ns


ns = make_collection()
program = Program(namespace=ns, version=__version__, name="llamaforge", binary="llamaforge")


def main() -> None:
    from .proc import install_signal_handlers

    install_signal_handlers()
    program.run()


if __name__ == "__main__":
    main()
