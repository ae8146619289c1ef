"""Experiment (c): reach a target behind a disc obstacle, ending at rest.

The paper's ball starts at rest at the origin with its masses hanging (total CM below
the GC, as in experiment (b)) and must bring its GC to (4, 0) at T = 20, at rest, while
the GC path stays outside the disc of radius 0.75 centred at (2, 0.25), which blocks the
straight route. Free: u_i(t), natural cubic splines through 21 knots (63 numbers).

Cost: w_T·|z_GC(T) − (4, 0)|² + w_R·(rest and equilibrium at T, as in (a))
+ w_O·∫ max(0, 0.75 + 0.05 − |z_GC − c|)² dt (keep-out disc with a 0.05 design margin)
+ 1e-2·∫|u|² dt + 1e2·∫[max(0, Mg/2 − N)² + max(0, |F_t| − 0.5 N)²] dt.
Continuation: (w_T, w_R, w_O) = (1e2, 1e1, 1e2) then (1e4, 1e3, 1e4). Levenberg–Marquardt
with exact forward-mode Jacobians; verified by SciPy DOP853 at 1e-12 on a grid 8× denser
than the design's (obstacle clearance, endpoint, normal force).

Run:  python experiments/design_obstacle.py [--quick] [--out DIR]
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

NAME = "design_obstacle"
TARGET = (4.0, 0.0)
OBSTACLE_CENTER = (2.0, 0.25)
OBSTACLE_RADIUS = 0.75
HORIZON = 20.0
#: masses hanging, total CM straight below the GC (see design_circle_tracking.py)
HANGING_THETA = (-1.1064350487592685, 1.2068076912298538, 4.18845850268088 - 2 * np.pi)
GOALS = {"no obstacle penetration (clearance >= 0)": ("-min_clearance", 0.0),
         "normal force > 0 throughout": ("-min_normal_verified", 0.0),
         "endpoint error <= 1e-3": ("endpoint_error", 1e-3),
         "final GC speed <= 1e-3": ("final_speed", 1e-3)}


def build(quick: bool = False):
    """``(problem, stages)``."""
    model = load_config("paper-ball").model
    x0 = np.asarray(model.initial_state(theta=HANGING_THETA))
    cm = np.asarray(rb.observables.system_cm_body(model, jnp.asarray(x0)))
    assert np.hypot(cm[0], cm[1]) < 1e-12 and cm[2] < 0, cm
    tol = 1e-8 if quick else 1e-10
    problem = dz.DesignProblem(model, x0, HORIZON, n_knots=21, n_samples=51 if quick else 201, rtol=tol, atol=tol)
    mg = float(total_mass(model) * model.g)

    def cost(w_target, w_rest, w_obstacle):
        return dz.Cost(
            dz.TargetGC(TARGET, w_target),
            dz.FinalRest(w_rest),
            dz.KeepOutDiscs([OBSTACLE_CENTER], [OBSTACLE_RADIUS], w_obstacle, margin=0.05),
            dz.ControlEffort(1e-2),
            dz.ContactFeasibility(n_min=0.5 * mg, mu=0.5, weight=1e2),
        )

    stages = [cost(1e2, 1e1, 1e2), cost(1e4, 1e3, 1e4)]
    return problem, (stages[:1] if quick else stages)


def run(quick: bool = False, out: str | Path | None = None, progress: bool = True, plots: bool = True) -> dict:
    """Run the experiment; write ``summary.json`` and figures into ``out``; return the summary."""
    problem, stages = build(quick)
    return run_experiment(
        NAME, "(c) paper ball (masses hanging) to (4, 0) at T = 20 around a disc obstacle, ending at rest",
        problem, stages, goals=GOALS, quick=quick, out=out, progress=progress, plots=plots,
        max_steps=8 if quick else 300, hold=0.0 if quick else 5.0, refine=2 if quick else 8,
        title="(c) around a disc obstacle to (4, 0)",
        extra={"target": TARGET, "obstacle": {"center": OBSTACLE_CENTER, "radius": OBSTACLE_RADIUS}},
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="reduced CI run (few iterations, looser tolerances)")
    ap.add_argument("--out", default=None, help=f"results directory (default runs/design/{NAME})")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    print_summary(NAME, run(quick=args.quick, out=args.out, progress=not args.no_progress))


if __name__ == "__main__":
    main()
