"""Experiment (b): the paper's ball tracks a circle of radius 2 (units of the ball radius).

Reference: the circle of radius 2 through the origin, centre (0, 2), travelled once
counter-clockwise in T = 40 with a minimum-jerk timing s(t) = 2π(10τ³ − 15τ⁴ + 6τ⁵),
τ = t/T (starts and ends at rest, peak speed ≈ 0.59 radii per unit time):

    p(t) = (2 sin s(t), 2 − 2 cos s(t)).

The ball starts at rest at the origin with its masses *hanging*: the rail angles
θ_b that put the total CM directly below the GC, as low as possible (CM height −0.392; a
stable equilibrium). From the paper's initial state, whose CM is *above* the GC (an
inverted pendulum with time constant ≈ 1), single shooting over 40 time units is
ill-conditioned (sensitivities ~e^40); hanging masses make the ball a stable pendulum and
the design converges reliably.

Free: u_i(t) = θ̈_i, natural cubic splines through 41 knots (one per time unit; 123
numbers). Cost: 1e4·(1/T)∫|z_GC − p|² dt + 1e-3·∫|u|² dt
+ 1e2·∫[max(0, Mg/2 − N)² + max(0, |F_t| − 0.5 N)²] dt, Levenberg–Marquardt with exact
forward-mode Jacobians. Verified by SciPy DOP853 at 1e-12: RMS tracking error.

Run:  python experiments/design_circle_tracking.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import rollball_jax as rb
from rollball_jax import design as dz
from rollball_jax.config import load_config
from rollball_jax.contact import total_mass
from rollball_jax.design.report import print_summary, run_experiment

NAME = "design_circle_tracking"
RADIUS = 2.0
PERIOD = 40.0
#: rail angles of the paper's ball with the total CM straight below the GC, as low as
#: possible (SLSQP: min CM height s.t. horizontal CM offset = 0); CM at (0, 0, −0.392)
HANGING_THETA = (-1.1064350487592685, 1.2068076912298538, 4.18845850268088 - 2 * np.pi)
GOALS = {"RMS tracking error <= 1e-2": ("rms_tracking_error", 1e-2),
         "normal force > 0 throughout": ("-min_normal_verified", 0.0)}


def reference(t):
    """Circle of radius 2 through the origin, centre (0, 2), once in PERIOD with minimum-jerk timing."""
    tau = jnp.clip(t / PERIOD, 0.0, 1.0)
    s = 2.0 * jnp.pi * (10.0 * tau**3 - 15.0 * tau**4 + 6.0 * tau**5)
    return jnp.stack([RADIUS * jnp.sin(s), RADIUS - RADIUS * jnp.cos(s)])


def hanging_ball():
    """The paper's ball and its hanging initial state (at rest at the origin)."""
    model = load_config("paper-ball").model
    x0 = np.asarray(model.initial_state(theta=HANGING_THETA))
    cm = np.asarray(rb.observables.system_cm_body(model, jnp.asarray(x0)))
    assert np.hypot(cm[0], cm[1]) < 1e-12 and cm[2] < 0, cm
    return model, x0


def build(quick: bool = False):
    """``(problem, stages)``. Quick: the first quarter of the circle's time (T = 10, 11 knots)."""
    model, x0 = hanging_ball()
    horizon, knots = (10.0, 11) if quick else (PERIOD, 41)
    tol = 1e-8 if quick else 1e-10
    problem = dz.DesignProblem(model, x0, horizon, n_knots=knots, n_samples=51 if quick else 201, rtol=tol, atol=tol)
    mg = float(total_mass(model) * model.g)
    cost = dz.Cost(
        dz.TrackPath(reference, 1e4),
        dz.ControlEffort(1e-3),
        dz.ContactFeasibility(n_min=0.5 * mg, mu=0.5, weight=1e2),
    )
    return problem, [cost]


def run(quick: bool = False, out: str | Path | None = None, progress: bool = True, plots: bool = True) -> dict:
    """Run the experiment; write ``summary.json`` and figures into ``out``; return the summary."""
    problem, stages = build(quick)
    return run_experiment(
        NAME, "(b) paper ball (masses hanging) tracks a circle of radius 2 through the origin in T = 40",
        problem, stages, goals=GOALS, quick=quick, out=out, progress=progress, plots=plots,
        max_steps=8 if quick else 300, refine=2 if quick else 8,
        title="(b) tracking a circle of radius 2", extra={"circle_radius": RADIUS, "period": PERIOD},
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="reduced CI run (few iterations, shorter horizon)")
    ap.add_argument("--out", default=None, help=f"results directory (default runs/design/{NAME})")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    print_summary(NAME, run(quick=args.quick, out=args.out, progress=not args.no_progress))


if __name__ == "__main__":
    main()
