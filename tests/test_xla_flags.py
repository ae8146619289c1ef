"""The XLA option set at import (rollball_jax._xla_flags): added only for a tested jaxlib,
never over an explicit setting, and not at all when opted out."""

from __future__ import annotations

import os
import subprocess
import sys

from rollball_jax import _xla_flags

FLAG = "--xla_cpu_use_fusion_emitters=false"
TESTED = (0, 10, 2)


def test_flags_to_add_respects_version_explicit_setting_and_opt_out():
    assert _xla_flags.flags_to_add({}, TESTED) == [FLAG]
    assert _xla_flags.flags_to_add({"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}, (0, 10, 9)) == [FLAG]
    # an explicit choice of the same option wins, whatever its value
    assert _xla_flags.flags_to_add({"XLA_FLAGS": "--xla_cpu_use_fusion_emitters=true"}, TESTED) == []
    assert _xla_flags.flags_to_add({"ROLLBALL_JAX_XLA_DEFAULTS": "0"}, TESTED) == []
    # an XLA outside the tested range may not know the option (unknown options abort the process)
    assert _xla_flags.flags_to_add({}, (0, 10, 1)) == []
    assert _xla_flags.flags_to_add({}, (0, 11, 0)) == []


def test_apply_keeps_the_users_options(monkeypatch):
    monkeypatch.setattr(_xla_flags, "_jaxlib_version", lambda: TESTED)
    monkeypatch.delenv("ROLLBALL_JAX_XLA_DEFAULTS", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    assert _xla_flags.apply() == [FLAG]
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2 " + FLAG
    assert _xla_flags.apply() == []  # idempotent
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.setenv("ROLLBALL_JAX_XLA_DEFAULTS", "0")
    assert _xla_flags.apply() == [] and "XLA_FLAGS" not in os.environ


def test_import_sets_the_option_before_the_backend_starts():
    """In a fresh process with no XLA_FLAGS: ``import rollball_jax`` sets the option, and
    XLA accepts it (a computation runs; an unknown option would abort the process)."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "ROLLBALL_JAX_XLA_DEFAULTS")}
    code = "import os, rollball_jax, jax; jax.numpy.ones(2).block_until_ready(); print(repr(os.environ.get('XLA_FLAGS')))"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == repr(FLAG)


def test_group_loops_turn_the_fusion_emitters_back_on(monkeypatch):
    """The batch group loops compile with the emitters on (their wide programs run faster);
    nothing is passed to an untested jaxlib."""
    monkeypatch.setattr(_xla_flags, "_jaxlib_version", lambda: TESTED)
    assert _xla_flags.group_loop_compiler_options() == {"xla_cpu_use_fusion_emitters": True}
    monkeypatch.setattr(_xla_flags, "_jaxlib_version", lambda: (0, 11, 0))
    assert _xla_flags.group_loop_compiler_options() == {}
