"""Gradient-based trajectory design: steer the ball (or disk) with its internal masses.

Pose a design in a few lines::

    from rollball_jax import design as dz
    problem = dz.DesignProblem(ball, x0, horizon=10.0, n_knots=8)       # u_i(t): splines
    cost = dz.Cost(dz.TargetGC((2.0, 1.0), 1e4), dz.FinalRest(1e2), dz.ControlEffort(1e-3))
    result = dz.optimize(problem, cost, method="lm")                   # exact Jacobians
    report = dz.verify(result)                                         # SciPy DOP853, 1e-12

* :mod:`.problem` — :class:`DesignProblem` (model, x0, horizon, free controls/angles)
  and :class:`Evaluation` (a sampled trajectory with what cost terms need);
* :mod:`.costs` — cost terms as weighted least-squares residuals, summed by :class:`Cost`;
* :mod:`.optimize` — :func:`optimize` (optimistix LM/GN/Dogleg/BFGS, optax Adam) and
  :func:`continuation`, returning a :class:`DesignResult`;
* :mod:`.shooting` — :class:`MultipleShooting`: the horizon cut into segments with free
  initial states and continuity defects (for designs from unstable states);
* :mod:`.feedback` — :func:`tvlqr`: time-varying LQR around a designed motion, as a
  closed-loop :class:`TVLQRControl` (Riccati equation solved backwards with diffrax);
* :mod:`.conditions` — :func:`conditions_met`: goals ``{metric: limit}`` on a design's
  metrics (``optimize(stop_when=...)``, the experiments' goals);
* :mod:`.verify` — :func:`verify`: independent re-simulation with SciPy and the true
  endpoint error and constraint margins.
"""

from .conditions import ConditionCheck, check_condition, conditions_met
from .costs import (
    AbstractCostTerm,
    ContactFeasibility,
    Continuity,
    ControlEffort,
    Cost,
    FinalHeading,
    FinalRest,
    KeepOutDiscs,
    RailAccelBound,
    RailSpeedBound,
    TargetGC,
    TrackPath,
)
from .feedback import TVLQRControl, linearisation, riccati, state_weights, tvlqr
from .optimize import METHODS, DesignResult, continuation, cost_report, optimize, value_and_grad
from .problem import DesignProblem, Evaluation
from .shooting import MultipleShooting
from .verify import Verification, resimulate, verify

__all__ = [
    "AbstractCostTerm",
    "ConditionCheck",
    "ContactFeasibility",
    "Continuity",
    "ControlEffort",
    "Cost",
    "DesignProblem",
    "DesignResult",
    "Evaluation",
    "FinalHeading",
    "FinalRest",
    "KeepOutDiscs",
    "METHODS",
    "MultipleShooting",
    "RailAccelBound",
    "RailSpeedBound",
    "TVLQRControl",
    "TargetGC",
    "TrackPath",
    "Verification",
    "check_condition",
    "conditions_met",
    "continuation",
    "cost_report",
    "linearisation",
    "riccati",
    "state_weights",
    "tvlqr",
    "optimize",
    "resimulate",
    "value_and_grad",
    "verify",
]
