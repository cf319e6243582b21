"""`python -m sdn_app.cli` runs the `tsdn` command line."""

import sys

from sdn_app.cli import main

sys.exit(main())
