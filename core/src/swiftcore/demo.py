"""``python -m swiftcore.demo``: ``make demo``'s job, as it has always been started.

The demo is the swiftcore-tiny plugin's ``swiftcore demo`` command; this runs that command through the CLI
frame, so the core names no plugin module, and without the plugin it says what to install.
"""

from __future__ import annotations

import sys

from swiftcore.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["demo", *sys.argv[1:]]))
