"""Make ``inv TASK --help`` (and ``-h``) print TASK's help for every task, and give options only
the short flags we chose.

Invoke 3.0.3 asks "does the task still need a positional argument?" before "is this the core
``--help`` flag?", so ``inv model.synth --help`` ran ``model.synth`` with ``preset="--help"``
(pyinvoke/invoke#982, open upstream; PR #1078 proposes the same two changes as here: take
``--help``/``-h`` as help before eating it as a positional value, and don't demand the missing
positional arguments of a task whose help was asked for). :func:`install` wraps the two parser
methods once; ``llamaforge.cli`` calls it, and ``tasks.py`` imports that, so ``inv`` and the
``llamaforge`` program both get it.

Invoke has no optional positional arguments: a positional argument must always be given. Here one
whose parameter has a default may be left out (``llamaforge runs`` lists runs, ``llamaforge runs ID``
shows one, ``--run ID`` still works): :class:`LfTask` marks it and the parser does not demand it.

Invoke's automatic short flags take the first free letter of an option's name: ``--n-predict``
got the empty ``--=INT`` (its second character is the dash) and ``-h`` went to ``--threads`` or
``--head``. :class:`LfTask` turns them off and adds only :data:`SHORT_FLAGS`; ``-h`` is help.
"""

from __future__ import annotations

import inspect
from typing import Any

from invoke import Task
from invoke.parser import parser as invoke_parser

HELP_FLAGS = ("--help", "-h")

#: option name -> its short flag, the same in every task that has the option (and never -h)
SHORT_FLAGS = {"model": "m", "backends": "b", "threads": "t", "json": "j", "out": "o", "output": "o"}


class LfTask(Task):
    """A task whose options get only the short flags in :data:`SHORT_FLAGS`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["auto_shortflags"] = False
        super().__init__(*args, **kwargs)

    def arg_opts(self, name: str, default: str, taken_names: set[str]) -> dict[str, Any]:
        opts = super().arg_opts(name, default, taken_names)
        short = SHORT_FLAGS.get(name)
        if short and short not in taken_names and short not in opts["names"]:
            opts["names"] = [*opts["names"], short]
            taken_names.add(short)
        return opts

    def get_arguments(self, ignore_unknown_help: bool | None = None) -> list:
        args = super().get_arguments(ignore_unknown_help)
        params = self.argspec(self.body).parameters
        for a in args:
            p = params.get(a.attr_name or a.name)
            if a.positional and p is not None and p.default is not inspect.Parameter.empty:
                a.lf_optional = True   # a positional argument with a default may be left out
        return args


def _optional_only(ctx: Any) -> bool:
    """Whether every positional argument the task still lacks may be left out (it has a default)."""
    return all(getattr(a, "lf_optional", False) for a in ctx.missing_positional_args)


def _help_for_context(machine: Any) -> bool:
    """Whether help was asked for the task being parsed."""
    flag = machine.initial.flags.get("--help") if machine.initial is not None else None
    return bool(flag is not None and machine.context is not None and flag.value == machine.context.name)


def install() -> None:
    """Patch Invoke's parser (idempotent)."""
    machine = invoke_parser.ParseMachine
    if getattr(machine, "_llamaforge_help_fix", False):
        return
    handle, complete_context = machine.handle, machine.complete_context

    def patched_handle(self: Any, token: str) -> None:
        ctx, initial = self.context, self.initial
        if (token in HELP_FLAGS and ctx is not None and initial is not None and ctx is not initial
                and self.current_state != "unknown" and token not in ctx.flags and not self.waiting_for_flag_value
                and token in initial.flags and initial.flags[token].name == "help"):
            initial.flags[token].value = ctx.name
            return
        handle(self, token)

    def patched_complete_context(self: Any) -> None:
        if self.context is not None and self.context.missing_positional_args and (
                _help_for_context(self) or _optional_only(self.context)):
            if self.context not in self.result:
                self.result.append(self.context)
            return
        complete_context(self)

    machine.handle = patched_handle
    machine.complete_context = patched_complete_context
    machine._llamaforge_help_fix = True
