"""``python -m bocast.cli``: the ``bocast`` command."""

import sys

from bocast.cli import main

sys.exit(main())
