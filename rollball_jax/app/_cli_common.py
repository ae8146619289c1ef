"""Exit codes and the error exit shared by the ``rollball`` commands (``cli``, ``cli_sweep``)."""

from __future__ import annotations

import typer

EXIT_INVALID_INPUT = 2
EXIT_RUN_FAILED = 1
EXIT_INTERRUPTED = 130


def _fail(message: str, code: int) -> typer.Exit:
    """Print ``rollball: error: <message>`` on stderr; return the ``typer.Exit(code)`` to raise."""
    typer.echo(f"rollball: error: {message}", err=True)
    return typer.Exit(code)
