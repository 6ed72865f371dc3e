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

Invoke casts an option's value to the type of its default while parsing, and a value it cannot cast
(``--repeats abc``) escaped as a ValueError traceback under ``inv``. The patched parser prints it as
llamaforge's one error line and exits 2, under ``inv`` and the ``llamaforge`` program alike.
"""

from __future__ import annotations

import inspect
import re
import sys
from typing import Any, NoReturn

from invoke import Task
from invoke.parser import parser as invoke_parser

HELP_FLAGS = ("--help", "-h")

#: task name -> the exit status of its errors when not 2 (``bisect-run``: 128, which stops ``git bisect``);
#: filled by :func:`llamaforge.commands._common.lf_task`
ERROR_EXIT: dict[str, int] = {}

#: option name -> its short flag, the same in every task that has the option (and never -h)
SHORT_FLAGS = {"model": "m", "backends": "b", "threads": "t", "json": "j", "out": "o", "output": "o"}


class LfTask(Task):
    """A task whose options get only the short flags in :data:`SHORT_FLAGS`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["auto_shortflags"] = False
        super().__init__(*args, **kwargs)
        #: the ``help=`` it was declared with (Invoke pops ``self.help`` while it builds the arguments)
        self.option_help: dict[str, str] = dict(self.help)

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
    machine.see_value = _cast_or_refuse(machine.see_value, lambda self: self.flag)
    machine.see_positional_arg = _refuse_option_like(_cast_or_refuse(machine.see_positional_arg, _next_positional))
    machine._llamaforge_help_fix = True


def _next_positional(machine: Any) -> Any:
    return next((a for a in machine.context.positional_args if a.value is None), None)


def _refuse_option_like(method: Any) -> Any:
    """A positional value that looks like an option (``model.twin -m``: ``-m`` taken as the source file, then
    "no model file at -m") is refused in one line saying so."""

    def patched(self: Any, value: Any) -> None:
        if isinstance(value, str) and len(value) > 1 and value.startswith("-") and not _NUMBER.fullmatch(value):
            from .console import print_error
            from .errors import ConfigError

            arg = _next_positional(self)
            name = max(getattr(arg, "names", None) or ("value",), key=len).replace("_", "-")
            task = getattr(self.context, "name", None) or "the task"
            print_error(ConfigError(f"{task}: {value!r} looks like an option, not the {name.upper()} it expects (no such option)",
                                    f"see `llamaforge {task} --help` for its options; a file whose name starts "
                                    f"with '-': write ./{value}"))
            sys.exit(ERROR_EXIT.get(task, 2))
        method(self, value)

    return patched


_NUMBER = re.compile(r"-[0-9][0-9.e_]*")


def _cast_or_refuse(method: Any, argument: Any) -> Any:
    """``method(machine, value)``, with a value Invoke cannot cast to the option's type refused in one line."""

    def patched(self: Any, value: Any) -> None:
        arg = argument(self)
        if getattr(arg, "kind", None) in (int, float) and isinstance(value, str) and not value.isascii():
            refuse_value(arg, value, ERROR_EXIT.get(getattr(self.context, "name", None) or "", 2))   # int("３") is 3
        try:
            method(self, value)
        except ValueError:
            refuse_value(arg, value, ERROR_EXIT.get(getattr(self.context, "name", None) or "", 2))

    return patched


def refuse_value(arg: Any, value: Any, code: int = 2) -> NoReturn:
    """Print ``--repeats 'abc' is not a whole number`` (with the fix) and exit ``code``."""
    from .console import print_error
    from .errors import ConfigError

    name = max(getattr(arg, "names", None) or ("option",), key=len).replace("_", "-")
    flag = f"--{name}" if len(name) > 1 else f"-{name}"
    need, example = ("a whole number", "3") if getattr(arg, "kind", int) is int else ("a number", "1.5")
    err = ConfigError(f"{flag} {value!r} is not {need}", f"give {flag} {need}, e.g. {example}")
    print_error(err)
    sys.exit(code)
