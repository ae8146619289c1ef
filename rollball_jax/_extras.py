"""Optional dependencies: which extra provides what, and a clear error when one is missing.

The physics core needs JAX, diffrax, equinox, optax, optimistix, SciPy, NumPy and tqdm.
The application layer (:mod:`rollball_jax.app`: TOML configs, sweeps with their zarr/dask
stores, NetCDF result files, plots, the ``rollball`` command) needs the ``app`` extra,
``pip install "rollball-jax[app]"``; the test extra includes it.
"""

from __future__ import annotations

import importlib.util
import sys

#: Import names of the ``app`` extra's distributions (see pyproject.toml).
APP_MODULES = ("typer", "xarray", "h5netcdf", "h5py", "matplotlib", "zarr", "dask", "distributed")

_HINT = 'pip install "rollball-jax[app]"'


def _available(name: str) -> bool:
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def missing(modules: tuple[str, ...] = APP_MODULES) -> list[str]:
    """The import names among ``modules`` that cannot be imported here."""
    return [m for m in modules if not _available(m)]


def require(what: str, modules: tuple[str, ...] = APP_MODULES) -> None:
    """Raise ``ImportError`` naming the extra to install if any of ``modules`` is missing.

    ``what``: the feature that needs them, for the message."""
    gone = missing(modules)
    if gone:
        raise ImportError(f"{what} needs the 'app' extra: {_HINT} (missing: {', '.join(gone)})")
