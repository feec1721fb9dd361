"""``python -m server`` is ``kokoro-serve``."""

import sys

from .cli import main

sys.exit(main())
