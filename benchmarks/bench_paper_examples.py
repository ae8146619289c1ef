"""Benchmark: the two numerical examples of the rolling-ball paper (Putkaradze & Rogers, sections 6 and 7).

Times, in one run,

* ours   ``rollball_jax.simulate`` (checked, NumPy in/out), and the bare compiled solve
         ``jax.jit(rollball_jax.integrate)`` (``.block_until_ready()``), both diffrax Dopri8
         with the control's kinks at t = 0.1, 0.2 given to the step-size controller;
* SciPy  ``solve_ivp(method="DOP853")`` with a plain NumPy right-hand side written here,
         independently of the package, straight from the paper's equations:
         disk (6.2) with κ from (5.40)/(5.38); ball (7.2) with κ from (7.4), Λ from the
         versor by (2.15), rails ζ_i(θ) = r_i (cos θ n_i − sin θ b1(n_i)) (verified column order of the Frisvad basis),
         ζ′ and ζ″ in closed form. Once as a single call over [0, 20] ("1 call") and once
         restarted at the kinks ([0, .1], [.1, .2], [.2, 20]; "restart@kinks").

Tolerances are the paper's: rtol = atol = 1e-12 (disk), 1e-10 (ball); t ∈ [0, 20]; states
are saved at the reference times and compared with ``tests/data/paper_examples.json``.

Before the last line it prints what ``rb.simulate`` adds to ``jax.jit(rb.integrate)`` (argument
checks, host/device transfers, the ``Solution``): the median difference of ``--repeats``
interleaved pairs of calls, each pair run back to back so that drifts of the machine's
speed cancel.

Run:  python benchmarks/bench_paper_examples.py [--repeats 50] [--scipy-repeats 5]
The last printed line is ``speedup_vs_scipy_ball: X``. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import scipy
from scipy.integrate import DOP853, solve_ivp

DEFAULT_REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "data" / "paper_examples.json"
T0, T1 = 0.0, 20.0
KINKS = (0.1, 0.2)
TOL = {"disk": 1e-12, "ball": 1e-10}


# =====================================================================================
# Independent NumPy right-hand sides (Putkaradze & Rogers); no rollball_jax code is used here.
# =====================================================================================
def paper_ramp(t: float) -> float:
    """Magnitude of the prescribed acceleration (6.6)/(7.11)."""
    if t <= 0.1:
        return 1.0
    if t <= 0.2:
        return -10.0 * t + 2.0
    return 0.0


def _cross(a, b):
    """Row-wise cross product of (k, 3) arrays (cheaper than np.cross for tiny arrays)."""
    out = np.empty(np.broadcast_shapes(a.shape, b.shape))
    out[..., 0] = a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1]
    out[..., 1] = a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2]
    out[..., 2] = a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
    return out


class DiskRHS:
    """ẋ = f(t, x) of (6.2): x = [θ (n), θ̇ (n), φ, φ̇]; φ̈ = κ of (5.40) with K_i of (5.38).

    Circular rails (6.5): ζ_i = r_i (cos θ_i, 0, sin θ_i); u_i = (−1)^i ramp(t) (6.6).
    The sum in (5.40) runs over i = 0…n with ζ_0 = χ_0 (constant, ζ_0′ = ζ_0″ = 0).
    """

    def __init__(self, m0, r, d2, chi0, g, masses, radii, fe1=0.0):
        self.n = len(masses)
        self.r, self.d2, self.g, self.fe1 = float(r), float(d2), float(g), float(fe1)
        self.m = np.concatenate([[m0], masses]).astype(float)
        self.radii = np.asarray(radii, dtype=float)
        self.chi0 = np.asarray(chi0, dtype=float)  # (x, 0, z)
        self.signs = np.array([(-1.0) ** i for i in range(1, self.n + 1)])
        self.nfev = 0

    def __call__(self, t, x):
        self.nfev += 1
        n, r, g = self.n, self.r, self.g
        th, thd, phi, phid = x[:n], x[n : 2 * n], x[2 * n], x[2 * n + 1]
        u = self.signs * paper_ramp(t)
        c, s = np.cos(th), np.sin(th)
        # bodies 0..n: ζ, ζ′, ζ″ (x and z components), θ̇, θ̈
        z1 = np.concatenate([[self.chi0[0]], self.radii * c])
        z3 = np.concatenate([[self.chi0[2]], self.radii * s])
        d1 = np.concatenate([[0.0], -self.radii * s])
        d3 = np.concatenate([[0.0], self.radii * c])
        dd1, dd3 = np.concatenate([[0.0], -z1[1:]]), np.concatenate([[0.0], -z3[1:]])
        td = np.concatenate([[0.0], thd])
        tdd = np.concatenate([[0.0], u])
        sp, cp = np.sin(phi), np.cos(phi)
        a1 = r * sp + z1  # s_i,1
        a3 = r * cp + z3  # s_i,3
        K = (
            (g + r * phid**2) * (z3 * sp - z1 * cp)
            + a3 * (-2.0 * phid * td * d3 + td**2 * dd1 + tdd * d1)
            - a1 * (2.0 * phid * td * d1 + td**2 * dd3 + tdd * d3)
        )
        num = -r * self.fe1 + np.dot(self.m, K)
        den = self.d2 + np.dot(self.m, a1**2 + a3**2)
        out = np.empty_like(x)
        out[:n] = thd
        out[n : 2 * n] = u
        out[2 * n] = phid
        out[2 * n + 1] = num / den
        return out


def frisvad_b1(nv):
    """First tangent b1 of Frisvad's orthonormal basis (2012, Listing 2) for unit n."""
    nx, ny, nz = nv
    if nz < -0.9999999:
        return np.array([0.0, -1.0, 0.0])
    a = 1.0 / (1.0 + nz)
    return np.array([1.0 - nx * nx * a, -nx * ny * a, -nx])


