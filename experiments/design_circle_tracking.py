"""Experiment (b′): the paper's ball, from its own initial state, tracks a circle of radius 2.

Reference: the circle of radius 2 through the origin, centre (0, 2), travelled once
counter-clockwise in the period T (default 40) with a minimum-jerk timing
s(t) = 2π(10τ³ − 15τ⁴ + 6τ⁵), τ = t/T (starts and ends at rest; peak speed
2π·2·15/(8T) ≈ 0.59 radii per unit time at T = 40):

    p(t) = (2 sin s(t), 2 − 2 cos s(t)).

The ball starts in the paper's initial state (7.12): at rest at the origin, total CM
*above* the GC — an inverted pendulum with a time constant ≈ 1, so a motion over 40 time
units has sensitivities ~e^40 and single shooting stalls. The design uses **multiple
shooting** (:class:`rollball_jax.design.MultipleShooting`, ``SEGMENTS`` segments with
free initial states and continuity defects as residuals), and the plan is verified
**closed loop**: a TVLQR controller around the designed segments
(:func:`rollball_jax.design.tvlqr`), the SciPy DOP853 re-simulation at 1e-12 under it
gives the reported tracking error and contact forces. (An open-loop re-simulation of an
unstable plan amplifies the 1e-9 defects and 1e-12 solver errors by ~e^40; it is
reported too, as ``open_loop_verification``.)

Free: u_i(t) = θ̈_i, natural cubic splines through ``KNOTS_PER_UNIT``·T + 1 knots, plus
the states at the segment boundaries. Cost: 1e4·(1/T)∫|z_GC − p|² dt + 1e-3·∫|u|² dt +
1e2·∫[max(0, Mg/2 − N)² + max(0, |F_t| − 0.5 N)²] dt + 1e4·Σ|defects|²,
Levenberg–Marquardt with exact forward-mode Jacobians of all segments.

Run:  python experiments/design_circle_tracking.py [--period 40] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from rollball_jax import design as dz
from rollball_jax.app.config import load_config
from rollball_jax.contact import total_mass
from rollball_jax.design.report import print_summary, run_experiment, write_json

NAME = "design_circle_tracking"
RADIUS = 2.0
PERIOD = 40.0
SEGMENTS = 8
KNOTS_PER_UNIT = 1
#: TVLQR weights (Q diagonal: the GC position z1, z2 FEEDBACK_Z, the orientation
#: FEEDBACK_ORIENTATION, every other state component FEEDBACK_OTHER; R = FEEDBACK_R·I). Tuned
#: on 60 members of experiment (e): a heavier GC weight alone makes the loop fragile under
#: model mismatch (members fail at 3e3 with the rest at 1), a lighter one leaves more
#: tracking error.
FEEDBACK_Z = 1e3
FEEDBACK_OTHER = 10.0
FEEDBACK_R = 0.3
#: The error is taken in geometric coordinates (``tvlqr(error="geometric")``: the body-frame
#: rotation error δφ instead of the four versor components, rail-angle errors wrapped), and
#: the orientation is fed back but not weighted: it is not a goal of the task, and rolling
#: ties it to the GC (at rest the linearised rolling constraint conserves two combinations
#: of δz and the tilt: the final linearisation has two uncontrollable eigenvalues 0), so a
#: weight on it makes the LQR trade GC error for orientation error. Measured on experiment
#: (e), 200 members, seed 20261130: 95th pct 5.23e-2 with the versor weighted like the rest
#: in x − x̄, 5.16e-2 geometric, 5.04e-2 with q unweighted in x − x̄, 4.81e-2 both.
FEEDBACK_ORIENTATION = 0.0
FEEDBACK_ERROR = "geometric"
#: stop the optimiser at this cost: tracking cost ≤ 0.05 ⇒ design RMS ≤ √(0.05/1e4) ≈ 2.2e-3,
#: defects ≤ 2.2e-3 (weight 1e4), a margin of 4–5× on the 1e-2 goal for the closed loop
TARGET_COST = 0.05
#: stop the warm start (hanging masses, single shooting) at this cost: tracking RMS ≈ √(100/1e4)
#: = 0.1, 5 % of the circle's radius. It is only a first guess; multiple shooting then reaches
#: TARGET_COST from the paper's state in the same 14–16 iterations whatever this stop. Measured
#: on an idle 2-core machine (2026-12-01), warm-start iterations / time to a verified design:
#: 0.05 → 80 it / 70.2 s, 0.2 → 70 / 66.5 s, 1 → 54 / 60.5 s, 5 → 50 / 59.9 s, 20 → 47 / 58.2 s,
#: 100 → 44 / 55.4 s, closed-loop RMS 1.4–1.6e-3 in all.
WARM_TARGET_COST = 100.0
GOALS = {"RMS tracking error <= 1e-2 (closed loop)": ("rms_tracking_error", 1e-2),
         "normal force > 0 throughout": ("-min_normal_verified", 0.0)}


def reference_for(period: float):
    """The reference p(t) ``(2,)`` of the circle travelled once in ``period``."""

    def reference(t):
        tau = jnp.clip(t / period, 0.0, 1.0)
        s = 2.0 * jnp.pi * (10.0 * tau**3 - 15.0 * tau**4 + 6.0 * tau**5)
        return jnp.stack([RADIUS * jnp.sin(s), RADIUS - RADIUS * jnp.cos(s)])

    return reference


reference = reference_for(PERIOD)


def feedback_weights(model) -> dict:
    """TVLQR settings: ``Q`` diagonal (GC position ``FEEDBACK_Z``, versor ``FEEDBACK_ORIENTATION``,
    the rest ``FEEDBACK_OTHER``), ``R = FEEDBACK_R·I``, ``error = FEEDBACK_ERROR``."""
    versor = {f"q{i}": FEEDBACK_ORIENTATION for i in range(4)}
    return {"Q": dz.state_weights(model, FEEDBACK_OTHER, z1=FEEDBACK_Z, z2=FEEDBACK_Z, **versor),
            "R": FEEDBACK_R * np.eye(model.n), "error": FEEDBACK_ERROR}


#: rail angles of the paper's ball with the total CM straight below the GC, as low as
#: possible (SLSQP: min CM height s.t. horizontal CM offset = 0); CM at (0, 0, −0.392)
HANGING_THETA = (-1.1064350487592685, 1.2068076912298538, 4.18845850268088 - 2 * np.pi)


def warm_start(ms, period: float = PERIOD, quick: bool = False, progress: bool = True,
               target_cost: float = WARM_TARGET_COST):
    """Initial parameters for the multiple-shooting design: the same tracking problem
    solved first from *hanging* masses (total CM below the GC, a stable pendulum: single
    shooting converges there), its controls and its states at the segment boundaries
    taken as the first guess. Only the first segment then has to bring the masses from
    the paper's state onto that motion. Returns ``(params, DesignResult of the hanging design)``."""
    base = ms.problem
    model = base.model
    x_h = np.asarray(model.initial_state(theta=HANGING_THETA))
    hanging = dz.DesignProblem(model, x_h, base.horizon, n_knots=base.n_knots, n_samples=base.n_samples,
                               rtol=base.rtol, atol=base.atol)
    cost = dz.Cost(*[t for t in ms_cost_terms(model, period)])
    res = dz.optimize(hanging, cost, method="lm", max_steps=8 if quick else 300, progress=progress,
                      desc="warm start (hanging masses)", target_cost=target_cost)
    # the boundaries are every per_segment-th sample time: the design solve already has the states there
    nodes = np.asarray(res.xs)[:: ms.per_segment][1:-1]
    return ms.initial_params(values=res.params["values"], nodes=nodes), res


