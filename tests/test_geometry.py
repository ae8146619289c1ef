"""Quaternion and rotation identities of Putkaradze & Rogers, Appendix 2 (exact up to rounding)."""

import jax
import jax.numpy as jnp
import numpy as np

import rollball_jax  # noqa: F401  (enables float64)
from rollball_jax import geometry as geo



def _versor(rng):
    q = rng.normal(size=4)
    return q / np.linalg.norm(q)


def test_hat_is_cross_product_and_vee_inverts():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=3), rng.normal(size=3)
    np.testing.assert_allclose(geo.hat(a) @ b, np.cross(a, b), atol=1e-15)
    np.testing.assert_allclose(geo.vee(geo.hat(a)), a, atol=1e-15)


def test_rotation_matrix_is_proper_orthogonal():
    rng = np.random.default_rng(4)
    lam = np.asarray(geo.rotation_matrix(_versor(rng)))
    np.testing.assert_allclose(lam.T @ lam, np.eye(3), atol=1e-14)
    assert np.linalg.det(lam) > 0


def test_euler_rodrigues_matches_rotation_matrix():
    rng = np.random.default_rng(2)
    # (2.17): Λ Y = [q Y♯ q⁻¹]♭
    q, y = _versor(rng), rng.normal(size=3)
    rotated = geo.quat_multiply(geo.quat_multiply(q, geo.sharp(y)), geo.quat_conjugate(q))[1:]
    np.testing.assert_allclose(rotated, geo.rotation_matrix(q) @ y, atol=1e-14)


def test_quaternion_product_homomorphism():
    rng = np.random.default_rng(5)
    p, q = _versor(rng), _versor(rng)
    np.testing.assert_allclose(
        geo.rotation_matrix(geo.quat_multiply(p, q)), geo.rotation_matrix(p) @ geo.rotation_matrix(q), atol=1e-14
    )


def test_versor_kinematics_matches_rotation_kinematics():
    rng = np.random.default_rng(3)
    # (2.20)-(2.21): q̇ = ½ q Ω♯ implies Λ̇ = Λ Ω̂
    q, omega = _versor(rng), rng.normal(size=3)
    q_dot = 0.5 * geo.quat_multiply(q, geo.sharp(omega))
    _, lam_dot = jax.jvp(geo.rotation_matrix, (jnp.asarray(q),), (q_dot,))
    np.testing.assert_allclose(lam_dot, geo.rotation_matrix(q) @ geo.hat(omega), atol=1e-14)


def test_disk_rotation_is_versor_about_e2():
    phi = 0.7
    q = np.array([np.cos(-phi / 2), 0.0, np.sin(-phi / 2), 0.0])
    np.testing.assert_allclose(geo.rotation_about_e2(phi), geo.rotation_matrix(q), atol=1e-15)


def test_frisvad_frame_right_handed_orthonormal():
    for v in ([0, 0, 1], [np.pi / 2, 0, 1], [np.pi / 4, np.pi / 4, 1], [0.3, -1.2, 1], [0.0, -np.pi / 2, 1]):
        b = np.asarray(geo.paper_rail_rotation(jnp.asarray(v, dtype=float)))
        np.testing.assert_allclose(b.T @ b, np.eye(3), atol=1e-12)
        np.testing.assert_allclose(np.linalg.det(b), 1.0, atol=1e-12)
        np.testing.assert_allclose(b[:, 0], geo.spherical_to_cartesian(jnp.asarray(v, dtype=float)), atol=1e-15)


def test_matvec_equals_matrix_product():
    """``matvec`` (the vector fields' dot-free ``a @ x``) equals ``a @ x``, batched, for a
    non-symmetric ``a`` (a transposed index would give ``aᵀx``). Measured 2e-16 relative."""
    matvec = geo.matvec
    rng = np.random.default_rng(20261204)
    a, x = rng.standard_normal((5, 3, 3)), rng.standard_normal((5, 3))
    expected = np.einsum("bij,bj->bi", a, x)
    assert np.max(np.abs(np.asarray(matvec(a, x)) - expected)) <= 1e-14 * np.max(np.abs(expected))
    assert np.max(np.abs(np.asarray(matvec(a[0], x[0])) - a[0] @ x[0])) <= 1e-14 * np.max(np.abs(a[0] @ x[0]))
