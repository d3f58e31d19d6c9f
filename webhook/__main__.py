"""``python -m webhook`` runs the ``tollgate`` CLI."""

import sys

from webhook.cli import main

sys.exit(main())