def spherical(v):
    """ς(φ, θ, ρ) of (7.9)."""
    phi, th, rho = v
    return np.array([rho * np.cos(th) * np.cos(phi), rho * np.cos(th) * np.sin(phi), rho * np.sin(th)])


class BallRHS:
    """ẋ = f(t, x) of (7.2): x = [θ (n), θ̇ (n), q (4, scalar first), Ω (3), z (2)].

    Ω̇ = κ of (7.4) (sum over i = 0…n, ζ_0 = χ_0), q̇ = ½ q ⊗ Ω♯, ż = (ΛΩ × r e3)_12 with
    Λ(q) from (2.15). Rails (7.8)–(7.10): ζ_i = r_i (cos θ n_i − sin θ b1(n_i)), so
    ζ_i′ = r_i (−sin θ n_i − cos θ b1(n_i)) and ζ_i″ = −ζ_i. u_i = ramp(t) (7.11).
    """

    def __init__(self, m0, r, d, chi0, g, masses, radii, vs, fe=(0.0, 0.0, 0.0)):
        self.n = len(masses)
        self.r, self.g = float(r), float(g)
        self.I = np.asarray(d, dtype=float)
        self.m = np.concatenate([[m0], masses]).astype(float)
        self.mcol = self.m[:, None]
        self.chi0 = np.asarray(chi0, dtype=float)
        self.fe = np.asarray(fe, dtype=float)
        radii = np.asarray(radii, dtype=float)[:, None]
        normals = np.array([spherical(v) for v in vs])
        self.rn = radii * normals  # r_i n_i        (n, 3)
        self.rb = radii * np.array([frisvad_b1(nv) for nv in normals])  # r_i b1(n_i)   (n, 3)
        self.nfev = 0

    def __call__(self, t, x):
        self.nfev += 1
        n, r, g, m = self.n, self.r, self.g, self.m
        th, thd = x[:n], x[n : 2 * n]
        q0, q1, q2, q3 = x[2 * n : 2 * n + 4]
        Om = x[2 * n + 4 : 2 * n + 7]
        u = np.full(n, paper_ramp(t))
        # Λ from the versor (2.15)
        L = np.array(
            [
                [1 - 2 * (q2 * q2 + q3 * q3), 2 * (q1 * q2 - q0 * q3), 2 * (q1 * q3 + q0 * q2)],
                [2 * (q1 * q2 + q0 * q3), 1 - 2 * (q1 * q1 + q3 * q3), 2 * (q2 * q3 - q0 * q1)],
                [2 * (q1 * q3 - q0 * q2), 2 * (q2 * q3 + q0 * q1), 1 - 2 * (q1 * q1 + q2 * q2)],
            ]
        )
        Gam = L[2]  # Λᵀ e3
        Gt = L.T @ self.fe  # Γ̃ = Λᵀ F_e
        c, s = np.cos(th)[:, None], np.sin(th)[:, None]
        zeta = np.empty((n + 1, 3))
        dzeta = np.zeros((n + 1, 3))
        zeta[0] = self.chi0
        zeta[1:] = c * self.rn - s * self.rb
        dzeta[1:] = -s * self.rn - c * self.rb
        ddzeta = -zeta
        ddzeta[0] = 0.0
        td = np.concatenate([[0.0], thd])[:, None]
        tdd = np.concatenate([[0.0], u])[:, None]
        S = r * Gam + zeta  # s_i  (n+1, 3)
        # Σ m_i ŝ_i² − I,   ŝ² = s sᵀ − |s|² 1
        A = (S.T * m) @ S
        A[np.diag_indices(3)] -= np.dot(m, np.einsum("ij,ij->i", S, S)) + self.I
        IOm = self.I * Om
        inner = g * Gam + _cross(Om, _cross(Om, zeta) + 2.0 * td * dzeta) + td**2 * ddzeta + tdd * dzeta
        rhs = _cross(Om, IOm) + r * _cross(Gt, Gam) + (self.mcol * _cross(S, inner)).sum(axis=0)
        Omd = np.linalg.solve(A, rhs)
        # q̇ = ½ q ⊗ (0, Ω)   (2.7)
        w1, w2, w3 = Om
        qd = 0.5 * np.array(
            [
                -q1 * w1 - q2 * w2 - q3 * w3,
                q0 * w1 + q2 * w3 - q3 * w2,
                q0 * w2 + q3 * w1 - q1 * w3,
                q0 * w3 + q1 * w2 - q2 * w1,
            ]
        )
        omega = L @ Om  # spatial angular velocity
        out = np.empty_like(x)
        out[:n] = thd
        out[n : 2 * n] = u
        out[2 * n : 2 * n + 4] = qd
        out[2 * n + 4 : 2 * n + 7] = Omd
        out[2 * n + 7] = r * omega[1]  # (ω × r e3)_1
        out[2 * n + 8] = -r * omega[0]  # (ω × r e3)_2
        return out


