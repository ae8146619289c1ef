"""``rollball sweep`` and ``rollball plot-sweep``: run a sweep file into a results
directory (resumable; in-process, on all local devices, or on a Dask cluster) and draw it.

Registered into :data:`rollball_jax.app.cli.app` by :func:`register`. Exit status as for
``rollball run``: 2 invalid sweep file, 1 failed run or unwritable output, 130 interrupted
(rerun the same command to resume).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import ConfigError, ModelError

from ._cli_common import EXIT_INTERRUPTED, EXIT_INVALID_INPUT, EXIT_RUN_FAILED, _fail  # noqa: E402,F401


def _sweep_path(name: str) -> Path:
    """A sweep file path, or a shipped example sweep by name (e.g. ``sweep-paper-ball``)."""
    p = Path(name)
    if p.is_file():
        return p
    from importlib import resources

    stem = name.removesuffix(".toml")
    shipped = resources.files("rollball_jax") / "examples" / f"{stem}.toml"
    if "/" not in name and shipped.is_file():
        return Path(str(shipped))
    return p


def _set_host_devices(n: int) -> None:
    """Run with ``n`` XLA CPU devices. The flag is read when JAX starts its backends (at
    import of the package, which creates arrays), so the command re-executes itself once
    with ``XLA_FLAGS`` set."""
    import sys

    import jax

    from ..batch import host_device_flags

    if jax.default_backend() != "cpu" or len(jax.devices()) == n:
        return
    if os.environ.get("ROLLBALL_HOST_DEVICES_REEXEC") == str(n):
        typer.echo(f"rollball: warning: could not get {n} host devices (have {len(jax.devices())})", err=True)
        return
    env = dict(os.environ, XLA_FLAGS=host_device_flags(n), ROLLBALL_HOST_DEVICES_REEXEC=str(n))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "rollball_jax.app.cli", *sys.argv[1:]], env)


def sweep(
    spec_file: Annotated[str, typer.Argument(metavar="SWEEP.toml", help="Sweep file (or a shipped example sweep, e.g. sweep-paper-ball).", show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", help="Results directory (created; an existing one of the same sweep is resumed).")],
    mode: Annotated[Optional[str], typer.Option(help="Override run.mode: adaptive | lockstep | shared | fixed.", show_default=False)] = None,
    chunk: Annotated[Optional[int], typer.Option(help="Override run.chunk (members per chunk).", show_default=False)] = None,
    group_size: Annotated[Optional[int], typer.Option(help="Override run.group_size (modes lockstep/shared/fixed).", show_default=False)] = None,
    dt: Annotated[Optional[float], typer.Option(help="Override run.dt (mode fixed).", show_default=False)] = None,
    workers: Annotated[Optional[int], typer.Option(help="Run the chunks on a local Dask cluster with this many worker processes.", show_default=False)] = None,
    scheduler: Annotated[Optional[str], typer.Option(help="Run the chunks on the Dask scheduler at ADDRESS (e.g. tcp://host:8786); --out must be visible to the workers.", show_default=False)] = None,
    host_devices: Annotated[Optional[int], typer.Option(help="CPU only: split each chunk over N XLA host devices (e.g. the number of cores).", show_default=False)] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Discard results of a different sweep in --out.")] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")] = True,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing on success.")] = False,
) -> None:
    """Run the sweep SWEEP.toml into --out: chunks of designs solved together, results in a Zarr store.

    Interrupted sweeps (Ctrl-C, killed process) resume with the same command and recompute
    nothing already written. Read the results with rollball_jax.app.sweep.open_sweep(OUT) or
    xarray.open_zarr(OUT/results.zarr); draw them with `rollball plot-sweep OUT`.
    """
    if workers is not None and scheduler is not None:
        raise _fail("give --workers or --scheduler, not both", EXIT_INVALID_INPUT)
    if workers is not None and workers < 1:
        raise _fail("--workers must be at least 1", EXIT_INVALID_INPUT)
    if host_devices is not None:
        if host_devices < 1:
            raise _fail("--host-devices must be at least 1", EXIT_INVALID_INPUT)
        _set_host_devices(host_devices)
    from .sweep import SweepError, load_sweep_spec, run_sweep

    try:
        spec = load_sweep_spec(_sweep_path(spec_file)).with_run(mode=mode, chunk=chunk, group_size=group_size, dt=dt)
    except (SweepError, ConfigError, ModelError) as e:
        raise _fail(str(e), EXIT_INVALID_INPUT) from None
    if not quiet:
        typer.echo(f"{spec.name}: {spec.size} members in {spec.n_chunks} chunks of {spec.chunk}, mode {spec.mode}"
                   + (f", swept: {', '.join(spec.paths)}" if spec.paths else ""))
    try:
        summary = run_sweep(spec, out, workers=workers, scheduler=scheduler, progress=progress and not quiet, overwrite=overwrite)
    except KeyboardInterrupt:
        typer.echo(f"rollball: interrupted; finished chunks are kept in {out}: rerun the same command to resume", err=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except SweepError as e:
        raise _fail(str(e), EXIT_INVALID_INPUT) from None
    except OSError as e:
        raise _fail(f"cannot write {out}: {e}", EXIT_RUN_FAILED) from None
    if not quiet:
        typer.echo(f"  {summary['succeeded']} succeeded, {summary['failed']} failed, {summary['invalid']} invalid; "
                   f"{summary['chunks_run']} chunks run now, {summary['wall_time_s']:.1f} s")
        typer.echo(f"  results: {Path(out) / 'results.zarr'} (plot: rollball plot-sweep {out})")


def plot_sweep(
    results: Annotated[Path, typer.Argument(metavar="RESULTS", help="Results directory written by `rollball sweep`.", show_default=False)],
    quantity: Annotated[str, typer.Option(help="Quantity to plot: distance, heading, path_length, energy_drift, num_steps.")] = "distance",
    x: Annotated[Optional[str], typer.Option(help="Swept parameter (key path or coordinate name) on the x axis.", show_default=False)] = None,
    y: Annotated[Optional[str], typer.Option(help="Second swept parameter: heat map over (x, y).", show_default=False)] = None,
    paths: Annotated[int, typer.Option(help="Number of GC paths to overlay (spread over the members).")] = 12,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Directory for the PNGs. Default: RESULTS/figures.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing on success.")] = False,
) -> None:
    """Draw a sweep: QUANTITY against one or two swept parameters, and overlaid GC paths."""
    from .sweep import SweepError, sweep_status
    from .sweep_plots import QUANTITIES, plot_sweep as _plot

    if quantity not in QUANTITIES:
        raise _fail(f"--quantity must be one of {', '.join(QUANTITIES)}; got {quantity!r}", EXIT_INVALID_INPUT)
    if not (Path(results) / "sweep.json").exists():
        raise _fail(f"{results}: not a sweep results directory (no sweep.json)", EXIT_INVALID_INPUT)
    try:
        written = _plot(results, quantity=quantity, x=x, y=y, n_paths=paths, out_dir=out)
    except (SweepError, ValueError) as e:
        raise _fail(str(e), EXIT_INVALID_INPUT) from None
    except OSError as e:
        raise _fail(f"cannot write figures: {e}", EXIT_RUN_FAILED) from None
    if not quiet:
        for name, p in written.items():
            typer.echo(f"  {name}: {p}")
    status = sweep_status(results)
    if not status["complete"]:  # plotted without a word before
        typer.echo(f"warning: the sweep is incomplete ({status['chunks_done']} of {status['chunks']} chunks done); "
                   f"members not yet run are left out of the figures. Resume it with `rollball sweep`.", err=True)


def show_sweep(
    name: Annotated[str, typer.Argument(help="Shipped example sweep, e.g. sweep-paper-ball.", show_default=False)],
) -> None:
    """Print a shipped example sweep file (redirect it to a file to start your own)."""
    p = _sweep_path(name)
    if not p.is_file():
        raise _fail(f"no shipped sweep named {name!r}", EXIT_INVALID_INPUT)
    typer.echo(p.read_text(encoding="utf-8"), nl=False)


def register(app: typer.Typer) -> None:
    """Add ``sweep``, ``plot-sweep`` and ``show-sweep`` to the ``rollball`` app."""
    app.command("sweep")(sweep)
    app.command("plot-sweep")(plot_sweep)
    app.command("show-sweep")(show_sweep)


__all__ = ["register", "sweep", "plot_sweep", "show_sweep"]

