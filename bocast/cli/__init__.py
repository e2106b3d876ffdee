"""The ``bocast`` command.

Every subcommand prints a human summary on stdout; with ``--json`` its last line is one JSON
object, and stdout holds nothing else. Progress and status lines go to stderr (a bar on a
terminal, a line every few seconds elsewhere).

Every option and configuration field is checked before any work (``bocast.schema``): bad input
ends with one line ``bocast: error: ...`` and exit code 2, and leaves nothing behind. SIGINT or
SIGTERM ends a command with one line and exit code 130; every finished record is kept and the
same command resumes from it. ``--debug`` (or ``BOCAST_DEBUG=1``) adds the traceback and
lets other libraries' warnings through (without it only bocast's own reach the terminal:
:func:`own_warnings_only`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence

from bocast import interrupt
from bocast.cli.parser import build_parser
from bocast.cli.run_commands import cmd_ablation, cmd_remeasure, cmd_serve
from bocast.errors import InputError, RpcUnavailable

# the commands live in the package's modules (common, space_commands, run_commands, parser);
# build_parser is named here as well, where it was defined when the package was one module
__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``bocast ARGV``; without ``argv`` this process's own command (the console script,
    ``python -m bocast.cli``), which then never dies by a stop signal once the command has
    ended (:func:`_guarded`)."""
    own_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    # these take their modules' own options, which argparse cannot forward
    if argv[:1] == ["serve"]:  # rpc_server handles its signals itself
        return cmd_serve(argv[1:])
    tools = {"remeasure": cmd_remeasure, "ablation": cmd_ablation}
    if argv[:1] and argv[0] in tools:
        return _guarded(lambda: tools[argv[0]](argv[1:]), bool(os.environ.get("BOCAST_DEBUG")),
                        own_process)
    try:  # the parser lists the operators: an installed plugin that fails to import fails here
        parser = build_parser()
    except InputError as e:
        _fail(f"bocast: error: {_one_line(e)}", bool(os.environ.get("BOCAST_DEBUG")))
        return 2
    args = parser.parse_args(argv)
    debug = bool(getattr(args, "debug", False) or os.environ.get("BOCAST_DEBUG"))
    return _guarded(lambda: args.func(args), debug, own_process)


def _guarded(command: Callable[[], int], debug: bool, own_process: bool = False) -> int:
    """``command`` under the contract above: interrupts, input errors and bugs each end in one
    line and their exit code. In the process's own command (``own_process``) the stop signals
    are ignored from the command's end on, rather than given back their default action: the
    command's rows, files and lines are all written, and a SIGTERM landing while the
    interpreter shuts down (torch's and the pools' teardown, a second or so) killed the process
    with no line and no exit code of its own (issue 42: 6 of 52 stops)."""
    before = {s: signal.getsignal(s) for s in interrupt.SIGNALS}
    interrupt.install()
    try:
        with own_warnings_only(not debug):
            return command()
    except (interrupt.Interrupted, KeyboardInterrupt) as e:
        name = str(e) if isinstance(e, interrupt.Interrupted) else "SIGINT"
        _fail(f"bocast: interrupted ({name}): every finished record is kept; the same command "
              "resumes", debug)
        return 130
    except (InputError, OSError, RpcUnavailable) as e:  # OSError: a file it could not read/write
        _fail(f"bocast: error: {_one_line(e)}", debug)
        return 2
    except Exception as e:  # noqa: BLE001 - a bug: say so in one line, traceback on request
        _fail(f"bocast: internal error: {type(e).__name__}: {_one_line(e)} (a bug; --debug or "
              "BOCAST_DEBUG=1 shows the traceback)", debug)
        return 1
    finally:
        for s, handler in before.items():
            # SIG_IGN, not a Python handler: the interpreter resets its own handlers to the
            # default action late in its shutdown, and keeps an ignored signal ignored
            signal.signal(s, signal.SIG_IGN if own_process else handler)


@contextlib.contextmanager
def own_warnings_only(on: bool) -> Iterator[None]:
    """While ``on``: warnings of other libraries (BoTorch, GPyTorch, torch, TVM, ...) are not
    shown, bocast's own are (a category defined in bocast, e.g. FitWarning). A user reads the
    command's lines, not a library's advice to its own callers, and every warning of a live run
    said the same thing (issue 40); ``--debug`` shows them all. The worker processes a command
    starts (builders, the GPU runner) inherit ``PYTHONWARNINGS=ignore``: what they report comes
    back as a record's status and error."""
    if not on:
        yield
        return
    env = os.environ.get("PYTHONWARNINGS")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.filterwarnings("default", category=_OwnWarning)
        os.environ["PYTHONWARNINGS"] = "ignore"
        try:
            yield
        finally:
            if env is None:
                os.environ.pop("PYTHONWARNINGS", None)
            else:
                os.environ["PYTHONWARNINGS"] = env


class _OwnWarningMeta(type):
    """``issubclass(c, _OwnWarning)`` for any warning category defined in a bocast module."""

    def __subclasscheck__(cls, sub: type) -> bool:
        return sub.__module__.split(".")[0] == "bocast"


class _OwnWarning(Warning, metaclass=_OwnWarningMeta):
    """The category filter for bocast's own warnings (:func:`own_warnings_only`)."""


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:1000]


def _fail(line: str, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    print(line, file=sys.stderr, flush=True)
