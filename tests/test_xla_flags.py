"""The XLA options set at import (rollball_jax._xla_flags): added only for a tested jaxlib,
never over an explicit setting, and not at all when opted out; the small-loop option
takes effect (the solve's loop is compiled as one kernel) without changing a bit."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rollball_jax import _xla_flags

FLAG = "--xla_cpu_use_fusion_emitters=false"
SMALL_LOOPS = "--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=200000"
BOTH = [FLAG, SMALL_LOOPS]
TESTED = (0, 10, 2)


def test_flags_to_add_respects_version_explicit_setting_and_opt_out():
    assert _xla_flags.flags_to_add({}, TESTED) == BOTH
    assert _xla_flags.flags_to_add({"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}, (0, 10, 9)) == BOTH
    # an explicit choice of the same option wins, whatever its value
    assert _xla_flags.flags_to_add({"XLA_FLAGS": "--xla_cpu_use_fusion_emitters=true"}, TESTED) == [SMALL_LOOPS]
    assert _xla_flags.flags_to_add({"XLA_FLAGS": "--xla_backend_extra_options=a=1"}, TESTED) == [FLAG]
    assert _xla_flags.flags_to_add({"ROLLBALL_JAX_XLA_DEFAULTS": "0"}, TESTED) == []
    # an XLA outside the tested range may not know the option (unknown options abort the process)
    assert _xla_flags.flags_to_add({}, (0, 10, 1)) == []
    assert _xla_flags.flags_to_add({}, (0, 11, 0)) == []


def test_apply_keeps_the_users_options(monkeypatch):
    monkeypatch.setattr(_xla_flags, "_jaxlib_version", lambda: TESTED)
    monkeypatch.delenv("ROLLBALL_JAX_XLA_DEFAULTS", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    assert _xla_flags.apply() == BOTH
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2 " + " ".join(BOTH)
    assert _xla_flags.apply() == []  # idempotent
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.setenv("ROLLBALL_JAX_XLA_DEFAULTS", "0")
    assert _xla_flags.apply() == [] and "XLA_FLAGS" not in os.environ


def test_import_sets_the_options_before_the_backend_starts():
    """In a fresh process with no XLA_FLAGS: ``import rollball_jax`` sets the options, and
    XLA accepts them (a computation runs; an unknown option would abort the process)."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "ROLLBALL_JAX_XLA_DEFAULTS")}
    code = "import os, rollball_jax, jax; jax.numpy.ones(2).block_until_ready(); print(repr(os.environ.get('XLA_FLAGS')))"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == repr(" ".join(BOTH))


def test_group_loops_turn_the_fusion_emitters_back_on(monkeypatch):
    """The batch group loops compile with the emitters on (their wide programs run faster);
    nothing is passed to an untested jaxlib."""
    monkeypatch.setattr(_xla_flags, "_jaxlib_version", lambda: TESTED)
    assert _xla_flags.group_loop_compiler_options() == {"xla_cpu_use_fusion_emitters": True}
    monkeypatch.setattr(_xla_flags, "_jaxlib_version", lambda: (0, 11, 0))
    assert _xla_flags.group_loop_compiler_options() == {}


_SOLVE_AND_GRADIENT = """
import hashlib, jax, jax.numpy as jnp, numpy as np, rollball_jax as rb
v = [[0, 0, 1], [np.pi / 2, 0, 1], [np.pi / 4, np.pi / 4, 1]]
rails = [rb.CircleRail.paper(r, vi) for r, vi in zip([0.95, 0.9, 0.85], v)]
ball = rb.Ball(1.0, 1.0, [0.9, 1.0, 1.1], [0, 0, -0.05], 1.0, [1.0, 1.0, 1.0], rails)
x0 = jnp.asarray(ball.initial_state(theta=[0.0, 2.0369, 0.7044]))
ctl = rb.PaperStep.ball(3)
solve = jax.jit(lambda x: rb.integrate(ball, ctl, x, jnp.linspace(0.0, 3.0, 7)).ys)
grad = jax.jit(jax.grad(lambda x: rb.final_gc(ball, ctl, x, (0.0, 3.0))[0]))
hlo = solve.lower(x0).compile().as_text()
out = np.concatenate([np.ravel(np.asarray(a)) for a in jax.tree_util.tree_leaves(solve(x0))] + [np.asarray(grad(x0))])
stage_loops = [l for l in hlo.splitlines() if "xla_cpu_small_call" in l and "f64[14,15]" in l]
print(len(stage_loops), hashlib.sha1(out.tobytes()).hexdigest())
"""


def _run(code, env):
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout.strip().splitlines()[-1].split()


@pytest.mark.slow
def test_small_loop_option_compiles_the_solve_as_one_kernel_bit_for_bit():
    """With the small-loop option (the package's default) XLA compiles the solve's loops
    that carry Dopri8's stages (a ``(14, 15)`` array) as single kernels (calls marked
    ``xla_cpu_small_call``; XLA's own 1,024-byte threshold hoists only smaller loops, none
    of these), and the states of a solve and the reverse-mode gradient through the
    discrete adjoint are the same bits as without it (paper ball over [0, 3], fresh
    processes: one with the defaults, one with only the fusion-emitter option)."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "ROLLBALL_JAX_XLA_DEFAULTS")}
    n_small, sha_default = _run(_SOLVE_AND_GRADIENT, env)
    off = env | {"ROLLBALL_JAX_XLA_DEFAULTS": "0", "XLA_FLAGS": FLAG}
    n_small_off, sha_off = _run(_SOLVE_AND_GRADIENT, off)
    assert int(n_small) >= 1 and int(n_small_off) == 0
    assert sha_default == sha_off


def test_small_loops_threshold_reads_the_setting_in_force():
    """The threshold batch mode adaptive consults (it maps members one at a time only when
    loops become single kernels): the package's value, a user's own value, XLA's default
    1,024 when the key is absent (opted out, or another extra option given instead)."""
    assert _xla_flags.small_loops_threshold({"XLA_FLAGS": " ".join(BOTH)}) == 200_000
    assert _xla_flags.small_loops_threshold({"XLA_FLAGS": FLAG}) == 1024
    assert _xla_flags.small_loops_threshold({}) == 1024
    assert _xla_flags.small_loops_threshold(
        {"XLA_FLAGS": "--xla_backend_extra_options=xla_cpu_foo=1,xla_cpu_small_while_loop_byte_threshold=5000"}) == 5000
    assert _xla_flags.small_loops_threshold({"XLA_FLAGS": "--xla_backend_extra_options=xla_cpu_foo=1"}) == 1024
