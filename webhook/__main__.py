"""``python -m webhook`` runs the ``tollgate`` CLI."""

import sys

from webhook.cli.main import main

sys.exit(main())