def make_numpy_rhs(name, params):
    p = params
    if name == "disk":
        return DiskRHS(p["m0"], p["r"], p["d2"], p["chi0"], p["g"], p["masses"], p["radii"], p["Fe"])
    return BallRHS(p["m0"], p["r"], p["d"], p["chi0"], p["g"], p["masses"], p["radii"], p["v"], p["Fe"])


# =====================================================================================
# SciPy runs
# =====================================================================================
def scipy_one_call(rhs, x0, t_out, tol):
    sol = solve_ivp(rhs, (T0, T1), x0, method="DOP853", t_eval=t_out, rtol=tol, atol=tol)
    assert sol.success, sol.message
    return sol.y.T, sol.nfev


def scipy_restarted(rhs, x0, t_out, tol):
    """Integrate [0, .1], [.1, .2], [.2, 20], restarting at the kinks of u(t)."""
    edges = [T0, *KINKS, T1]
    y, states, nfev = np.asarray(x0, float), {}, 0
    for a, b in zip(edges[:-1], edges[1:]):
        te = [t for t in t_out if a <= t <= b]
        sol = solve_ivp(rhs, (a, b), y, method="DOP853", t_eval=te, rtol=tol, atol=tol)
        assert sol.success, sol.message
        nfev += sol.nfev
        for t, yy in zip(sol.t, sol.y.T):
            states[float(t)] = yy
        y = sol.y[:, -1] if sol.t[-1] == b else sol.sol(b)
    return np.array([states[float(t)] for t in t_out]), nfev


def scipy_step_counts(rhs, x0, tol, restart):
    """(accepted, rejected) DOP853 steps, from a separate untimed OdeSolver pass.

    solve_ivp takes exactly the same steps (t_eval only adds dense-output evaluations).
    Each attempted DOP853 step costs 12 evaluations, plus 2 at start-up (f(t0) and the
    initial-step probe), so attempts = (nfev − 2) / 12 without dense output.
    """
    edges = [T0, *KINKS, T1] if restart else [T0, T1]
    y, acc, att = np.asarray(x0, float), 0, 0
    for a, b in zip(edges[:-1], edges[1:]):
        solver = DOP853(rhs, a, y, b, rtol=tol, atol=tol)
        while solver.status == "running":
            solver.step()
            acc += 1
        assert solver.status == "finished"
        assert (solver.nfev - 2) % 12 == 0, solver.nfev
        att += (solver.nfev - 2) // 12
        y = solver.y
    return acc, att - acc


