"""``python -m retrograd``: the ``retrograd`` command."""

import sys

from .cli import main

sys.exit(main())
