"""Experiment (a): steer the paper's ball from rest at the origin to the GC target (2, 1) at
T = 10 (units of the ball radius), ending at rest.

Free: the rail accelerations u_i(t) = θ̈_i of the three masses, natural cubic splines
through 8 equally spaced knots on [0, 10] (24 numbers); the ball starts from the paper's
initial state (7.12) (at rest, total CM above the GC). Cost (least squares):

    w_T·|z_GC(T) − (2, 1)|²                                    reach the target
  + w_R·(|ω(T)|² + |θ̇(T)|² + |CM offset(T)|² + |u(T)|²)        end at rest, in equilibrium
  + 1e-2·∫|u|² dt                                              control effort
  + w_B·∫ Σ_i max(0, |θ̇_i| − 1.95)² + max(0, |u_i| − 0.95)² dt  rail speed/acceleration bounds
  + w_B·∫ max(0, Mg/2 − N)² + max(0, |F_t| − 0.5 N)² dt         contact: N ≥ Mg/2, |F_t| ≤ 0.5 N

solved by Levenberg–Marquardt (optimistix) with exact forward-mode Jacobians through the
diffrax solve, in two stages of increasing weights (continuation: (w_T, w_R, w_B) =
(1e2, 1e1, 1e2) then (1e4, 1e3, 1e4)). The design is re-simulated with SciPy DOP853 at
1e-12 (restarted at the knots), which gives the reported endpoint error, final speed and
margins, and held for 5 time units after T to show that it stays at rest.

Run:  python experiments/design_ball_target.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rollball_jax import design as dz
from rollball_jax.app.config import load_config
from rollball_jax.contact import total_mass
from rollball_jax.design.report import print_summary, run_experiment

NAME = "design_ball_target"
TARGET = (2.0, 1.0)
HORIZON = 10.0
GOALS = {"endpoint error <= 1e-3": ("endpoint_error", 1e-3), "final GC speed <= 1e-3": ("final_speed", 1e-3),
         "normal force > 0 throughout": ("-min_normal_verified", 0.0),
         "rail speeds |θ̇| <= 2": ("-rail_speed_margin", 0.0), "rail accelerations |u| <= 1": ("-rail_accel_margin", 0.0)}


def build(quick: bool = False):
    """``(problem, stages)``: the design problem and its continuation stages (costs)."""
    cfg = load_config("paper-ball")
    model, x0 = cfg.model, cfg.x0
    tol = 1e-8 if quick else 1e-10
    problem = dz.DesignProblem(model, x0, HORIZON, n_knots=8, control="spline",
                               n_samples=51 if quick else 201, rtol=tol, atol=tol)
    mg = float(total_mass(model) * model.g)

    def cost(w_target, w_rest, w_bounds):
        return dz.Cost(
            dz.TargetGC(TARGET, w_target),
            dz.FinalRest(w_rest, equilibrium=True, hold=True),
            dz.ControlEffort(1e-2),
            dz.RailSpeedBound(2.0, w_bounds, margin=0.05),
            dz.RailAccelBound(1.0, w_bounds, margin=0.05),
            dz.ContactFeasibility(n_min=0.5 * mg, mu=0.5, weight=w_bounds),
        )

    stages = [cost(1e2, 1e1, 1e2), cost(1e4, 1e3, 1e4)]
    return problem, (stages[-1:] if quick else stages)


def run(quick: bool = False, out: str | Path | None = None, progress: bool = True, plots: bool = True) -> dict:
    """Run the experiment; write ``summary.json`` and figures into ``out``; return the summary."""
    problem, stages = build(quick)
    return run_experiment(
        NAME, "(a) paper ball from rest to the GC target (2, 1) at T = 10, ending at rest",
        problem, stages, goals=GOALS, quick=quick, out=out, progress=progress, plots=plots,
        max_steps=12 if quick else 300, hold=0.0 if quick else 5.0, refine=2 if quick else 8,
        title="(a) ball to (2, 1) at T = 10, ending at rest", extra={"target": TARGET},
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--quick", action="store_true", help="reduced CI run (few iterations, looser tolerances)")
    ap.add_argument("--out", default=None, help=f"results directory (default runs/design/{NAME})")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    print_summary(NAME, run(quick=args.quick, out=args.out, progress=not args.no_progress))


if __name__ == "__main__":
    main()
