"""What every ``tollgate`` subcommand is made of: the pattern, the exit statuses, the one-line errors.

Each subcommand is one module of :mod:`webhook.cli` with two functions::

    def add_parser(sub: Subparsers) -> None     # registers its parser, then set_defaults(run=run)
    def run(args: argparse.Namespace) -> int    # does the work; returns an ExitStatus

:func:`webhook.cli.main.main` builds the ``tollgate`` parser from the modules
in :data:`webhook.cli.main.COMMANDS` and calls ``args.run(args)``; it turns
:class:`UsageError` into one line on stderr and exit status 2, a closed
standard output into 141, and anything unexpected into one line and 70.
"""

from __future__ import annotations

import argparse
import difflib
import fcntl
import os
import re
import select
import stat
import struct
import sys
import termios
import time
from enum import IntEnum
from typing import Any, NoReturn, TypeAlias

__all__ = ["ExitStatus", "OneLineParser", "Subparsers", "UsageError", "add_command", "output_cut_short"]

#: ``argparse``'s sub-command registry, as ``add_parser`` functions receive it.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class ExitStatus(IntEnum):
    """The exit statuses every ``tollgate`` command documents (README, ``tollgate --help``)."""

    OK = 0
    #: ``tollgate test``: an expectation does not hold; ``tollgate lint``: a problem was found;
    #: ``tollgate audit``: a report holds a ``fail`` or ``error`` result.
    FINDINGS = 1
    #: A usage error or unusable input (bad arguments or files, no cluster configuration, a bad certificate).
    USAGE = 2
    #: An unexpected internal error (one line; ``TOLLGATE_DEBUG=1`` shows the traceback).
    INTERNAL = 70
    #: Interrupted (SIGINT during a command other than ``serve``).
    INTERRUPTED = 130
    #: Standard output closed early (``tollgate test ... | head``), as a program killed by SIGPIPE:
    #: a write failed, or the reader went away leaving output unread (:func:`output_cut_short`).
    BROKEN_PIPE = 141


class UsageError(Exception):
    """A one-line reason a command cannot do its work with the input it was given (exit status 2)."""


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser printing ``PROG: error: MESSAGE (see PROG --help)`` on a usage error.

    A mistyped option or subcommand gets the closest known ones (``did you mean --policy?``), as Python
    3.14's ``suggest_on_error`` and kubectl do; the subcommand's own parser names its options.
    """

    def parse_known_args(  # type: ignore[override]
            self, args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        """As argparse's, but an unknown option is an error here, with suggestions from this parser's options."""
        parsed, extras = super().parse_known_args(args, namespace)
        unknown = [a.split("=", 1)[0] for a in extras if a.startswith("--") or (a.startswith("-") and a != "-")]
        if unknown and self._subparsers is None:  # a subcommand's parser: it knows the options
            known = [o for action in self._actions for o in action.option_strings]
            hints = [f"did you mean {' or '.join(close)}?" for close in
                     (difflib.get_close_matches(u, known, n=2, cutoff=0.6) for u in unknown) if close]
            self.error(f"unrecognized arguments: {' '.join(extras)}" + (f" ({'; '.join(hints)})" if hints else ""))
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        """Print one line and exit :attr:`ExitStatus.USAGE`."""
        choice = re.match(r"argument command: invalid choice: '([^']*)'", message)
        if choice and self._subparsers is not None:
            commands = [c for a in self._subparsers._group_actions for c in getattr(a, "choices", None) or ()]
            close = difflib.get_close_matches(choice.group(1), commands, n=1, cutoff=0.6)
            if close:
                message = f"unknown command '{choice.group(1)}' (did you mean '{close[0]}'?)"
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(ExitStatus.USAGE)


def add_command(sub: Subparsers, name: str, run: object, **kwargs: object) -> argparse.ArgumentParser:
    """Register subcommand ``name`` whose ``run(args)`` :func:`webhook.cli.main.main` calls.

    Args:
        sub: the ``tollgate`` sub-command registry.
        name: the subcommand (``serve``, ``test``, ...).
        run: ``run(args) -> int`` of the subcommand's module.
        **kwargs: ``help``, ``description``, ``epilog``, ``formatter_class`` of ``add_parser``.

    Returns:
        The subcommand's parser (a :class:`OneLineParser`), for its arguments.
    """
    parser = sub.add_parser(name, **kwargs)  # type: ignore[arg-type]
    parser.set_defaults(run=run)
    return parser


def output_cut_short(fd: int, *, wait: float = 0.1) -> bool:
    """Whether ``fd`` is a pipe whose reader went away before reading everything written to it.

    A reader that stops early (``| head -c 10``) may do so after the whole output
    already fit in the pipe's buffer: no write fails, yet the output was cut. On
    Linux the pipe then reports ``POLLERR`` (no reader left) and ``FIONREAD``
    counts the bytes nobody read. While output is unread and the reader still
    there, this waits up to ``wait`` seconds for it to read on or leave (``head``
    leaves within milliseconds); a reader that read everything is not a cut.

    Args:
        fd: a file descriptor, normally standard output's.
        wait: the longest wait, in seconds, for a reader with unread output.
    """
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        deadline = time.monotonic() + wait
        while True:
            unread = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
            if unread <= 0:
                return False
            if any(mask & select.POLLERR for _fd, mask in poller.poll(0)):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
    except (OSError, ValueError):
        return False
