"""`python -m tsdn` runs the `tsdn` command line."""

import sys

from tsdn.cli import main

sys.exit(main())
