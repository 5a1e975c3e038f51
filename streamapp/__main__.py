import sys

from streamapp.cli import main

sys.exit(main())
