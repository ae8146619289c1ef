"""Fuzz the input handling: thousands of random designs, valid and invalid, batch and single.

Every design is a ball or a disk with 1–3 point masses on rails of every kind (circle,
ellipse, figure-eight, spoke, ``FunctionRail``), driven by every control kind (constant,
paper step, piecewise linear, cubic spline, ``FunctionControl``), with random values and,
for about half of them, exactly one injected fault: a bad value at construction (NaN or
non-positive mass / inertia / radius, a rail outside the shell, NaN control values), a bad
state (versor |q| ≠ 1, NaN, wrong length), bad settings (rtol ≤ 0, max_steps = 0), a NaN
slipped into a built model with ``eqx.tree_at`` (must surface as a non-finite vector
field at run time), or an open ``FunctionRail`` that carries its mass out of the shell.

Each design is classified as one outcome:

* ``ok`` — valid, solved, finite;
* ``valid_failed_with_cause`` — valid, the solve stopped with a stated physical cause
  (a mass at the end of a spoke, a mass leaving on an open rail);
* ``refused_with_cause`` — invalid, refused with ``ModelError``/``SimulationError`` (or
  a batch member status) naming the injected cause;
* silent failures: ``accepted_invalid``, ``silent_nan`` (a NaN/inf result without an
  error or failure status), ``wrong_cause``, ``valid_refused`` and ``foreign_exception``
  (any exception that is not the package's own).

Designs of one structure (model kind, rail kinds, control kind) run together: through
``rb.batch.simulate_batch`` (run-time faults become member statuses) and, for the first
few of each structure, also one by one through ``rb.simulate``.

Run: ``python benchmarks/fuzz_designs.py [--designs 2000] [--seed 0]``. Last line:
``silent_failures: N`` (target 0).
"""

from __future__ import annotations

import argparse
import collections
import time

import equinox as eqx
import jax.numpy as jnp
import numpy as np

import rollball_jax as rb
from rollball_jax import batch
from rollball_jax.errors import ModelError, SimulationError

RAILS = ("circle", "ellipse", "figure_eight", "spoke", "function")
CONTROLS = ("constant", "paper_step", "pwl", "spline", "function")
BUILD_FAULTS = ("mass_nonpositive", "mass_nan", "inertia", "radius", "rail_outside", "control_nan")
CALL_FAULTS = ("versor", "x0_nan", "x0_length", "rtol", "max_steps")
RUN_FAULTS = ("tree_at_nan",)
#: words the error / cause must contain for each fault
CAUSE_WORDS = {
    "mass_nonpositive": ("'masses'",), "mass_nan": ("'masses'",), "inertia": ("'inertia'", "'d2'"),
    "radius": ("'radius'",), "rail_outside": ("rail of mass",), "control_nan": ("non-finite",),
    "versor": ("versor",), "x0_nan": ("non-finite",), "x0_length": ("length",), "rtol": ("'rtol'",),
    "max_steps": ("'max_steps'",), "tree_at_nan": ("vector field not finite", "nonfinite_vector_field"),
    "open_rail": ("outside", "rail_left"),
}
T_SPAN = (0.0, 1.0)


def _circle_fn(th, p):
    return p["r"] * jnp.array([jnp.cos(th), 0.0 * th, jnp.sin(th)])


def _line_fn(th, p):
    return p["r"] * jnp.array([th, 0.0 * th, 0.0 * th])


def _fn_control(t, p):
    return p * jnp.sin(3.0 * t)


def make_rail(kind, reach, rng, planar, open_rail=False):
    rot = None if planar else _rotation(rng)
    if kind == "circle":
        return rb.CircleRail(reach, rotation=rot)
    if kind == "ellipse":
        return rb.EllipseRail(reach, reach * rng.uniform(0.3, 1.0), rotation=rot)
    if kind == "figure_eight":
        return rb.FigureEightRail(reach, reach * rng.uniform(0.3, 1.0), rotation=rot)
    if kind == "spoke":
        d = np.array([1.0, 0.0, rng.uniform(-1, 1)]) if planar else rng.normal(size=3)
        return rb.SpokeRail(d, [-reach, reach])
    if open_rail:  # inside the shell over the checked θ-range (−1, 1), not beyond it
        return rb.FunctionRail(_line_fn, {"r": jnp.asarray(0.3)}, period=(-1.0, 1.0))
    return rb.FunctionRail(_circle_fn, {"r": jnp.asarray(reach)})