def ms_cost_terms(model, period: float):
    """Tracking, effort and contact terms (without the continuity term)."""
    mg = float(total_mass(model) * model.g)
    return (dz.TrackPath(reference_for(period), 1e4), dz.ControlEffort(1e-3),
            dz.ContactFeasibility(n_min=0.5 * mg, mu=0.5, weight=1e2))


def build(quick: bool = False, period: float = PERIOD):
    """``(multiple-shooting problem, stages)``. Quick: the first quarter of the period."""
    cfg = load_config("paper-ball")
    model, x0 = cfg.model, cfg.x0
    horizon = period / 4 if quick else period
    knots = int(round(KNOTS_PER_UNIT * horizon)) + 1
    segments = 2 if quick else SEGMENTS
    samples = segments * (5 if quick else 25) + 1
    tol = 1e-8
    problem = dz.DesignProblem(model, x0, horizon, n_knots=knots, n_samples=samples, rtol=tol, atol=tol)
    ms = dz.MultipleShooting(problem, segments)
    return ms, [dz.Cost(*ms_cost_terms(model, period), ms.continuity(1e4))]


def run(quick: bool = False, out: str | Path | None = None, progress: bool = True, plots: bool = True,
        period: float = PERIOD, max_steps: int | None = None, warm: bool = True,
        warm_target: float | None = None) -> dict:
    """Run the experiment; write ``summary.json`` and figures into ``out``; return the summary.

    ``warm_target``: cost at which the warm start stops (default ``WARM_TARGET_COST``; quick:
    ``TARGET_COST``, since the quick run's 8 multiple-shooting iterations need a closer guess)."""
    import time

    if warm_target is None:
        warm_target = TARGET_COST if quick else WARM_TARGET_COST
    ms, stages = build(quick, period)
    name = NAME if period == PERIOD else f"{NAME}_T{period:g}"
    out = Path(out or f"runs/design/{name}" + ("_quick" if quick else ""))
    start = time.perf_counter()
    params0, hanging = warm_start(ms, period, quick, progress, warm_target) if warm else (None, None)
    warm_info = None if hanging is None else {
        "what": "same tracking problem from hanging masses (single shooting); its controls and boundary states",
        "target_cost": warm_target, "iterations": hanging.iterations, "wall_time_s": time.perf_counter() - start,
        "rms_tracking_error": hanging.metrics["rms_tracking_error"]}
    summary = run_experiment(
        name, f"(b′) paper ball from its initial state (7.12) tracks a circle of radius 2 in T = {period:g}",
        ms, stages, params0, goals=GOALS, quick=quick, out=out, progress=progress, plots=plots,
        max_steps=max_steps or (8 if quick else 300), refine=2 if quick else 8,
        title=f"(b′) circle of radius 2 in T = {period:g} (closed loop)",
        extra={"circle_radius": RADIUS, "period": period, "warm_start": warm_info}, target_cost=TARGET_COST,
        feedback=feedback_weights(ms.model),
    )
    if warm_info is not None:
        summary["time_to_verified_design_s"] = summary["total_wall_time_s"] + warm_info["wall_time_s"]
        write_json(out / "summary.json", summary)
    return summary


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--period", type=float, default=PERIOD, help=f"time for one circle (default {PERIOD:g})")
    ap.add_argument("--max-steps", type=int, default=None, help="optimiser iterations (default 300)")
    ap.add_argument("--quick", action="store_true", help="reduced CI run (few iterations, shorter horizon)")
    ap.add_argument("--cold", action="store_true", help="no warm start: nodes from one solve of zero controls")
    ap.add_argument("--warm-target", type=float, default=None,
                    help=f"cost at which the warm start stops (default {WARM_TARGET_COST:g}; quick: {TARGET_COST:g})")
    ap.add_argument("--out", default=None, help=f"results directory (default runs/design/{NAME}[_T<period>])")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    print_summary(NAME, run(quick=args.quick, out=args.out, progress=not args.no_progress, period=args.period,
                            max_steps=args.max_steps, warm=not args.cold, warm_target=args.warm_target))


if __name__ == "__main__":
    main()