# =====================================================================================
# ours
# =====================================================================================
def build_ours(rb, name, ref):
    """The paper's models, controls and x0 built with rollball_jax."""
    if name == "disk":
        p = ref["disk"]["params"]
        rails = [rb.CircleRail(r) for r in p["radii"]]
        model = rb.Disk(p["m0"], p["r"], p["d2"], (p["chi0"][0], p["chi0"][2]), p["g"], p["masses"], rails)
        ctl = rb.PaperStep.disk(len(p["masses"]))
    else:
        p = ref["ball"]["params"]
        rails = [rb.CircleRail.paper(r, v) for r, v in zip(p["radii"], p["v"])]
        model = rb.Ball(p["m0"], p["r"], p["d"], p["chi0"], p["g"], p["masses"], rails)
        ctl = rb.PaperStep.ball(len(p["masses"]))
    return model, ctl, np.asarray(ref[name]["x0"], dtype=float)


def reference_states(entry, t_out):
    """Reference states (T, N) at ``t_out``; the JSON keys them by the time as a string."""
    states = entry["states"]
    if isinstance(states, dict):
        by_time = {float(k): v for k, v in states.items()}
        return np.asarray([by_time[float(t)] for t in t_out], dtype=float)
    return np.asarray(states, dtype=float)


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=50, help="timed repeats of our solves (median; default 50)")
    ap.add_argument("--scipy-repeats", type=int, default=5, help="timed repeats of each SciPy solve (default 5)")
    ap.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE, help="paper_examples.json")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.scipy_repeats < 1:
        ap.error("repeats must be >= 1")

    ref = json.loads(Path(args.reference).read_text())

    t_import = time.perf_counter()
    import jax
    import jax.numpy as jnp

    import rollball_jax as rb

    t_import = time.perf_counter() - t_import

    print("rollball_jax paper-example benchmark (Putkaradze & Rogers, sections 6 and 7), t in [0, 20]")
    print(
        f"python {platform.python_version()} | jax {jax.__version__} (backend {jax.default_backend()}, "
        f"devices {[str(d) for d in jax.devices()]}) | numpy {np.__version__} | scipy {scipy.__version__}"
    )
    try:
        import diffrax
        import equinox

        print(f"diffrax {diffrax.__version__} | equinox {equinox.__version__} | rollball_jax {rb.__version__}")
    except Exception:  # pragma: no cover
        pass
    ncpu = os.cpu_count()
    try:
        ncpu_avail = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        ncpu_avail = ncpu
    print(f"cpu: {platform.machine()} {_cpu_model()} | os.cpu_count() = {ncpu} (available {ncpu_avail})")
    print(f"repeats: ours {args.repeats}, scipy {args.scipy_repeats} | reference: {args.reference}")
    print(f"(import of jax + rollball_jax: {t_import:.2f} s)")
    print()

    rows = []
    overhead = {}
    ball_scipy_one = ball_ours = None
    for name in ("disk", "ball"):
        tol = TOL[name]
        t_out = np.asarray(ref[name]["t_out"], dtype=float)
        ref_states = reference_states(ref[name], t_out)

        def err(xs):
            return float(np.max(np.abs(np.asarray(xs) - ref_states)))

        # ---------------- ours: rb.simulate -------------------------------------------
        model, ctl, x0 = build_ours(rb, name, ref)

        def run_sim():
            return rb.simulate(model, ctl, x0, (T0, T1), ts=t_out, rtol=tol, atol=tol)

        t = time.perf_counter()
        sol = run_sim()
        first = time.perf_counter() - t
        sols = []
        steady, _ = median_time(lambda: sols.append(run_sim()), args.repeats)
        wall = statistics.median(s.wall_time for s in sols)
        st = sol.stats
        rows.append(
            dict(
                example=name, method="ours rb.simulate", compile=first - steady, time=steady,
                acc=st["num_accepted_steps"], rej=st["num_rejected_steps"], nfev=None, err=err(sol.xs),
                note=f"Dopri8+jump_ts; Solution.wall_time median {wall * 1e3:.2f} ms",
            )
        )
        ours_sim = steady

        # ---------------- ours: jax.jit(rb.integrate) ---------------------------------
        @jax.jit
        def solve_ys(model, ctl, x0, ts):
            s = rb.integrate(model, ctl, x0, ts, t0=T0, t1=T1, rtol=tol, atol=tol)
            return s.ys[0], s.stats["num_accepted_steps"], s.stats["num_rejected_steps"]

        x0j, tsj = jnp.asarray(x0), jnp.asarray(t_out)
        t = time.perf_counter()
        ys, acc, rej = solve_ys(model, ctl, x0j, tsj)
        ys.block_until_ready()
        first = time.perf_counter() - t
        steady, _ = median_time(lambda: solve_ys(model, ctl, x0j, tsj)[0].block_until_ready(), args.repeats)
        rows.append(
            dict(
                example=name, method="ours jit(integrate)", compile=first - steady, time=steady,
                acc=int(acc), rej=int(rej), nfev=None, err=err(ys), note="pure compiled solve, no checks",
            )
        )
        # What rb.simulate adds to the compiled solve (checks, transfers, the Solution):
        # interleaved pairs, so that drifts of the machine's speed cancel in each difference.
        raw = lambda: solve_ys(model, ctl, x0j, tsj)[0].block_until_ready()  # noqa: E731
        overhead[name] = statistics.median(
            timed(run_sim) - timed(raw) for _ in range(args.repeats)
        )

        # ---------------- SciPy DOP853 + NumPy RHS --------------------------------------
        rhs = make_numpy_rhs(name, ref[name]["params"])
        for label, runner, restart in (
            ("scipy DOP853 1 call", scipy_one_call, False),
            ("scipy DOP853 restart@kinks", scipy_restarted, True),
        ):
            xs, nfev = runner(rhs, x0, t_out, tol)  # warm-up (and the result we check)
            steady, _ = median_time(lambda: runner(rhs, x0, t_out, tol), args.scipy_repeats)
            acc, rej = scipy_step_counts(rhs, x0, tol, restart)
            rows.append(
                dict(
                    example=name, method=label, compile=None, time=steady, acc=acc, rej=rej, nfev=nfev,
                    err=err(xs), note=f"NumPy RHS {steady / nfev * 1e6:.0f} us/eval",
                )
            )
            if name == "ball" and not restart:
                ball_scipy_one = steady
        for row in rows:
            if row["example"] == name:
                row["ratio"] = row["time"] and (rows_scipy_time(rows, name) / row["time"])
        if name == "ball":
            ball_ours = ours_sim

    print_table(rows)
    print()
    print(
        "ratio = (SciPy DOP853 one-call time of the same example) / (this row's time); "
        "steps = accepted+rejected; err = max |x - x_ref| over all reference times and state components."
    )
    for name, dt in overhead.items():
        print(f"rb.simulate over jit(integrate), {name}: {dt * 1e3:.3f} ms (median of {args.repeats} interleaved pairs)")
    print(f"speedup_vs_scipy_ball: {ball_scipy_one / ball_ours:.1f}")


def rows_scipy_time(rows, name):
    return next(r["time"] for r in rows if r["example"] == name and r["method"] == "scipy DOP853 1 call")


def _cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def print_table(rows):
    head = (
        f"{'example':<7} {'method':<27} {'compile[s]':>10} {'solve[ms]':>10} {'steps':>6} "
        f"{'acc':>5} {'rej':>4} {'nfev':>6} {'max|err|':>9} {'ratio':>7}  note"
    )
    print(head)
    print("-" * len(head) + "-" * 30)
    for r in rows:
        comp = f"{r['compile']:10.2f}" if r["compile"] is not None else f"{'-':>10}"
        nfev = f"{r['nfev']:6d}" if r["nfev"] is not None else f"{'-':>6}"
        print(
            f"{r['example']:<7} {r['method']:<27} {comp} {r['time'] * 1e3:10.3f} {r['acc'] + r['rej']:6d} "
            f"{r['acc']:5d} {r['rej']:4d} {nfev} {r['err']:9.2e} {r['ratio']:7.1f}  {r['note']}"
        )


if __name__ == "__main__":
    sys.exit(main())
