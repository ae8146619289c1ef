"""Parameter sweeps: a base design plus grids and random samples, run in resumable chunks.

A sweep file (TOML) names a base run configuration (the format of
:mod:`rollball_jax.app.config`) and the parameters to vary; every parameter of the
configuration mapping is addressable by its key path, e.g. ``masses[1].rail.radius``,
``model.inertia[0]``, ``model.chi0[2]``, ``control.amplitude``, ``masses[0].theta``,
``initial.Omega[2]``::

    description = "paper ball: rail radius x control amplitude, random initial angles"
    base = "paper-ball"              # shipped example, or a path relative to this file,
                                     # or a [base] table holding a whole configuration

    [overrides]                      # set in the base before expanding (any key path)
    "time.t1" = 5.0
    "time.n_save" = 11
    "time.ts" = []                   # (an empty list removes the key)
    "solver.rtol" = 1e-8
    "solver.atol" = 1e-8

    [[grid]]                         # grids combine as an outer product
    path = "masses[1].rail.radius"
    values = [0.8, 0.85, 0.9]
    [[grid]]
    path = "control.amplitude"
    linspace = [0.5, 1.5, 5]         # start, stop, count

    [random]                         # n samples, seeded; combined with every grid point
    seed = 0
    n = 4
    [[random.params]]
    path = "masses[0].theta"
    uniform = [0.0, 6.283185307179586]
    [[random.params]]
    path = "model.chi0[2]"
    normal = [-0.05, 0.01]           # mean, standard deviation

    [run]                            # execution (all optional)
    mode = "adaptive"                # adaptive | lockstep | shared | fixed (rollball_jax.batch)
    chunk = 256                      # members per chunk: the unit of work, of writing and of resuming
    group_size = 256                 # modes lockstep/shared/fixed
    # dt = 0.05                      # mode fixed (default: chosen once by a pilot on chunk 0)
    build = "each"                   # each: every member built and validated by the config
                                     # builder (~20 ms each); fast: swept values written into
                                     # the base design's arrays (only the ends of every range
                                     # are validated; paths must enter an array unchanged)

Members are numbered grid point first, random sample fastest: member ``g·n + k`` is grid
point ``g`` with random sample ``k`` (every grid point sees the same samples). ``[time]``
and ``[solver]`` are sweep-wide (set them in ``[overrides]``): members share save times
and solver settings.

Results (:func:`run_sweep`) go to a directory ``RESULTS`` holding ``results.zarr`` (an
xarray dataset in a Zarr store, chunked along ``member`` exactly as the sweep's chunks),
``sweep.json`` (the effective sweep, its hash and the member table) and
``chunks/cNNNNNN.json`` (one completion marker per chunk, written after its data). A
chunk is *done* iff its marker exists; an interrupted sweep resumes with the same
command, recomputing nothing that is done, and gives the same numbers as an
uninterrupted run (same chunks, same compiled programs). Read results with
:func:`open_sweep`.
"""

from ._run import THROTTLE_ENV, run_chunk, run_sweep
from ._spec import RUN_MODES, SweepError, SweepSpec, coord_name, load_sweep_spec, parse_path, set_path, sweep_from_mapping
from ._store import CHUNK_DIR, SPEC_FILE, STORE, open_sweep, sweep_status

__all__ = [
    "SweepError",
    "SweepSpec",
    "load_sweep_spec",
    "sweep_from_mapping",
    "run_sweep",
    "run_chunk",
    "open_sweep",
    "sweep_status",
    "parse_path",
    "set_path",
    "coord_name",
    "STORE",
    "SPEC_FILE",
    "CHUNK_DIR",
    "RUN_MODES",
    "THROTTLE_ENV",
]
