"""``python -m agent serve ...`` — the same as the ``kokoro-agent`` console script."""

import sys

from .cli import main

sys.exit(main())
