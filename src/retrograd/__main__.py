"""``python -m retrograd``: the ``retrograd`` command."""

import sys

from .app.cli import main

sys.exit(main())
