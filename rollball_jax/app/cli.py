"""``rollball`` command line: run a TOML configuration, list and print the shipped examples.

Thin by design: parse → :func:`rollball_jax.app.config.load_config` → ``simulate`` →
:func:`rollball_jax.app.output.write_run` (+ :func:`rollball_jax.app.plotting.plot_run`).
Invalid input (``ConfigError``, ``ModelError``) prints one line to stderr and exits
with status 2; a failed solve (``SimulationError``) or an unwritable output exits with 1.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import ConfigError, ModelError, SimulationError

__all__ = ["app", "run", "examples", "show_config"]

app = typer.Typer(
    name="rollball",
    help=(
        "Simulate a rolling ball or rolling disk driven by point masses moving on internal rails "
        "(JAX/diffrax). Start with `rollball examples` and `rollball run paper-ball`."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

from ._cli_common import EXIT_INVALID_INPUT, EXIT_RUN_FAILED, _fail  # noqa: E402,F401


def _version_callback(value: bool | None) -> None:
    if value:
        from .. import __version__

        typer.echo(f"rollball_jax {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        Optional[bool],
        typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the package version and exit."),
    ] = None,
) -> None:
    """Simulate a rolling ball or disk actuated by internal point masses on rails."""


def _fmt_vec(v) -> str:
    return "(" + ", ".join(f"{float(x):.10g}" for x in v) + ")"


@app.command()
def run(
    config: Annotated[
        str,
        typer.Argument(
            help="TOML configuration file, or the name of a shipped example (see `rollball examples`).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Optional[Path],
        typer.Option("--out", "-o", help="Run directory to write (created if needed). Default: runs/<config-name>."),
    ] = None,
    plots: Annotated[bool, typer.Option("--plots/--no-plots", help="Write the PNG figures.")] = True,
    rtol: Annotated[Optional[float], typer.Option(help="Override solver.rtol.", show_default=False)] = None,
    atol: Annotated[Optional[float], typer.Option(help="Override solver.atol.", show_default=False)] = None,
    solver: Annotated[
        Optional[str], typer.Option(help="Override solver.name, e.g. Dopri8, Tsit5, Dopri5.", show_default=False)
    ] = None,
    max_steps: Annotated[Optional[int], typer.Option(help="Override solver.max_steps.", show_default=False)] = None,
    n_save: Annotated[
        Optional[int], typer.Option(help="Override time.n_save (equally spaced save points).", show_default=False)
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing on success.")] = False,
) -> None:
    """Simulate CONFIG and write trajectory.nc, summary.json, config.toml and figures into --out.

    Exit status: 0 success, 2 invalid configuration/model, 1 failed solve or unwritable output.
    """
    from .config import load_config

    started = time.perf_counter()
    try:
        cfg = load_config(config)
        if any(v is not None for v in (rtol, atol, solver, max_steps, n_save)):
            cfg = cfg.with_overrides(rtol=rtol, atol=atol, solver=solver, max_steps=max_steps, n_save=n_save)
    except (ConfigError, ModelError) as e:
        raise _fail(str(e), EXIT_INVALID_INPUT) from None

    run_dir = Path("runs") / cfg.name if out is None else out
    unwritable = _unwritable(run_dir)  # before the solve, which can take long (it was found after it)
    if unwritable:
        raise _fail(f"cannot write the run directory {run_dir}: {unwritable}", EXIT_RUN_FAILED)
    try:
        solution = cfg.simulate()
    except ModelError as e:
        raise _fail(f"{cfg.name}: {e}", EXIT_INVALID_INPUT) from None
    except SimulationError as e:
        raise _fail(f"{cfg.name}: {e}", EXIT_RUN_FAILED) from None

    try:
        from .output import SUMMARY_FILE, write_json, write_run

        previous = _previous_run_files(run_dir / SUMMARY_FILE)
        paths = dict(write_run(run_dir, solution, cfg))
        if plots:
            from .plotting import plot_run

            paths.update(plot_run(solution, run_dir))
        # A run into the directory of an earlier one replaces it: the earlier run's files
        # that this one did not write (e.g. its figures, with --no-plots now) are removed,
        # other files are kept. summary.json lists every file of the run, figures included.
        written = sorted(p.name for p in paths.values())
        stale = sorted(set(previous) - set(written))
        for name in stale:
            (run_dir / name).unlink(missing_ok=True)
        summary = json.loads((run_dir / SUMMARY_FILE).read_text())
        summary["files"] = written
        write_json(run_dir / SUMMARY_FILE, summary)
    except (OSError, RuntimeError) as e:
        raise _fail(f"cannot write the run directory {run_dir}: {e}", EXIT_RUN_FAILED) from None

    if quiet:
        return
    t0, t1 = cfg.t_span
    stats = solution.stats
    energy = solution.energy
    typer.echo(
        f"{cfg.name}: {cfg.model_type} with {cfg.model.n} point mass{'' if cfg.model.n == 1 else 'es'}, t in [{t0:g}, {t1:g}], "
        f"{solution.solver} rtol={solution.rtol:g} atol={solution.atol:g}"
    )
    typer.echo(
        f"  steps: {stats.get('num_accepted_steps', '?')} accepted, {stats.get('num_rejected_steps', '?')} rejected; "
        f"solve {solution.wall_time:.2f} s (incl. JIT compilation), total {time.perf_counter() - started:.2f} s"
    )
    typer.echo(f"  final GC (spatial): {_fmt_vec(solution.gc[-1])}")
    typer.echo(f"  energy: {float(energy[0]):.10g} -> {float(energy[-1]):.10g}")
    typer.echo(f"  wrote {run_dir}/: {', '.join(p.name for p in paths.values())}")
    if previous:
        typer.echo("  replaced the earlier run there" + (f" (removed its {', '.join(stale)})" if stale else ""))


def _unwritable(run_dir: Path) -> str | None:
    """Why ``run_dir`` cannot be written (a file there or on its path, a read-only parent),
    or None. Creates nothing: a run that fails leaves no empty directory behind."""
    import os

    p = Path(run_dir)
    while not p.exists():
        if p.parent == p:
            break
        p = p.parent
    if p.exists() and not p.is_dir():
        return f"{p} is a file, not a directory"
    if not os.access(p, os.W_OK | os.X_OK):
        return f"{p} is not writable"
    return None


def _previous_run_files(summary_path: Path) -> list[str]:
    """The files an earlier ``rollball run`` wrote there, as its ``summary.json`` lists them,
    or []. Only a summary that rollball wrote (it names the package's version) counts, and
    of its list only the names a run writes (trajectory, config, the figures of
    :data:`~rollball_jax.app.plotting.FIGURES`): any other file in the directory is the
    user's and is never removed (a hand-made summary.json listing one was obeyed before)."""
    from .output import CONFIG_FILE, TRAJECTORY_FILE
    from .plotting import FIGURES

    try:
        summary = json.loads(summary_path.read_text())
        files = summary.get("files", []) if "rollball_jax_version" in summary else []
    except (OSError, ValueError, AttributeError, TypeError):
        return []
    ours = {TRAJECTORY_FILE, CONFIG_FILE} | {f"{name}.png" for name in FIGURES}
    return [f for f in files if isinstance(f, str) and f in ours]


@app.command()
def examples() -> None:
    """List the shipped example configurations (run one with `rollball run NAME`)."""
    from .config import example_text, list_examples, tomllib

    for name in list_examples():
        try:
            description = tomllib.loads(example_text(name)).get("description", "")
        except tomllib.TOMLDecodeError:
            description = ""
        typer.echo(f"{name:<14} {description}")


@app.command("show-config")
def show_config(
    name: Annotated[str, typer.Argument(help="Shipped example name, e.g. paper-ball.", show_default=False)],
) -> None:
    """Print a shipped example configuration (redirect it to a file to start your own)."""
    from .config import example_text

    try:
        typer.echo(example_text(name), nl=False)
    except ConfigError as e:
        raise _fail(str(e), EXIT_INVALID_INPUT) from None


from .cli_sweep import register as _register_sweep  # noqa: E402  (sweep, plot-sweep, show-sweep)

_register_sweep(app)

if __name__ == "__main__":  # pragma: no cover
    app()
