"""`python -m envreg.images` (scripts/build-base, scripts/lock-wheels)."""

import contextlib
import sys

from envreg.images.cli import main

if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
