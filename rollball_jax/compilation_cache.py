"""Persistent XLA compilation cache: compile a solve once per machine, not once per process.

Compiling a derivative (the discrete adjoint's reverse pass, a forward-mode Jacobian, a
design's Levenberg–Marquardt step) takes seconds to tens of seconds on a CPU, far more
than running it. JAX can keep compiled programs on disk and reload them in a later
process when the program (model structure, tolerances, shapes) is the same; only new
parameter *values* never recompile anyway. This module switches that cache on
explicitly; nothing is cached unless it is called (no hidden global state at import).

Measured (paper ball, reverse-mode gradient of the final GC, 2 cores): XLA compilation
13.1 s in the first process, 0.8 s in the next one with the cache (that script's
compiled programs take 0.8 MB on disk).
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

__all__ = ["enable_compilation_cache", "compilation_cache_dir", "default_cache_dir", "ENV_VAR"]

ENV_VAR = "ROLLBALL_JAX_CACHE_DIR"


def default_cache_dir() -> Path:
    """``$ROLLBALL_JAX_CACHE_DIR``, else ``$XDG_CACHE_HOME/rollball_jax/xla``, else
    ``~/.cache/rollball_jax/xla``."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "rollball_jax" / "xla"


def enable_compilation_cache(directory: str | os.PathLike | None = None, *, min_compile_time_s: float = 0.5) -> Path:
    """Keep JAX's compiled programs in ``directory`` (default :func:`default_cache_dir`)
    and reuse them in later processes. Programs that took less than
    ``min_compile_time_s`` seconds to compile are not stored. Returns the directory
    (created if needed). Call it before the first compilation; it sets JAX's global
    options ``jax_compilation_cache_dir`` and
    ``jax_persistent_cache_min_compile_time_secs`` for this process. Raises ``OSError``
    if the directory cannot be created.
    """
    path = Path(directory).expanduser() if directory is not None else default_cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_time_s))
    return path


def compilation_cache_dir() -> Path | None:
    """The directory of the active persistent cache, or ``None`` if it is off."""
    value = jax.config.jax_compilation_cache_dir
    return Path(value) if value else None
