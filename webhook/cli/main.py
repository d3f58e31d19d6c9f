"""``tollgate``: the command line entry point. Builds the parser from the subcommands and runs one.

Every subcommand is a module of :mod:`webhook.cli` following the pattern of
:mod:`webhook.cli.command` (``add_parser`` and ``run``). Exit status (every
failure is one line on stderr, never a traceback; :class:`~webhook.cli.command.ExitStatus`):

- 0: success.
- 1: ``tollgate test``: an expectation does not hold (ad-hoc: a ``fail`` or
  ``error`` row); ``tollgate lint``: a problem was found; ``tollgate audit``:
  a report holds a ``fail`` or ``error`` result.
- 2: usage error or unusable input: bad arguments, unreadable or invalid
  files, no Kubernetes configuration for ``serve``, a missing or invalid
  certificate, the port already in use; ``tollgate audit``: input left
  unaudited (nothing auditable, a policy not Ready, a resource not listable).
- 70: an unexpected internal error (one line; ``TOLLGATE_DEBUG=1`` shows the traceback).
- 141: standard output was closed early (``tollgate test ... | head``), as a
  program killed by SIGPIPE; nothing is printed. Also when every write
  succeeded but the reader went away leaving output unread.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from importlib.metadata import PackageNotFoundError, version

from webhook.cli import audit, certs, export, lint, serve, test, webhook_config
from webhook.cli.command import ExitStatus, OneLineParser, UsageError, output_cut_short

__all__ = ["COMMANDS", "build_parser", "main", "package_version"]

#: The subcommands, in the order ``tollgate --help`` lists them.
COMMANDS = (serve, certs, webhook_config, test, lint, audit, export)


def package_version() -> str:
    """The installed ``tollgate`` distribution's version (``unknown`` when run from a bare checkout)."""
    try:
        return version("tollgate")
    except PackageNotFoundError:  # pragma: no cover - always installed in practice
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The ``tollgate`` argument parser, with every subcommand of :data:`COMMANDS`."""
    parser = OneLineParser(prog="tollgate", description="Kubernetes admission webhook with CEL policies",
                           epilog="Exit status: 0 ok, 1 test expectations, lint problems or audit failures, 2 usage "
                                  "or unusable input, 70 internal error, 141 output closed early.")
    parser.add_argument("--version", action="version", version=f"tollgate {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tollgate`` console script; returns the exit status (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and not argv[0].startswith("-") else ""
    try:
        args = build_parser().parse_args(argv)
        status = int(args.run(args))
        sys.stdout.flush()
        if output_cut_short(_stdout_fd()):
            _silence_stdout()
            return ExitStatus.BROKEN_PIPE
        return status
    except UsageError as e:
        print(f"tollgate {command}: {e}" if command else f"tollgate: {e}", file=sys.stderr)
        return ExitStatus.USAGE
    except BrokenPipeError:
        _silence_stdout()
        return ExitStatus.BROKEN_PIPE
    except SystemExit as e:  # argparse: --help/--version (0) and usage errors (2, already printed)
        return e.code if isinstance(e.code, int) else ExitStatus.USAGE
    except KeyboardInterrupt:
        return ExitStatus.INTERRUPTED
    except Exception as e:
        if os.environ.get("TOLLGATE_DEBUG"):
            raise
        print(f"tollgate {command}: internal error: {type(e).__name__}: {e} (TOLLGATE_DEBUG=1 shows the "
              "traceback)", file=sys.stderr)
        return ExitStatus.INTERNAL


def _stdout_fd() -> int:
    """Standard output's file descriptor (-1 when it has none, e.g. replaced by a buffer)."""
    try:
        return sys.stdout.fileno()
    except (OSError, ValueError):
        return -1


def _silence_stdout() -> None:
    """The reader went away (``| head``): silence the final flush, as a SIGPIPE'd program would."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
