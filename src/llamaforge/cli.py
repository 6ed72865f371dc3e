"""The ``llamaforge`` program: the same Invoke collection as ``tasks.py``.

Namespaces: top-level tasks (``pins``, ``doctor``, ``build``, ``verify``, ``bench``, ``fitmap``,
``report``, ``compare``, ``bisect``, ``demo``, ``export``) and ``model.*`` (``info``, ``synth``,
``twin``, ``fetch``).
"""

from __future__ import annotations

import os

from invoke import Argument, Collection, Program
from invoke.parser import Parser, ParserContext

from . import __version__
from .commands import bench as bench_cmds
from .commands import builds as build_cmds
from .commands import demo as demo_cmds
from .commands import fleet as fleet_cmds
from .commands import history as history_cmds
from .commands import model as model_cmds
from .commands import regressions as regression_cmds
from .commands import report as report_cmds
from .invoke_help import install as install_help_fix

install_help_fix()   # `inv TASK --help` for tasks with positional arguments (also under plain `inv`)


def make_collection() -> Collection:
    ns = Collection()
    for mod in (build_cmds, bench_cmds, report_cmds, regression_cmds, demo_cmds):
        for t in getattr(mod, "TASKS", []):
            ns.add_task(t)
    ns.add_collection(Collection.from_module(model_cmds, name="model"))
    ns.add_collection(Collection.from_module(fleet_cmds, name="fleet"))
    ns.add_collection(Collection.from_module(history_cmds, name="history"))
    ns.configure({"run": {"echo": False}})
    return ns


#: flags before the task name that move a place (:mod:`llamaforge.paths`): each sets its environment variable,
#: so a child llamaforge (fleet, bisect-run) sees the same places
PLACE_FLAGS = {"cache-dir": "LLAMAFORGE_CACHE", "data-dir": "LLAMAFORGE_DATA", "config-dir": "LLAMAFORGE_CONFIG",
               "workspace": "LLAMAFORGE_WORKSPACE"}


class _Program(Program):
    """Invoke's program; option values it cannot convert (``--repeats abc`` for an int option) are
    refused in one line by the parser patch of :mod:`llamaforge.invoke_help`, under ``inv`` too.
    ``--cache-dir``, ``--data-dir``, ``--config-dir`` and ``--workspace`` (before the task) move the places."""

    def core_args(self) -> list[Argument]:
        helps = {"cache-dir": "the cache folder (git mirror, sdists, ccache, builds, models; LLAMAFORGE_CACHE)",
                 "data-dir": "the data folder (the results store; LLAMAFORGE_DATA)",
                 "config-dir": "the config folder (the user's pins.toml and config.toml; LLAMAFORGE_CONFIG)",
                 "workspace": "use this folder as the workspace (its pins.toml and outputs; LLAMAFORGE_WORKSPACE)"}
        verbose = Argument(names=("verbose",), kind=bool, default=False,
                           help="the details behind one-line notices, e.g. a rescued smoke run's crash (LLAMAFORGE_VERBOSE)")
        allow_icd = Argument(names=("allow-icd",), help="a Vulkan ICD manifest outside the system's ICD folders that "
                             "variants may name in VK_DRIVER_FILES (comma-separated; LLAMAFORGE_ALLOW_ICD; SECURITY.md)")
        return [*super().core_args(), *(Argument(names=(n,), help=h) for n, h in helps.items()), verbose, allow_icd]

    def parse_core(self, argv: list[str] | None) -> None:
        super().parse_core(argv)
        for flag, env in PLACE_FLAGS.items():
            value = self.args[flag].value
            if value:
                os.environ[env] = str(os.path.abspath(os.path.expanduser(value)))
        if self.args["verbose"].value:
            os.environ["LLAMAFORGE_VERBOSE"] = "1"
        if self.args["allow-icd"].value:   # the user's own command line: the one way past the ICD folders' limit
            os.environ["LLAMAFORGE_ALLOW_ICD"] = ",".join(os.path.abspath(os.path.expanduser(x.strip()))
                                                          for x in str(self.args["allow-icd"].value).split(",") if x.strip())

    def _make_parser(self) -> Parser:
        """Invoke's parser over the contexts of the tasks named on the command line only. Invoke builds every
        task's context (``inspect.signature`` of each) and deep-copies them all on each parse: ~30 ms a run
        for ~55 tasks, against ~3 ms for the one or two named. A word that names no task is refused as before;
        a command line that names none gets every context."""
        named = set(self.core.unparsed) if self.core else set()
        wanted = {p: a for p, a in self.collection.task_names.items() if p in named or named.intersection(a)}
        if not wanted:
            return super()._make_parser()
        ignore = self.config.tasks.ignore_unknown_help
        contexts = [ParserContext(name=p, aliases=a, args=self.collection[p].get_arguments(ignore_unknown_help=ignore))
                    for p, a in wanted.items()]
        return Parser(initial=self.initial_context, contexts=contexts)


ns = make_collection()
program = _Program(namespace=ns, version=__version__, name="llamaforge", binary="llamaforge")


def main() -> None:
    from .console import harden_streams, quiet_broken_pipe
    from .proc import install_signal_handlers

    harden_streams()
    install_signal_handlers()
    try:
        program.run()
    except BrokenPipeError:     # `llamaforge --help | head`: invoke's own printing, outside any task
        quiet_broken_pipe()


if __name__ == "__main__":
    main()
