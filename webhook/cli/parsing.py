"""``argparse`` whose usage errors are one line on stderr and exit status 2 (no usage dump)."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

#: Exit status of a usage error (argparse's own convention, kept).
EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser printing ``PROG: error: MESSAGE (see PROG --help)`` on a usage error."""

    def error(self, message: str) -> NoReturn:
        """Print one line and exit :data:`EXIT_USAGE`."""
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)
