"""Benchmark: designing experiment (a) with exact gradients versus finite differences.

Problem: experiment (a) of ``experiments/design_ball_target.py`` — the paper's ball from
rest to the GC target (2, 1) at T = 10, ending at rest; 24 spline knot values; its
final-stage cost (target 1e4, rest 1e3, effort 1e-2, speed/acceleration/contact penalties
1e4), started from zero controls (no continuation, so every route solves the same
problem from the same point).

Routes, all minimising that same cost:

* ``ours (LM)``: ``rollball_jax.design.optimize`` — optimistix Levenberg–Marquardt with
  exact forward-mode Jacobians through the diffrax Dopri8 solve (rtol = atol = 1e-10).
* ``ours (L-BFGS-B, exact grad)``: SciPy ``minimize(method="L-BFGS-B", jac=True)`` fed by
  the package's jit-compiled ``value_and_grad`` (reverse mode through the same solve):
  the same optimiser as the FD route, only the gradient differs.
* ``SciPy FD (least_squares trf)``: SciPy ``least_squares`` (trust-region reflective,
  the same family as LM) with its forward-difference Jacobian (``diff_step`` = 1e-6) of
  the residuals of the SciPy-integrated model below: only the derivatives differ from
  ``ours (LM)``.
* ``SciPy FD (L-BFGS-B)``: SciPy ``minimize(method="L-BFGS-B")`` with its own
  forward-difference gradients (``eps`` = 1e-6, about √(solve tolerance)) of a model
  integrated by SciPy ``solve_ivp(DOP853, rtol = atol = 1e-10)`` restarted at the knots,
  with the jit-compiled vector field (~20 µs a call: a *faster* right-hand side than a
  NumPy one, so the FD route is not handicapped) and the same cost evaluated on the
  SciPy states.

Stopping rule, identical for every route: stop at the first iterate that meets the
design goals of experiment (a) — endpoint error ≤ 1e-3 and final GC speed ≤ 1e-3, as
measured by that route's own solve of the iterate — or when the optimiser stops by
itself, or at the time cap (``--max-time``, default 600 s per route). A route that stops
without meeting the goals gets a lower bound for its time, and its line says so.

The headline is like for like: the same problem, start, stopping rule and optimiser
family (trust region on the residuals), only the derivatives differ. The last line is
``design_speedup_vs_fd: X`` = time(SciPy ``least_squares`` with FD Jacobians) /
time(ours, LM), both including compilation (the first call). The L-BFGS-B routes
(``--lbfgsb``) are context: L-BFGS-B does not meet the goals on this ill-conditioned
penalty problem even with exact gradients, so its FD route runs to the cap.

Run:  python benchmarks/bench_design.py [--max-time 600] [--skip-fd] [--lbfgsb]
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import sys
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from scipy.optimize import minimize

from rollball_jax import design as dz

ROOT = Path(__file__).resolve().parents[1]
GOALS = {"endpoint_error": 1e-3, "final_speed": 1e-3}


def _experiment():
    spec = importlib.util.spec_from_file_location("design_ball_target", ROOT / "experiments" / "design_ball_target.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _metrics(params, problem, cost, xs):
    """Cost, endpoint error and final speed of a trajectory: the package's compiled
    ``cost_report`` (the program ``optimize`` also uses for its final report), for every route."""
    value, _, m = dz.cost_report(params, problem, cost, xs)
    return value, m["endpoint_error"], m["final_speed"]


def _goals_met(endpoint, speed):
    """The design goals (the same test as ``optimize``'s ``stop_when``)."""
    return dz.conditions_met({"endpoint_error": endpoint, "final_speed": speed}, GOALS)


def route_lm(problem, cost, params0, max_time):
    start = time.perf_counter()

    def time_cap(k, params, loss, xs):
        return time.perf_counter() - start > max_time

    # The goals are tested by optimize itself (stop_when), with the cost_report program
    # that also gives its final report, as for a user's own stopping rule.
    res = dz.optimize(problem, cost, params0, method="lm", max_steps=1000, rtol=1e-9, atol=1e-12,
                      progress=False, callback=time_cap, stop_when=GOALS)
    met = _goals_met(res.metrics["endpoint_error"], res.metrics["final_speed"])
    stop = "goals met" if met else ("time cap" if res.message == "stopped by callback" else res.message)
    return {"iterations": res.iterations, "cost": res.value, "endpoint_error": res.metrics["endpoint_error"],
            "final_speed": res.metrics["final_speed"], "stop": stop, "time": res.wall_time,
            "compile_time": res.compile_time, "solves": None}


def _scipy_route(fun, jac, x0, problem, cost, unravel, max_time, eps=None):
    """L-BFGS-B with the shared stopping rule; ``fun`` caches the trajectory of each x."""
    record = {"iterations": 0}
    start = time.perf_counter()

    def callback(intermediate_result):
        x = intermediate_result.x
        record["iterations"] += 1
        xs = fun.cache.get(x.tobytes())
        if xs is None:  # not evaluated at exactly x (should not happen with L-BFGS-B)
            fun(x)
            xs = fun.cache[x.tobytes()]
        value, endpoint, speed = _metrics(unravel(jnp.asarray(x)), problem, cost, jnp.asarray(xs))
        record.update(cost=float(value), endpoint_error=float(endpoint), final_speed=float(speed))
        if _goals_met(endpoint, speed):
            record["stop"] = "goals met"
            raise StopIteration
        if time.perf_counter() - start > max_time:
            record["stop"] = "time cap"
            raise StopIteration

    options = {"maxiter": 100_000, "maxfun": 10_000_000, "ftol": 1e-15, "gtol": 1e-12}
    if eps is not None:
        options["eps"] = eps
    res = minimize(fun, x0, jac=jac, method="L-BFGS-B", callback=callback, options=options)
    record.setdefault("stop", f"scipy: {res.message}")
    record.update(time=time.perf_counter() - start, solves=fun.calls)
    return record


def route_lbfgsb_exact(problem, cost, params0, max_time):
    flat0, unravel = ravel_pytree(params0)
    vg = dz.value_and_grad
    xs_of = eqx.filter_jit(lambda p, problem: problem.evaluate(p).xs)

    def fun(x):
        fun.calls += 1
        p = unravel(jnp.asarray(x))
        value, grad = vg(p, problem, cost)
        if x.tobytes() not in fun.cache:
            fun.cache[x.tobytes()] = np.asarray(xs_of(p, problem))
        return float(value), np.asarray(ravel_pytree(grad)[0])

    fun.calls, fun.cache = 0, {}
    start = time.perf_counter()
    fun(np.asarray(flat0))  # compile value_and_grad and the trajectory
    compile_time = time.perf_counter() - start
    fun.cache.clear()
    fun.calls = 0
    rec = _scipy_route(fun, True, np.asarray(flat0), problem, cost, unravel, max_time)
    rec["time"] += compile_time
    rec["compile_time"] = compile_time
    return rec


def route_fd(problem, cost, params0, max_time, rtol=1e-10, eps=1e-6):
    flat0, unravel = ravel_pytree(params0)
    ts = np.asarray(problem.sample_ts)
    value_of = eqx.filter_jit(lambda p, problem, xs: cost(problem.wrap(p, problem.sample_ts, xs)))

    def fun(x):
        fun.calls += 1
        p = unravel(jnp.asarray(x))
        _, xs, _ = dz.resimulate(problem, p, ts=ts, rtol=rtol, atol=rtol)
        fun.cache[x.tobytes()] = xs
        if len(fun.cache) > 64:
            fun.cache.pop(next(iter(fun.cache)))
        return float(value_of(p, problem, jnp.asarray(xs)))

    fun.calls, fun.cache = 0, {}
    start = time.perf_counter()
    fun(np.asarray(flat0))  # compile the vector field and the cost
    compile_time = time.perf_counter() - start
    fun.calls = 0
    rec = _scipy_route(fun, None, np.asarray(flat0), problem, cost, unravel, max_time, eps=eps)
    rec["time"] += compile_time
    rec["compile_time"] = compile_time
    rec["settings"] = f"DOP853 rtol=atol={rtol:g}, forward differences eps={eps:g}"
    return rec


def route_fd_least_squares(problem, cost, params0, max_time, rtol=1e-10, diff_step=1e-6):
    """SciPy ``least_squares`` (trust-region reflective) with its forward-difference Jacobian."""
    from scipy.optimize import least_squares

    flat0, unravel = ravel_pytree(params0)
    ts = np.asarray(problem.sample_ts)
    residuals_of = eqx.filter_jit(lambda p, problem, xs: cost.residuals(problem.wrap(p, problem.sample_ts, xs)))
    cache = {}

    def fun(x):
        fun.calls += 1
        p = unravel(jnp.asarray(x))
        _, xs, _ = dz.resimulate(problem, p, ts=ts, rtol=rtol, atol=rtol)
        cache[x.tobytes()] = xs
        if len(cache) > 64:
            cache.pop(next(iter(cache)))
        return np.asarray(residuals_of(p, problem, jnp.asarray(xs)))

    fun.calls = 0
    start = time.perf_counter()
    fun(np.asarray(flat0))
    compile_time = time.perf_counter() - start
    fun.calls = 0
    record = {"iterations": 0}

    def callback(intermediate_result):
        x = intermediate_result.x
        record["iterations"] += 1
        if x.tobytes() not in cache:
            fun(x)
        value, endpoint, speed = _metrics(unravel(jnp.asarray(x)), problem, cost, jnp.asarray(cache[x.tobytes()]))
        record.update(cost=float(value), endpoint_error=float(endpoint), final_speed=float(speed))
        if _goals_met(endpoint, speed):
            record["stop"] = "goals met"
            raise StopIteration
        if time.perf_counter() - start > max_time:
            record["stop"] = "time cap"
            raise StopIteration

    res = least_squares(fun, np.asarray(flat0), jac="2-point", method="trf", diff_step=diff_step,
                        ftol=1e-15, xtol=1e-15, gtol=1e-15, max_nfev=1_000_000, callback=callback)
    record.setdefault("stop", f"scipy: {res.message}")
    record.update(time=time.perf_counter() - start, compile_time=compile_time, solves=fun.calls)
    return record


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-time", type=float, default=600.0, help="time cap per route [s] (default 600)")
    ap.add_argument("--skip-fd", action="store_true", help="skip the finite-difference routes")
    ap.add_argument("--lbfgsb", action="store_true", help="also run the L-BFGS-B routes (exact and FD gradients)")
    args = ap.parse_args(argv)

    print(f"python {platform.python_version()}, jax {jax.__version__}, {platform.machine()}, "
          f"{jax.devices()[0].platform}; design of experiment (a), 24 parameters, same cost, "
          f"stop when endpoint error <= 1e-3 and final speed <= 1e-3")
    exp = _experiment()
    problem, stages = exp.build(quick=False)
    cost = stages[-1]
    params0 = problem.initial_params()

    rows = []
    lm = route_lm(problem, cost, params0, args.max_time)
    rows.append(("ours (LM, exact fwd Jacobian)", lm))
    fd = fd_ls = None
    if not args.skip_fd:
        fd_ls = route_fd_least_squares(problem, cost, params0, args.max_time)
        rows.append(("SciPy FD (least_squares trf)", fd_ls))
    if args.lbfgsb:
        ex = route_lbfgsb_exact(problem, cost, params0, args.max_time)
        rows.append(("ours (L-BFGS-B, exact grad)", ex))
        if not args.skip_fd:
            fd = route_fd(problem, cost, params0, args.max_time)
            rows.append(("SciPy FD (L-BFGS-B)", fd))

    print(f"{'route':32s} {'time [s]':>9s} {'compile':>8s} {'iters':>6s} {'solves':>7s} {'cost':>10s} "
          f"{'endpoint':>9s} {'speed':>9s}  stop")
    for name, r in rows:
        solves = "-" if r.get("solves") is None else str(r["solves"])
        print(f"{name:32s} {r['time']:9.1f} {r.get('compile_time', float('nan')):8.1f} {r.get('iterations', 0):6d} "
              f"{solves:>7s} {r.get('cost', float('nan')):10.3e} {r.get('endpoint_error', float('nan')):9.2e} "
              f"{r.get('final_speed', float('nan')):9.2e}  {r['stop']}")
    if fd is not None:
        print(f"FD route: {fd['settings']}")
    lm_run = lm["time"] - lm["compile_time"]
    print(f"ours (LM) without compilation: {lm_run:.1f} s")
    if fd_ls is None:
        print("design_speedup_vs_fd: n/a (--skip-fd)")
        return
    for name, r in (("least_squares", fd_ls), ("L-BFGS-B", fd)):
        if r is None:
            continue
        note = " (FD route stopped without meeting the goals: lower bound)" if r["stop"] != "goals met" else ""
        print(f"speedup vs SciPy FD {name}: {r['time'] / lm['time']:.1f}{note}")
    if lm["stop"] != "goals met":
        print("note: our route stopped without meeting the goals; the ratio below is not like for like")
    print(f"speedup vs SciPy FD least_squares without our compilation: {fd_ls['time'] / lm_run:.1f}")
    print(f"design_speedup_vs_fd: {fd_ls['time'] / lm['time']:.1f}")


if __name__ == "__main__":
    sys.exit(main())
