"""`python -m gmm_volunteer.cli` runs `gmmv`."""

import sys

from gmm_volunteer.cli.commands import main

sys.exit(main())