def _rotation(rng):
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def make_control(kind, n, rng, nan=False):
    u = rng.uniform(-1.0, 1.0, n)
    if nan:
        u[0] = np.nan
    if kind == "constant":
        return rb.ConstantControl(u)
    if kind == "paper_step":
        return rb.PaperStep(np.sign(u) + (u == 0), amplitude=np.nan if nan else abs(u[0]))
    if kind == "pwl":
        return rb.PiecewiseLinearControl([0.0, 0.5, 1.0], np.stack([u, -u, u], axis=1))
    if kind == "spline":
        return rb.CubicSplineControl([0.0, 0.3, 0.6, 1.0], np.stack([u, -u, 0.5 * u, u], axis=1))
    return rb.FunctionControl(_fn_control, jnp.asarray(u))


def draw_design(structure, rng, fault):
    """(model, control, x0, settings) or raises at construction."""
    kind, rails_k, ctl_k = structure
    n = len(rails_k)
    planar = kind == "disk"
    radius = rng.uniform(0.5, 2.0) if fault != "radius" else rng.choice([0.0, -1.0, np.nan])
    r_ok = radius if np.isfinite(radius) and radius > 0 else 1.0
    masses = rng.uniform(0.05, 2.0, n)
    if fault == "mass_nonpositive":
        masses[rng.integers(n)] = rng.choice([0.0, -0.5])
    if fault == "mass_nan":
        masses[rng.integers(n)] = np.nan
    reach = rng.uniform(0.1, 0.8, n) * r_ok
    if fault == "rail_outside":
        reach[0] = 1.05 * r_ok if rails_k[0] != "spoke" else 1.2 * r_ok
    open_rail = fault == "open_rail"
    rails = [make_rail(k, reach[i], rng, planar, open_rail and i == 0) for i, k in enumerate(rails_k)]
    control = make_control(ctl_k, n, rng, nan=fault == "control_nan")
    if kind == "ball":
        inertia = rng.uniform(0.5, 1.0, 3)  # max <= sum of the others: a valid body
        if fault == "inertia":
            inertia[rng.integers(3)] = rng.choice([-1.0, np.nan, 10.0])
        model = rb.Ball(rng.uniform(0.2, 3.0), radius, inertia, [0.0, 0.0, -0.05 * r_ok], 1.0, masses, rails)
        x0 = np.array(model.initial_state(theta=rng.uniform(-0.2, 0.2, n) if "spoke" in rails_k else rng.uniform(-3, 3, n),
                                           Omega=rng.uniform(-0.5, 0.5, 3)))
        if fault == "versor":
            x0[2 * n : 2 * n + 4] *= rng.choice([0.0, 0.9, 1.001, 1.5])
    else:
        d2 = rng.uniform(0.5, 1.5) if fault != "inertia" else rng.choice([0.0, -1.0, np.nan])
        model = rb.Disk(rng.uniform(0.2, 3.0), radius, d2, [0.0, -0.05 * r_ok], 1.0, masses, rails)
        x0 = np.array(model.initial_state(theta=rng.uniform(-0.2, 0.2, n) if "spoke" in rails_k else rng.uniform(-3, 3, n),
                                           phi_dot=rng.uniform(-0.5, 0.5)))
    if open_rail:
        x0[0], x0[n] = 0.0, 3.0 / 0.3 * 2.0  # θ̇ carries the mass out (|ζ| = 0.3 θ) within t = 1
    if fault == "x0_nan":
        x0[rng.integers(x0.size)] = np.nan
    if fault == "x0_length":
        x0 = x0[:-1]
    settings = dict(rtol=1e-8, atol=1e-8, max_steps=20_000)
    if fault == "rtol":
        settings["rtol"] = rng.choice([0.0, -1e-8, np.nan])
    if fault == "max_steps":
        settings["max_steps"] = 0
    if fault == "tree_at_nan":
        model = eqx.tree_at(lambda m: m.masses, model, model.masses.at[0].set(jnp.nan))
    return model, control, x0, settings


def classify_error(fault, err):
    if not isinstance(err, (ModelError, SimulationError)):
        return "foreign_exception"
    if fault is None:
        if isinstance(err, SimulationError) and err.cause in ("rail left",):
            return "valid_failed_with_cause"
        return "valid_refused"
    words = CAUSE_WORDS.get(fault, ())
    return "refused_with_cause" if any(w in str(err) for w in words) else "wrong_cause"


