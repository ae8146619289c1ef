"""Cost of exact derivatives on the paper's rolling ball (Putkaradze & Rogers, sec. 7), in one run.

Rows:
  * ∂f/∂x of the vector field (7.2): forward-mode autodiff vs complex step (the paper's
    method, 15 complex evaluations of the same JAX vector field), both jit-compiled;
  * a forward solve of the paper ball over [0, 20] at rtol = atol = 1e-10 (final GC),
    compiled ``rb.integrate`` (diffrax Dopri8), the reference for the ratios;
  * the same final GC through the discrete adjoint's recording pass (no derivative);
  * the gradient of the final GC's e1 component w.r.t. ALL parameters (every array leaf
    of the model and control, and x0) by reverse mode through the discrete adjoint
    (default ``adjoint="discrete"``, default derivative-aware step control: the tangent
    bound, ``tangent_control="bound"``);
  * the same gradient's program called directly (ahead-of-time compiled, no ``jax.jit``
    dispatch): the difference to the row above is the dispatch; likewise the discrete
    adjoint's primal (recording pass + the replay's looked-up values), whose jitted
    program holds the replay primitive and so pays JAX's Python dispatch on every call
    (here with ``throw=False``: an AOT-compiled program that holds a host callback, the
    run-time error check, is called through JAX's Python path as well);
  * the same gradient with ``throw=False`` (no run-time error check, as the forward solve,
    which returns ``inf`` states instead of raising; equinox's check is a host callback);
  * the recording pass and the gradient with ``tangent_control="tangent"`` (a carried
    probe tangent: a second state through every stage instead of the bound's one field
    evaluation a step; the choice for models with fast damping), and how far the gradient
    is from the default's;
  * the Jacobian of the final GC (2 outputs) w.r.t. the same parameters by forward mode;
  * the floor of any reverse pass: one VJP of the vector field per recorded step and
    replayed stage, back to back, nothing else;
  * likewise the forward solve's own vector-field evaluations alone (its steps times the
    evaluations per step), which splits the forward solve's time into the field and the
    rest (diffrax's loop, step-size control, stage sums);
each with compile time, steady per-call time (median) and ratio to the forward solve; the
solve rows are timed side by side (rounds of five calls of each, the last three timed),
so the ratios hold on a machine whose speed drifts.
Last lines: ``gradient_floor_over_forward: X`` (the AOT-compiled primal + the VJPs, over
the forward solve), the best-of ratios, ``gradient_compile_s: X``, then ``gradient_over_forward: X``
(reverse-mode gradient time / forward solve time, medians) — the issue's two figures last.

Run: ``python benchmarks/bench_derivatives.py [--repeats N]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import rollball_jax as rb
import diffrax as dfx

from rollball_jax import _discrete_adjoint as discrete_adjoint, _rk, jacobians

T_SPAN = (0.0, 20.0)
TOL = 1e-10


def paper_ball():
    v = [[0.0, 0.0, 1.0], [np.pi / 2, 0.0, 1.0], [np.pi / 4, np.pi / 4, 1.0]]
    rails = [rb.CircleRail.paper(r, vi) for r, vi in zip([0.95, 0.9, 0.85], v)]
    ball = rb.Ball(1.0, 1.0, [0.9, 1.0, 1.1], [0.0, 0.0, -0.05], 1.0, [1.0, 1.0, 1.0], rails)
    x0 = jnp.asarray(ball.initial_state(theta=[0.0, 2.0369, 0.7044]))
    return ball, rb.PaperStep.ball(3), x0


def timed(fn, *args, repeats: int):
    """(compile+first call [s], median steady call [s]) of a jitted function."""
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - start
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        samples.append(time.perf_counter() - start)
    steady = statistics.median(samples)
    return max(first - steady, 0.0), steady


def timed_side_by_side(calls: dict, repeats: int) -> dict:
    """``{name: (compile+first call − steady [s], median steady call [s])}`` for ``calls``
    ``{name: (jitted fn, args)}``: each is compiled first, then the timed calls take turns
    (per round, each is called five times and the last three calls timed: warm caches, as
    in a loop of calls), so a machine whose speed drifts during the run shifts every row alike and
    the ratios between rows stay meaningful."""
    first = {}
    for name, (fn, fargs) in calls.items():
        start = time.perf_counter()
        jax.block_until_ready(fn(*fargs))
        first[name] = time.perf_counter() - start
    samples = {name: [] for name in calls}
    for _ in range(repeats):
        for name, (fn, fargs) in calls.items():
            for k in range(5):  # two untimed calls warm the caches, as in a loop of calls
                start = time.perf_counter()
                jax.block_until_ready(fn(*fargs))
                if k >= 2:
                    samples[name].append(time.perf_counter() - start)
    out = {}
    for name in calls:
        steady = statistics.median(samples[name])
        out[name] = (max(first[name] - steady, 0.0), steady, min(samples[name]))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed repeats per row (median reported); for the solve rows, rounds of 3 timed calls")
    args = parser.parse_args(argv)

    print("rollball_jax derivative benchmark: paper ball (Putkaradze & Rogers, sec. 7), t in [0, 20], tol 1e-10")
    print(f"python {platform.python_version()} | jax {jax.__version__} ({jax.default_backend()}) | "
          f"cpu count {os.cpu_count()} | rollball_jax {rb.__version__}")

    ball, ctl, x0 = paper_ball()
    t = 0.05  # inside the first ramp of u(t): every term of (7.4) is active
    x = x0.at[3:6].set(0.05).at[10:13].set(jnp.array([0.01, -0.02, 0.03]))
    rows = []

    # -- vector-field Jacobian ------------------------------------------------------------
    jac_ad = lambda: jacobians.state_jacobian(ball, ctl, t, x)
    jac_cs = lambda: jacobians.complex_step_jacobian(ball, ctl, t, x)
    c_ad, s_ad = timed(jac_ad, repeats=args.repeats * 10)
    c_cs, s_cs = timed(jac_cs, repeats=args.repeats * 10)
    diff = float(np.max(np.abs(np.asarray(jac_ad()) - np.asarray(jac_cs()))) / np.max(np.abs(np.asarray(jac_ad()))))
    rows.append(("df/dx autodiff (jacfwd)", c_ad, s_ad, None, ""))
    rows.append(("df/dx complex step", c_cs, s_cs, None, f"max rel. diff to autodiff {diff:.1e}"))

    # -- solves and derivatives -----------------------------------------------------------
    params, static = eqx.partition((ball, ctl, x0), eqx.is_array)
    n_params = sum(leaf.size for leaf in jax.tree_util.tree_leaves(params))

    def gc(p, adjoint, tangent_control=discrete_adjoint.DEFAULT_TANGENT_CONTROL, throw=True):
        model, control, y0 = eqx.combine(p, static)
        return rb.final_gc(model, control, y0, T_SPAN, rtol=TOL, atol=TOL, adjoint=adjoint,
                           tangent_control=tangent_control, throw=throw)[:2]

    def gc_integrate(p):
        model, control, y0 = eqx.combine(p, static)
        sol = rb.integrate(model, control, y0, jnp.asarray(T_SPAN), rtol=TOL, atol=TOL)
        return rb.sensitivity.gc_position(model, sol.ys[1][-1], y0, 0.0)[:2]

    forward = jax.jit(gc_integrate)
    recording = jax.jit(lambda p: gc(p, "discrete"))
    # The primal called directly: a jitted program that holds the replay primitive goes
    # through JAX's Python dispatch on every call (docs/derivatives.md, *Dispatch*), which
    # the jitted gradient does not; the floor below uses this one. Without the run-time
    # error check (throw=False): an ahead-of-time compiled program that holds a host
    # callback is called through JAX's Python path too (*The run-time error check*).
    recording_aot = jax.jit(lambda p: gc(p, "discrete", throw=False)).lower(params).compile()
    grad_rev = jax.jit(jax.grad(lambda p: gc(p, "discrete")[0]))
    # The same program called directly, without jax.jit's dispatch (ahead-of-time compiled).
    # Its own jax.jit object: ``grad_rev.lower(...).compile()`` here would fill grad_rev's
    # caches, and its first call below would no longer include the compile.
    grad_aot = jax.jit(jax.grad(lambda p: gc(p, "discrete")[0])).lower(params).compile()
    jac_fwd = jax.jit(jax.jacfwd(lambda p: gc(p, "discrete")))
    recording_tangent = jax.jit(lambda p: gc(p, "discrete", "tangent"))
    grad_tangent = jax.jit(jax.grad(lambda p: gc(p, "discrete", "tangent")[0]))
    # Without the run-time error check (``throw=False``: a failed solve gives inf instead of
    # raising), as the forward solve (rb.integrate) runs. The check is a host callback in a
    # not-taken branch (equinox's error_if), whose program JAX executes through its Python
    # path instead of its C++ fast path (docs/derivatives.md, *The run-time error check*).
    grad_nothrow = jax.jit(jax.grad(lambda p: gc(p, "discrete", throw=False)[0]))
    # -- floor of any reverse pass built from VJPs of the vector field ---------------------
    # The recorded solve has K accepted steps of S stages; a reverse pass needs (at least)
    # one VJP of the field w.r.t. (state, parameters) per stage. Here exactly K·S of them
    # run back to back in one compiled loop (each depends on the previous one, as in a
    # reverse sweep, and every parameter cotangent is accumulated) with nothing else: no
    # step control, no replay, no stage sums.
    vf, vf_params = discrete_adjoint.model_field(ball, ctl)
    tab = _rk.Tableau.from_solver(dfx.Dopri8())
    # Compiled, as the gradient runs it: the tangent bound's finite-difference product J·u
    # rounds differently op by op, and its accepted steps can differ (47 eagerly, 51 jitted).
    mode = discrete_adjoint.tangent_mode(discrete_adjoint.DEFAULT_TANGENT_CONTROL)
    record = jax.jit(lambda: _rk.adaptive_solve(
        tab, lambda tt, y: vf(vf_params, tt, y), T_SPAN[0], T_SPAN[1], x0, rtol=TOL, atol=TOL,
        jump_ts=ctl.kink_times, max_steps=4096, save_ts=jnp.asarray(T_SPAN),
        probe_v0=None if mode is None else jnp.asarray(discrete_adjoint._probe_direction(x0.shape[0])),
        probe=mode or "tangent",
    ))()[0]
    n_stages = _rk.solution_stages(tab)  # the stages a replayed step evaluates
    n_vjp = int(record.num_accepted) * n_stages

    @jax.jit
    def vjp_floor(p, y):
        def body(i, carry):
            lam, acc = carry
            # the model's own VJP, as the reverse sweep calls it (ModelField.vjp)
            g_y, g_p = vf.vjp(p, 0.05 + 1e-3 * i, y + 1e-9 * lam, lam)
            return lam + 1e-3 * g_y, jax.tree_util.tree_map(jnp.add, acc, g_p)

        return jax.lax.fori_loop(0, n_vjp, body, (jnp.ones_like(y), jax.tree_util.tree_map(jnp.zeros_like, p)))

    # -- the forward solve's own field evaluations, back to back -----------------------
    # Its steps (accepted + rejected) times the evaluations per step (FSAL: one stage is
    # the previous step's last), with nothing else: what the solve would cost if its loop,
    # step control and stage sums were free.
    stats = jax.jit(lambda p: rb.integrate(*eqx.combine(p, static), jnp.asarray(T_SPAN), rtol=TOL, atol=TOL).stats)(params)
    n_eval = int(stats["num_steps"]) * (len(tab.b_sol) - int(tab.fsal)) + 1

    @jax.jit
    def field_floor(p, y):
        return jax.lax.fori_loop(0, n_eval, lambda i, z: z + 1e-9 * vf(p, 0.05 + 1e-3 * i, z), y)

    timings = timed_side_by_side({
        "forward": (forward, (params,)), "recording": (recording, (params,)),
        "recording_aot": (recording_aot, (params,)), "reverse": (grad_rev, (params,)),
        "reverse_aot": (grad_aot, (params,)),
        "recording_tangent": (recording_tangent, (params,)), "reverse_tangent": (grad_tangent, (params,)),
        "reverse_nothrow": (grad_nothrow, (params,)),
        "jacfwd": (jac_fwd, (params,)), "vjps": (vjp_floor, (vf_params, x)), "fields": (field_floor, (vf_params, x)),
    }, repeats=args.repeats)
    (c_f, s_f, b_f), (c_d, s_d, b_d), (c_r, s_r, b_r), (c_j, s_j, _), (c_v, s_v, b_v), (c_e, s_e, _) = (
        timings[k] for k in ("forward", "recording", "reverse", "jacfwd", "vjps", "fields"))
    s_a = timings["reverse_aot"][1]
    _, s_da, b_da = timings["recording_aot"]
    (c_dt, s_dt, _), (c_rt, s_rt, b_rt) = timings["recording_tangent"], timings["reverse_tangent"]
    g_tangent = np.asarray(jax.flatten_util.ravel_pytree(grad_tangent(params))[0])
    g_rev = np.asarray(jax.flatten_util.ravel_pytree(grad_rev(params))[0])
    g_fwd = np.asarray(jax.flatten_util.ravel_pytree(jax.tree_util.tree_map(lambda a: a[0], jac_fwd(params)))[0])
    agree = float(np.max(np.abs(g_rev - g_fwd)) / np.max(np.abs(g_fwd)))
    prim = float(np.max(np.abs(np.asarray(recording(params)) - np.asarray(forward(params)))))

    rows.append(("forward solve (final GC)", c_f, s_f, 1.0, "jit(rb.integrate), Dopri8"))
    rows.append(("discrete adjoint primal", c_d, s_d, s_d / s_f, f"recording pass; |GC - integrate| {prim:.1e}"))
    rows.append(("discrete adjoint primal, AOT-compiled", None, s_da, s_da / s_f,
                 "throw=False, called directly: no Python dispatch (replay primitive, host callback)"))
    rows.append((f"gradient, reverse ({n_params} params)", c_r, s_r, s_r / s_f, f"rev vs fwd rel. diff {agree:.1e}"))
    rows.append(("gradient, called AOT-compiled", None, s_a, s_a / s_f,
                 "jax.jit(g).lower(p).compile(): the same program without jax.jit's dispatch"))
    c_nt, s_nt, _ = timings["reverse_nothrow"]
    g_nt = np.asarray(jax.flatten_util.ravel_pytree(grad_nothrow(params))[0])
    rows.append(("gradient, throw=False", c_nt, s_nt, s_nt / s_f,
                 f"no run-time error check; rel. diff to the default's {float(np.max(np.abs(g_nt - g_rev)) / np.max(np.abs(g_rev))):.1e}"))
    rows.append(("recording pass, carried tangent", c_dt, s_dt, s_dt / s_f, 'tangent_control="tangent"'))
    rows.append(("gradient, carried tangent", c_rt, s_rt, s_rt / s_f,
                 f"rel. diff to the default's gradient {float(np.max(np.abs(g_tangent - g_rev)) / np.max(np.abs(g_rev))):.1e}"))
    rows.append((f"Jacobian, forward ({n_params} params)", c_j, s_j, s_j / s_f, "2 outputs"))
    rows.append((f"{n_vjp} VJPs of the field only", c_v, s_v, s_v / s_f,
                 f"{int(record.num_accepted)} recorded steps x {n_stages} stages, back to back"))
    rows.append((f"{n_eval} evaluations of the field only", c_e, s_e, s_e / s_f,
                 f"the forward solve's {int(stats['num_steps'])} steps x {len(tab.b_sol) - int(tab.fsal)} (FSAL) + 1, back to back"))

    print()
    print(f"{'quantity':38s} {'compile[s]':>10s} {'time[ms]':>10s} {'/forward':>9s}  note")
    print("-" * 100)
    for name, comp, steady, ratio, note in rows:
        r = "" if ratio is None else f"{ratio:9.2f}"
        c = "" if comp is None else f"{comp:10.2f}"
        print(f"{name:38s} {c:>10s} {steady * 1e3:10.4f} {r:>9s}  {note}")
    print()
    faster, ratio = ("autodiff", s_cs / s_ad) if s_ad <= s_cs else ("complex step", s_ad / s_cs)
    print(f"df/dx: autodiff {s_ad * 1e6:.1f} us, complex step {s_cs * 1e6:.1f} us: {faster} {ratio:.1f}x faster")
    print(f"forward solve: field evaluations {100 * s_e / s_f:.0f} % of its time, "
          f"loop, step control and stage sums {1e3 * (s_f - s_e):.2f} ms")
    print(f"gradient_floor_over_forward: {(s_da + s_v) / s_f:.2f}  (AOT-compiled primal + the VJPs alone)")
    print(f"best of {3 * args.repeats}: gradient/forward {b_r / b_f:.2f}, floor/forward {(b_da + b_v) / b_f:.2f}, "
          f"carried-tangent gradient/forward {b_rt / b_f:.2f}")
    print(f"carried_tangent_gradient_over_forward: {s_rt / s_f:.2f}")
    print(f"gradient_compile_s: {c_r:.2f}")
    print(f"gradient_over_forward: {s_r / s_f:.2f}")


if __name__ == "__main__":
    main()
