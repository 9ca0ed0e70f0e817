"""``python -m ferry`` is the ``ferry`` command."""

import sys

from .cli import main

sys.exit(main())
