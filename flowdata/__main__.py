"""``python -m flowdata``: the same as the ``flowdata`` command."""

import sys

from flowdata.cli import main

sys.exit(main())
