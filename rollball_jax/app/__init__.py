"""The application layer, apart from the physics: TOML configs (``config``), parameter
sweeps with incremental, resumable stores (``sweep``), result files (``output``), plots
(``plotting``, ``sweep_plots``) and the ``rollball`` command line (``cli``, ``cli_sweep``).

The physics core (models, rails, controls, solves, derivatives, batches, design) does not
import this package; ``import rollball_jax`` does not load it (``rb.config``,
``rb.sweep``, ``rb.output``, ``rb.plotting`` load it on first use).

Its dependencies (typer, xarray, h5netcdf, h5py, matplotlib, zarr, dask) come with the
``app`` extra, ``pip install "rollball-jax[app]"``; importing this package without them
raises ``ImportError`` naming the extra and the missing modules.
"""

from .._extras import require as _require

_require("rollball_jax.app (configs, sweeps, result files, plots, the rollball command)")

#: The application layer's modules (``from rollball_jax.app import *`` imports them all).
__all__ = ["cli", "cli_sweep", "config", "output", "plotting", "sweep", "sweep_plots"]
