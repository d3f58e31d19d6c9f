"""``python -m webhook.cli`` runs the ``tollgate`` CLI."""

import sys

from webhook.cli.main import main

sys.exit(main())
