"""``python -m assignor plan ...``: see `assignor.cli`."""

import sys

from assignor.cli import main

sys.exit(main())