def classify_result(fault, ys, ok, cause):
    finite = np.all(np.isfinite(ys))
    if ok and not finite:
        return "silent_nan"
    if ok:
        return "ok" if fault is None else "accepted_invalid"
    if fault is None:
        return "valid_failed_with_cause" if ("rail_left" in cause or "spoke" in cause) else "valid_refused"
    words = CAUSE_WORDS.get(fault, ())
    return "refused_with_cause" if any(w in cause for w in words) else "wrong_cause"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--designs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-structure", type=int, default=100, help="designs per structure")
    parser.add_argument("--single", type=int, default=6, help="designs per structure also run one by one")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    counts: collections.Counter = collections.Counter()
    examples: dict[str, str] = {}
    start = time.perf_counter()
    n_struct = -(-args.designs // args.per_structure)
    done = 0
    for s in range(n_struct):
        kind = ("ball", "disk")[s % 2]
        n = 1 + s % 3
        rails_k = tuple(RAILS[(s + i) % len(RAILS)] for i in range(n))
        ctl_k = CONTROLS[(s // 2) % len(CONTROLS)]
        structure = (kind, rails_k, ctl_k)
        members = []  # (fault, model, control, x0, settings) that built and must run
        for j in range(min(args.per_structure, args.designs - done)):
            done += 1
            r = rng.random()
            pool = (BUILD_FAULTS + CALL_FAULTS + RUN_FAULTS + ("open_rail",)) if r < 0.5 else (None,)
            fault = pool[rng.integers(len(pool))]
            if fault == "versor" and kind == "disk":
                fault = None
            if fault == "open_rail" and rails_k[0] != "function":
                fault = None
            try:
                model, control, x0, settings = draw_design(structure, rng, fault)
            except Exception as e:  # noqa: BLE001 - classified
                out = classify_error(fault, e)
                counts[out] += 1
                examples.setdefault(out, f"{structure} {fault}: {type(e).__name__}: {e}")
                continue
            members.append((fault, model, control, x0, settings))
        # single runs (call-time faults always; a few of the others)
        batchable = []
        for k, (fault, model, control, x0, settings) in enumerate(members):
            single_only = fault in CALL_FAULTS or fault == "open_rail"  # open rail: another structure
            if single_only or k < args.single:
                try:
                    sol = rb.simulate(model, control, x0, T_SPAN, n_save=5, **settings)
                    out = classify_result(fault, sol.xs, True, "")
                except Exception as e:  # noqa: BLE001 - classified
                    out = classify_error(fault, e)
                counts[out] += 1
                examples.setdefault(out, f"{structure} {fault} (single): {'' if out == 'ok' else repr(locals().get('e'))}")
                if single_only:
                    continue
            batchable.append((fault, model, control, x0, settings))
        if len(batchable) >= 2:
            faults = [b[0] for b in batchable]
            try:
                res = batch.simulate_batch([b[1] for b in batchable], [b[2] for b in batchable],
                                           np.stack([b[3] for b in batchable]), T_SPAN, n_save=5,
                                           rtol=1e-8, atol=1e-8, max_steps=20_000)
                for i, f in enumerate(faults):
                    out = classify_result(f, res.ys[i], bool(res.ok[i]), res.causes[i])
                    counts[out] += 1
                    examples.setdefault(out, f"{structure} {f} (batch member {i}): {res.causes[i]}")
            except Exception as e:  # noqa: BLE001 - classified
                for f in faults:
                    out = classify_error(f, e) if f is not None else ("valid_refused" if isinstance(e, (ModelError, SimulationError)) else "foreign_exception")
                    counts[out] += 1
                    examples.setdefault(out, f"{structure} batch: {type(e).__name__}: {e}")
        print(f"[{done:5d}/{args.designs}] {structure}: {dict(counts)}  ({time.perf_counter() - start:.0f} s)", flush=True)

    silent = sum(counts[k] for k in ("accepted_invalid", "silent_nan", "wrong_cause", "valid_refused", "foreign_exception"))
    print()
    print(f"{'outcome':28s} {'count':>7s}  example")
    for k in ("ok", "valid_failed_with_cause", "refused_with_cause", "accepted_invalid", "silent_nan",
              "wrong_cause", "valid_refused", "foreign_exception"):
        print(f"{k:28s} {counts[k]:7d}  {examples.get(k, '')[:150] if k not in ('ok', 'refused_with_cause', 'valid_failed_with_cause') else ''}")
    print(f"designs: {done} (solves counted per run: single and batch) in {time.perf_counter() - start:.0f} s")
    print(f"silent_failures: {silent}")


if __name__ == "__main__":
    main()
