"""Run an optimiser on a design with exact gradients through the differentiable solve.

Methods (``method=``):

* ``"lm"`` — Levenberg–Marquardt on the weighted residuals (all cost terms are
  least-squares terms): ``optimistix.LevenbergMarquardt`` with Moré's trust-region rule
  (:func:`levenberg_marquardt`; ``"lm-optx"`` keeps optimistix's own rule). The Jacobian comes from forward-mode differentiation through
  the solve (diffrax ``ForwardMode``): one batched tangent solve per iteration, cheap for
  tens of parameters and any number of residuals. The default, and the most reliable
  for terminal constraints and tracking.
* ``"gn"`` / ``"dogleg"`` — ``optimistix.GaussNewton`` / ``optimistix.Dogleg``, same set-up.
* ``"bfgs"`` — ``optimistix.BFGS`` on the scalar cost, gradients by reverse mode
  (the discrete adjoint).
* ``"adam"`` — ``optax.adam`` with a learning-rate schedule (``learning_rate`` a float or
  an ``optax`` schedule, evaluated on the host each step and injected into the optimiser
  state), gradients by reverse mode. Adam takes every step, so an iterate whose solve
  failed (too many steps: a large cost and a NaN gradient) stops it, saying so, with the
  best iterate so far as the result (the others reject such a trial point on its cost).

Each iteration is one call of a jit-compiled function (the optimistix ``step``, or the
``value_and_grad`` + update for optax), compiled once per problem *structure*: a second
call with new weights (continuation), a new initial guess or a new target reuses it.
The report on an iterate (:func:`cost_report`: cost, per-term values, metrics; used by
``stop_when`` and for the result) is one more compiled program, with each term's
residuals and the contact forces computed once (:meth:`Cost.report`; experiment (a)'s
report: trace 0.71 → 0.26 s, XLA compile 1.38 → 0.98 s). (Compiling it in a
background thread while the first step compiles was measured: no gain on 2 cores, mean
−0.2 s over seven alternating pairs of experiment (a), spread ±1.8 s.)
A ``tqdm`` bar shows the progress; the cost history is kept.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import optimistix as optx
from jax.flatten_util import ravel_pytree
from jaxtyping import PyTree
from tqdm.auto import tqdm

from .._typing import ArrayInput, RealScalar
from .conditions import conditions_met
from .costs import Cost
from .problem import DesignProblem, Evaluation
from .shooting import MultipleShooting

__all__ = [
    "optimize", "continuation", "DesignResult", "value_and_grad", "cost_report", "levenberg_marquardt", "METHODS"
]

#: Reduction ratio (actual / predicted) above which an accepted Levenberg–Marquardt step
#: enlarges the trust region (divides the damping by 3.5). optimistix's default is 0.99, so
#: the damping stays where the first rejected steps pushed it unless the model is almost
#: exact; Moré's classical rule (*The Levenberg–Marquardt algorithm: implementation and
#: theory*, 1978) enlarges above 0.75. Measured on the warm start of experiment (b′)
#: (123 spline values, single shooting over T = 40): 108 iterations to the target cost with
#: 0.99, 80 with 0.75, 213 with 0.5 (and optimistix's Dogleg: not there in 300).
LM_HIGH_CUTOFF = 0.75


def levenberg_marquardt(rtol: float, atol: float) -> optx.LevenbergMarquardt:
    """``optimistix.LevenbergMarquardt(rtol, atol)`` whose trust region grows when the
    reduction ratio exceeds :data:`LM_HIGH_CUTOFF` (the solver behind ``method="lm"``)."""
    solver = optx.LevenbergMarquardt(rtol=rtol, atol=atol)
    return eqx.tree_at(lambda s: s.search, solver, optx.ClassicalTrustRegion(high_cutoff=LM_HIGH_CUTOFF))


LEAST_SQUARES = {"lm": levenberg_marquardt, "lm-optx": optx.LevenbergMarquardt, "gn": optx.GaussNewton,
                 "dogleg": optx.Dogleg}
MINIMISERS = {"bfgs": optx.BFGS}
METHODS = (*LEAST_SQUARES, *MINIMISERS, "adam")

_TAGS = frozenset()
_STOP_WHEN_MESSAGE = "stop_when: every metric condition holds"
_TARGET_MESSAGE = "target_cost reached"
#: stop reasons that count as converged (the stall test and a callback do not)
_MET = (_STOP_WHEN_MESSAGE, _TARGET_MESSAGE)
_LSQ_OPTIONS = {"jac": "fwd"}
_MIN_OPTIONS = {"autodiff_mode": "bwd"}


# --------------------------------------------------------------------------------------
# pure functions of (params, (problem, cost))


@eqx.filter_jit
def residual_fn(params: PyTree, args) -> tuple[jax.Array, jax.Array]:
    """Weighted residuals of the cost (forward-mode solve), ``(m,)``, and the sampled
    trajectory as auxiliary output; optimistix signature ``fn(y, args) -> (out, aux)``.

    Jit-compiled with a stable identity, so that JAX caches its jaxpr and the JVP/batched
    jaxprs derived from it: optimistix traces the residuals' linearisation twice (in
    ``init`` and in ``step``), and the second trace then costs almost nothing (measured
    on experiment (a): the LM step's trace 1.63 → 0.09 s)."""
    problem, cost = args
    ev = problem.evaluate(params)
    return cost.residuals(ev), ev.xs


def residual_fn_dense(params: PyTree, args) -> tuple[jax.Array, jax.Array]:
    """:func:`residual_fn` whose linearisation is a dense Jacobian, for the least-squares
    solvers. Its JVP rule computes the whole Jacobian ``J`` ``(m, p)`` by forward mode (one
    solve carrying ``p`` tangents) and returns ``J·t``; so optimistix's linearise →
    materialise → transpose (``Jᵀr``) costs one forward-mode Jacobian and two small matrix
    products, instead of forward mode plus a transposed (reverse-mode) solve with its own
    compilation. Measured on experiment (a) (24 parameters, 1,270 residuals, 2 cores,
    loaded machine): the LM step compiles in 9–11 s instead of 19.6 s; a step costs the
    same (~0.29 s at a moving iterate: the forward-mode Jacobian is most of it)."""
    problem_cost = args
    flat, unravel = ravel_pytree(params)

    def f(v):
        return residual_fn(unravel(v), problem_cost)

    @jax.custom_jvp
    def g(v):
        return f(v)

    @g.defjvp
    def _g_jvp(primals, tangents):
        (v,), (tv,) = primals, tangents
        basis = jnp.eye(v.shape[0], dtype=v.dtype)
        (r, xs), (J, _) = jax.vmap(lambda e: jax.jvp(f, (v,), (e,)), out_axes=(None, 1))(basis)
        return (r, xs), (J @ tv, jnp.zeros_like(xs))

    return g(flat)


@eqx.filter_jit
def cost_fn(params: PyTree, args) -> tuple[jax.Array, jax.Array]:
    """Scalar cost Σ residuals² (reverse-mode solve) and the sampled trajectory; optimistix
    signature. Jit-compiled for the same reason as :func:`residual_fn`."""
    problem, cost = args
    ev = problem.evaluate(params)
    return cost(ev), ev.xs


@eqx.filter_jit
def value_and_grad(params: PyTree, problem: DesignProblem | MultipleShooting, cost: Cost):
    """(cost, d cost / d params), jit-compiled once per structure (reverse mode)."""
    return jax.value_and_grad(lambda p: cost_fn(p, (problem, cost))[0])(params)


@eqx.filter_jit
def _value_and_grad_aux(params, problem, cost):
    return jax.value_and_grad(cost_fn, has_aux=True)(params, (problem, cost))


@eqx.filter_jit
def residuals_and_jacobian(params: PyTree, problem: DesignProblem | MultipleShooting, cost: Cost):
    """(residuals (m,), Jacobian pytree) by forward mode."""
    f = lambda p: residual_fn(p, (problem, cost))[0]  # noqa: E731
    return f(params), jax.jacfwd(f)(params)


@eqx.filter_jit
def _init(solver, y, args, least_squares: bool):
    fn, options = (residual_fn_dense, _LSQ_OPTIONS) if least_squares else (cost_fn, _MIN_OPTIONS)
    f_struct, aux_struct = jax.eval_shape(fn, y, args)
    return solver.init(fn, y, args, options, f_struct, aux_struct, _TAGS)


@eqx.filter_jit
def _step(solver, y, state, args, least_squares: bool):
    fn, options = (residual_fn_dense, _LSQ_OPTIONS) if least_squares else (cost_fn, _MIN_OPTIONS)
    y, state, _ = solver.step(fn, y, args, options, state, _TAGS)
    done, result = solver.terminate(fn, y, args, options, state, _TAGS)
    info = state.f_info
    loss = jnp.sum(info.residual**2) if least_squares else info.f
    return y, state, done, result == optx.RESULTS.successful, loss, state.aux  # aux: trajectory of y


_ADAM = optax.inject_hyperparams(optax.adam)(learning_rate=1e-2)
_ADAM_FAILED_MESSAGE = ("stopped: the solve failed at the last iterate (its gradient is NaN); lower the learning "
                        "rate or raise the problem's max_steps")


@eqx.filter_jit
def _adam_step(y, opt_state, problem, cost):
    (loss, xs), grad = _value_and_grad_aux(y, problem, cost)
    updates, opt_state = _ADAM.update(grad, opt_state, y)
    return optax.apply_updates(y, updates), opt_state, loss, xs


@eqx.filter_jit
def cost_report(params: PyTree, problem: DesignProblem | MultipleShooting, cost: Cost, xs: ArrayInput):
    """``(value, breakdown, metrics)`` of the trajectory ``xs`` ``(T, N)`` already computed at
    ``problem.sample_ts`` for ``params`` (no solve): the cost, its per-term weighted values
    ``{name: value}`` and the terms' metrics ``{name: value}`` (:meth:`Cost.report`: each
    term and the contact forces computed once). One compiled program per problem/cost *structure*, shared by
    :func:`optimize`'s ``stop_when`` test and final report.

    (Computing the report inside the optimiser's step instead, from the same
    trajectory, was measured slower: the step's compile grew by more than this
    program's.)"""
    ev = problem.wrap(params, problem.sample_ts, xs)
    return cost.report(ev)


# --------------------------------------------------------------------------------------


def _floats(d: dict) -> dict[str, float]:
    return {k: float(v) for k, v in d.items()}


@dataclasses.dataclass
class DesignResult:
    """Outcome of :func:`optimize`.

    Attributes
    ----------
    problem, cost : what was solved.
    params : optimised parameter pytree (``values`` (n_free, K), optional ``theta0``).
    method : optimiser used.
    history : (iterations,) cost of the current iterate after each iteration; the first
        entry is the initial cost (optimistix evaluates the initial guess in its first step).
    iterations : optimiser iterations (steps, including rejected trust-region steps).
    wall_time : seconds, including compilation; ``compile_time``: the first iteration's
        seconds (compilation + one step).
    converged : the optimiser's own stopping test, ``target_cost`` or ``stop_when`` was met
        (not when the cost stalled, a callback stopped it, or ``max_steps`` ran out).
    message : why it stopped.
    ts, xs : sample times (T,) and states (T, N) of the optimised design (design solve).
    value, breakdown, metrics : final cost, per-term weighted values, term metrics.
    """

    problem: DesignProblem | MultipleShooting
    cost: Cost
    params: PyTree
    method: str
    history: np.ndarray
    iterations: int
    wall_time: float
    compile_time: float
    converged: bool
    message: str
    ts: np.ndarray
    xs: np.ndarray
    value: float
    breakdown: dict[str, float]
    metrics: dict[str, float]

    @property
    def control(self):
        """The optimised control u(t)."""
        return self.problem.control(self.params)

    @property
    def x0(self) -> np.ndarray:
        """The (possibly optimised) initial state."""
        return np.asarray(self.problem.initial_state(self.params))

    def evaluation(self) -> Evaluation:
        return self.problem.wrap(self.params, self.ts, self.xs)

    def summary(self) -> dict[str, Any]:
        """JSON-friendly summary (no arrays but the parameters)."""
        return {
            "method": self.method,
            "iterations": self.iterations,
            "wall_time_s": self.wall_time,
            "compile_time_s": self.compile_time,
            "converged": self.converged,
            "message": self.message,
            "initial_cost": float(self.history[0]),
            "final_cost": self.value,
            "cost_reduction": float(self.history[0] / max(self.value, 1e-300)),
            "breakdown": self.breakdown,
            "metrics": self.metrics,
            "params": {k: np.asarray(v).tolist() for k, v in self.params.items()},
        }


def optimize(
    problem: DesignProblem | MultipleShooting,
    cost: Cost,
    params: PyTree | None = None,
    *,
    method: str = "lm",
    max_steps: int = 100,
    rtol: RealScalar = 1e-10,
    atol: RealScalar = 1e-12,
    target_cost: float | None = None,
    patience: int | None = 20,
    stall_rtol: float = 1e-6,
    learning_rate: float | Callable[[int], float] = 1e-2,
    progress: bool = True,
    desc: str | None = None,
    callback: Callable[[int, PyTree, float, Any], bool | None] | None = None,
    stop_when: dict[str, float] | None = None,
) -> DesignResult:
    """Minimise ``cost`` over the free parameters of ``problem``.

    Parameters
    ----------
    problem : the :class:`DesignProblem`.
    cost : a :class:`~rollball_jax.design.costs.Cost`.
    params : initial parameters (default ``problem.initial_params()``: zero controls).
    method : ``"lm"`` (default), ``"lm-optx"``, ``"gn"``, ``"dogleg"``, ``"bfgs"`` or ``"adam"`` (see module).
    max_steps : iteration limit.
    rtol, atol : optimistix stopping tolerances (Cauchy test on parameters and cost).
    target_cost : also stop once the cost is at most this.
    patience, stall_rtol : also stop when the best cost has not improved by a relative
        ``stall_rtol`` for ``patience`` iterations (``patience=None`` disables it). Trust-region
        methods can creep along a flat valley for hundreds of iterations with changes
        that the optimistix Cauchy test does not count as converged.
    learning_rate : Adam only: a float, or a schedule ``step -> rate`` (e.g. an optax schedule).
    progress : show a ``tqdm`` bar; ``desc`` labels it.
    callback : ``callback(step, params, cost, xs)`` after every iteration, with the current
        iterate, its cost and its sampled trajectory ``xs`` (at ``problem.sample_ts``);
        return ``True`` to stop.
    stop_when : ``{metric: limit}``: also stop at the first iterate whose metrics
        (``cost.metrics`` of its trajectory) satisfy every ``metric <= limit`` (a name
        prefixed with ``-`` is negated first: ``{"-min_clearance": 0.0}`` is clearance ≥ 0),
        e.g. the design's goals; evaluated by :func:`cost_report` (compiled once, shared
        with the final report).

    Returns a :class:`DesignResult`.

    Raises ``ValueError`` for an unknown method, parameters that do not match the problem,
    or ``max_steps < 1``; ``KeyError`` at the first iteration when a ``stop_when`` metric is
    not one of ``cost.metrics``' names.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")
    template = problem.initial_params()
    if params is None:
        params = template
    elif not isinstance(params, dict):
        raise ValueError(f"params must be a dict like problem.initial_params() "
                         f"({ {k: v.shape for k, v in template.items()} }); got {type(params).__name__}")
    else:
        params = jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype=jnp.float64), params)
        if jax.tree_util.tree_structure(params) != jax.tree_util.tree_structure(template) or any(
            a.shape != b.shape for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(template))
        ):
            raise ValueError(
                "params must match problem.initial_params(): "
                f"{ {k: v.shape for k, v in template.items()} }; got { {k: np.shape(v) for k, v in params.items()} }"
            )
    args = (problem, cost)
    history: list[float] = []
    start = time.perf_counter()
    compile_time = math.nan
    converged, message = False, "max_steps reached"
    bar = tqdm(total=max_steps, desc=desc or f"design ({method})", disable=not progress, leave=False)
    steps = 0
    best_loss, since_best, last_loss = math.inf, 0, None

    def stop_reason(k, params, loss, xs) -> str | None:
        """Why to stop after iterate ``k`` (``None``: go on): ``target_cost``, ``callback``,
        ``stop_when``, then the stall test (which also keeps its count)."""
        nonlocal best_loss, since_best, last_loss
        if target_cost is not None and loss <= target_cost:
            return _TARGET_MESSAGE
        if callback and callback(k, params, loss, xs):
            return "stopped by callback"
        if stop_when and conditions_met(cost_report(params, problem, cost, xs)[2], stop_when):
            return _STOP_WHEN_MESSAGE
        # The stall count runs over accepted steps only: a rejected trial (a line search
        # backtracking, a trust region shrinking) leaves the accepted cost bit-for-bit
        # unchanged. Counting those, BFGS from zero controls stopped after 20 backtracking
        # trials at its first iterate (cost 49 990.6 unchanged) instead of reaching ~945.
        if loss != last_loss:
            if loss < best_loss * (1.0 - stall_rtol):
                best_loss, since_best = loss, 0
            else:
                since_best += 1
        last_loss = loss
        if patience is not None and since_best >= patience:
            return f"cost stalled (no relative improvement > {stall_rtol:g} in {patience} iterations)"
        return None

    try:
        if method == "adam":
            schedule = learning_rate if callable(learning_rate) else (lambda _k, lr=float(learning_rate): lr)
            opt_state = _ADAM.init(params)
            best = (math.inf, params, None)
            for k in range(max_steps):
                opt_state.hyperparams["learning_rate"] = jnp.asarray(schedule(k), dtype=jnp.float64)
                new_params, opt_state, loss, xs = _adam_step(params, opt_state, problem, cost)
                loss = float(loss)  # cost of `params` (before the update)
                if k == 0:
                    compile_time = time.perf_counter() - start
                history.append(loss)
                if loss < best[0]:
                    best = (loss, params, xs)
                steps = k + 1
                bar.update(1)
                bar.set_postfix(cost=f"{loss:.3e}")
                reason = stop_reason(k, params, loss, xs)
                if reason is not None:
                    converged, message = reason in _MET, reason
                    if reason == _STOP_WHEN_MESSAGE:
                        best = (loss, params, xs)  # the iterate that meets the conditions
                    break
                if not all(np.all(np.isfinite(np.asarray(a))) for a in jax.tree.leaves(new_params)):
                    # Adam takes every step: from an iterate whose solve failed (NaN gradient,
                    # rollball_jax._results.checked) it would go on with NaN parameters
                    converged, message = False, _ADAM_FAILED_MESSAGE
                    break
                params = new_params
            params, xs = best[1], best[2]
        else:
            least_squares = method in LEAST_SQUARES
            solver = (LEAST_SQUARES if least_squares else MINIMISERS)[method](rtol=rtol, atol=atol)
            state = _init(solver, params, args, least_squares)
            for k in range(max_steps):
                params, state, done, successful, loss, xs = _step(solver, params, state, args, least_squares)
                loss = float(loss)  # cost of the last accepted iterate `params`
                if k == 0:
                    compile_time = time.perf_counter() - start
                history.append(loss)
                steps = k + 1
                bar.update(1)
                bar.set_postfix(cost=f"{loss:.3e}")
                if bool(done):
                    converged = bool(successful)
                    message = "optimistix stopping test met" if converged else "optimistix stopped without meeting its test (e.g. a failed linear solve)"
                    break
                reason = stop_reason(k, params, loss, xs)
                if reason is not None:
                    converged, message = reason in _MET, reason
                    break
    finally:
        bar.close()
    if not history:
        raise ValueError("max_steps must be at least 1")
    value, breakdown, metrics = cost_report(params, problem, cost, xs)
    value = float(value)
    wall = time.perf_counter() - start
    return DesignResult(
        problem=problem, cost=cost, params=params, method=method, history=np.asarray(history),
        iterations=steps, wall_time=wall, compile_time=compile_time, converged=converged, message=message,
        ts=np.asarray(problem.sample_ts), xs=np.asarray(xs), value=value,
        breakdown=_floats(breakdown), metrics=_floats(metrics),
    )


def continuation(
    problem: DesignProblem | MultipleShooting,
    stages: list[Cost],
    params: PyTree | None = None,
    **optimize_kw,
) -> tuple[DesignResult, list[DesignResult]]:
    """Optimise through a sequence of costs (e.g. increasing constraint weights),
    each stage starting from the previous optimum; compiled once when the stages share
    their structure (same terms, different weights).

    ``optimize_kw`` are :func:`optimize`'s keywords; ``target_cost`` may also be a sequence,
    one value (or ``None``) per stage: an early stage of a continuation only has to bring
    the design close enough for the next one, not converge.

    Returns ``(final result, all stage results)``; the final result's ``history``,
    ``iterations`` and ``wall_time`` cover all stages.

    Raises ``ValueError`` when a sequence ``target_cost`` does not have one entry per stage.
    """
    targets = optimize_kw.pop("target_cost", None)
    if targets is None or np.ndim(targets) == 0:
        targets = [targets] * len(stages)
    targets = list(targets)
    if len(targets) != len(stages):
        raise ValueError(f"target_cost: one value per stage ({len(stages)}); got {len(targets)}")
    results = []
    for i, cost in enumerate(stages):
        desc = optimize_kw.pop("desc", None)
        res = optimize(problem, cost, params, desc=f"{desc or 'design'} stage {i + 1}/{len(stages)}",
                       target_cost=targets[i], **optimize_kw)
        if desc:
            optimize_kw["desc"] = desc
        results.append(res)
        params = res.params
    final = results[-1]
    final = dataclasses.replace(
        final,
        history=np.concatenate([r.history for r in results]),
        iterations=sum(r.iterations for r in results),
        wall_time=sum(r.wall_time for r in results),
        compile_time=results[0].compile_time,
    )
    return final, results
