"""The ``rollball`` console script: the command line of :mod:`rollball_jax.app.cli`, or,
when the ``app`` extra is not installed, one line saying how to install it (exit status 2)
instead of a traceback."""

from __future__ import annotations

import sys

from ._extras import require


def main() -> None:
    try:
        require("the rollball command")
    except ImportError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    from .app.cli import app

    app()
