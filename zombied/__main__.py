"""``python -m zombied``: the same command line as the ``zombied`` console script."""

from zombied.cli import main

raise SystemExit(main())
