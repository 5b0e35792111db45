"""``python -m talos.cli``: the same command line as the ``talos`` console script."""

from __future__ import annotations

from talos.cli import main

if __name__ == "__main__":
    main()
