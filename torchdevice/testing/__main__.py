"""``python -m torchdevice.testing``: see :mod:`torchdevice.testing.command`."""
import sys

from .command import main

sys.exit(main())
