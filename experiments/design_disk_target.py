"""Experiment (d): steer the paper's disk from rest to the GC target z = 3 at T = 10, ending at rest.

The disk of section 6 (four unit masses on concentric circles of radii 0.9 … 0.1) starts
from the paper's initial state (all masses at the bottom, θ = −π/2; CM below the GC).
Free: u_i(t) = θ̈_i of all four masses, natural cubic splines through 8 knots (32 numbers).
The cost is that of experiment (a) with the target z = 3 on e1 (the disk's GC moves
along e1 only): target, rest and equilibrium at T, control effort, rail speed and
acceleration bounds (|θ̇| ≤ 2, |u| ≤ 1, designed with a 0.05 margin), contact
feasibility (N ≥ Mg/2, |F_t| ≤ 0.5 N);
continuation (w_T, w_R, w_B) = (1e2, 1e1, 1e2) then (1e4, 1e3, 1e4); Levenberg–Marquardt
with exact forward-mode Jacobians; verified by SciPy DOP853 at 1e-12.

Run:  python experiments/design_disk_target.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rollball_jax import design as dz
from rollball_jax.app.config import load_config
from rollball_jax.contact import total_mass
from rollball_jax.design.report import print_summary, run_experiment

NAME = "design_disk_target"
TARGET = 3.0
HORIZON = 10.0
GOALS = {"endpoint error <= 1e-3": ("endpoint_error", 1e-3), "final GC speed <= 1e-3": ("final_speed", 1e-3),
         "normal force > 0 throughout": ("-min_normal_verified", 0.0),
         "rail speeds |θ̇| <= 2": ("-rail_speed_margin", 0.0), "rail accelerations |u| <= 1": ("-rail_accel_margin", 0.0)}


def build(quick: bool = False):
    """``(problem, stages)``."""
    cfg = load_config("paper-disk")
    model, x0 = cfg.model, cfg.x0
    tol = 1e-8 if quick else 1e-10
    problem = dz.DesignProblem(model, x0, HORIZON, n_knots=8, n_samples=51 if quick else 201, rtol=tol, atol=tol)
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
        NAME, "(d) paper disk from rest to the GC target z = 3 at T = 10, ending at rest",
        problem, stages, goals=GOALS, quick=quick, out=out, progress=progress, plots=plots,
        max_steps=12 if quick else 300, hold=0.0 if quick else 5.0, refine=2 if quick else 8,
        title="(d) disk to z = 3 at T = 10, ending at rest", extra={"target": TARGET},
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
