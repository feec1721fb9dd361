"""``python -m server`` is ``kokoro-serve``."""

import sys

from server.cli.main import main

sys.exit(main())
