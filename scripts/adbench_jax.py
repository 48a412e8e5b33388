"""The ADBench problems in JAX, written the idiomatic way, as peers for scripts/bench_adbench.py
(optional: ``pip install "jax[cpu]" asdex``; None where JAX is not installed).

Bundle adjustment: a function of one observation's 15 unknowns (camera 11, point 3, weight 1)
giving its two reprojection residuals, ``vmap(jacrev)`` (or ``jacfwd``) over the
observations under ``jit``, returning the CSR's values (``ba``'s forms). Hand tracking: the same
objective as ``jacbench.models.hand_tracking`` (its buffers, as numpy), ``jit(jacfwd)``: the
dense (3C, 26) Jacobian of the simple variant; the complicated one by theta (26 tangents) and
by each point's two u's (``vmap`` over points, 3x2 blocks), assembled dense as auto returns
it where it fits, else left as the two blocks (the CSR's values). asdex: its detection and
colouring, and ``jit(jacobian_from_coloring)``, on the same functions.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

os.environ.setdefault(  # one thread, as torch: XLA's idle pool threads spin otherwise
    "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)


def available() -> bool:
    try:
        import jax  # noqa: F401
    except ImportError:
        return False
    return True


def _jax() -> Any:
    import jax

    jax.config.update("jax_enable_x64", True)
    return jax


def _rodrigues(jnp: Any, rot: Any, x: Any) -> Any:
    """Rotate ``x`` (..., 3) by axis-angle ``rot`` (..., 3), both branches as the model."""
    sq = (rot * rot).sum(-1, keepdims=True)
    small = sq <= 0
    theta = jnp.sqrt(jnp.where(small, jnp.ones_like(sq), sq))
    axis = rot / theta
    cos, sin = jnp.cos(theta), jnp.sin(theta)
    rotated = (
        x * cos + jnp.cross(axis, x) * sin + axis * (axis * x).sum(-1, keepdims=True) * (1 - cos)
    )
    return jnp.where(small, x + jnp.cross(rot, x), rotated)


def _cross_matrix(jnp: Any, k: Any) -> Any:
    zero = jnp.zeros_like(k[0])
    return jnp.stack([zero, -k[2], k[1], k[2], zero, -k[0], -k[1], k[0], zero]).reshape(3, 3)


def _rotation_matrix(jnp: Any, rot: Any) -> Any:
    """The model's ``rotation_matrix``: Rodrigues' formula once, as a 3x3 matrix."""
    sq = (rot * rot).sum()
    small = sq <= 0
    theta = jnp.sqrt(jnp.where(small, jnp.ones_like(sq), sq))
    cross = _cross_matrix(jnp, rot / theta)
    eye = jnp.eye(3)
    rotation = eye + jnp.sin(theta) * cross + (1 - jnp.cos(theta)) * (cross @ cross)
    return jnp.where(small, eye + _cross_matrix(jnp, rot), rotation)


BA_FORMS = ("csr_jacrev", "csr", "blocks")  # the best first


def ba(model: Any, form: str = "csr_jacrev") -> tuple[Callable[[Any], Any], Any]:
    """(jitted x -> the Jacobian's values, x as a JAX array) for a ``BundleAdjustment``
    model: one observation's 15 unknowns -> its 2 residuals, ``vmap`` over the observations.
    ``form``: ``csr_jacrev`` (``jacrev``, its (P, 2, 15) blocks flattened: the CSR's values
    in row order), ``csr`` (the same by ``jacfwd``), ``blocks`` (``jacfwd``, the blocks left
    (P, 2, 15): XLA lays that output out slower). The weight residuals' (P,) 1x1 blocks
    come beside them."""
    jax = _jax()
    jnp = jax.numpy
    n_cams = 11 * model.n
    feature = jnp.asarray(model.feature.numpy())
    obs_cam = jnp.asarray(model.obs_cam.numpy())
    obs_point = jnp.asarray(model.obs_point.numpy())

    def observation(v: Any) -> Any:  # 15 unknowns -> 2 residuals
        cam, point, w = v[:11], v[11:14], v[14]
        seen = _rodrigues(jnp, cam[0:3], point - cam[3:6])
        plane = seen[:2] / seen[2]
        rsq = (plane * plane).sum()
        distortion = 1 + cam[9] * rsq + cam[10] * rsq * rsq
        return w * (plane * distortion * cam[6] + cam[7:9] - feature)

    block = jax.vmap((jax.jacrev if form == "csr_jacrev" else jax.jacfwd)(observation))

    @jax.jit
    def jacobian(x: Any) -> Any:
        cams = x[:n_cams].reshape(model.n, 11)
        points = x[n_cams : n_cams + 3 * model.m].reshape(model.m, 3)
        weights = x[n_cams + 3 * model.m :]
        gathered = jnp.concatenate([cams[obs_cam], points[obs_point], weights[:, None]], 1)
        blocks = block(gathered)
        return (blocks if form == "blocks" else blocks.reshape(-1)), -2 * weights

    return jacobian, jnp.asarray(model.sample_input(None).numpy())


def ht(model: Any, dense: bool) -> tuple[Callable[[Any], Any], Any, Callable[[Any], Any]]:
    """(jitted Jacobian, x, the objective) for a ``HandTracking`` model; ``dense``: the
    complicated variant's Jacobian assembled dense (else its theta and u blocks)."""
    jax = _jax()
    jnp = jax.numpy
    base = jnp.asarray(model.base_relatives.numpy())
    inverse = jnp.asarray(model.inverse_base_absolutes.numpy())
    rest = jnp.asarray(model.rest.numpy())
    weights = jnp.asarray(model.weights.numpy())
    angle_index = jnp.asarray(model.angle_index.numpy())
    points = jnp.asarray(model.points.numpy())
    corners = jnp.asarray(model.corners.numpy())
    parents, c, theta_n = model.parents, model.c, 26

    def euler(angles: Any) -> Any:
        cx, cz, cy = (jnp.cos(angles[:, k]) for k in range(3))
        sx, sz, sy = (jnp.sin(angles[:, k]) for k in range(3))
        zero, one = jnp.zeros_like(cx), jnp.ones_like(cx)
        rx = jnp.stack([one, zero, zero, zero, cx, -sx, zero, sx, cx], -1).reshape(-1, 3, 3)
        ry = jnp.stack([cy, zero, -sy, zero, one, zero, sy, zero, cy], -1).reshape(-1, 3, 3)
        rz = jnp.stack([cz, -sz, zero, sz, cz, zero, zero, zero, one], -1).reshape(-1, 3, 3)
        return rz @ ry @ rx

    def vertices(theta: Any) -> Any:
        angles = jnp.concatenate([theta, jnp.zeros(1)])[angle_index]
        rotated = base[:, :, :3] @ euler(angles)
        relatives = jnp.concatenate([rotated, base[:, :, 3:]], axis=2)
        absolutes: list[Any] = []
        for bone, parent in enumerate(parents):
            absolutes.append(relatives[bone] if parent < 0 else absolutes[parent] @ relatives[bone])
        transforms = jnp.stack(absolutes) @ inverse
        blended = weights @ transforms[:, :3, :].reshape(-1, 12)
        local = (blended.reshape(-1, 3, 4) @ rest[:, :, None])[..., 0]
        return local @ _rotation_matrix(jnp, theta[0:3]).T + theta[3:6]

    def objective(x: Any) -> Any:
        theta = x[-theta_n:]
        seen = vertices(theta)[corners]
        if model.complicated:
            u = x[:-theta_n].reshape(c, 2)
            blend = jnp.concatenate([u, 1 - u.sum(-1, keepdims=True)], -1)
            posed = (blend[..., None] * seen).sum(1)
        else:
            posed = seen[:, 0]
        return (points - posed).reshape(-1)

    x = jnp.asarray(model.sample_input(None).numpy())
    if not model.complicated:
        return jax.jit(jax.jacfwd(objective)), x, objective

    def by_theta(theta: Any, u: Any) -> Any:
        return objective(jnp.concatenate([u.reshape(-1), theta]))

    def per_point(u: Any, seen: Any, point: Any) -> Any:  # one point's 3 residuals by its u
        blend = jnp.concatenate([u, 1 - u.sum(keepdims=True)])
        return point - (blend[:, None] * seen).sum(0)

    @jax.jit
    def jacobian(x: Any) -> Any:
        theta, u = x[-theta_n:], x[:-theta_n].reshape(c, 2)
        jac_theta = jax.jacfwd(by_theta)(theta, u)  # (3C, 26)
        seen = vertices(theta)[corners]
        jac_u = jax.vmap(jax.jacfwd(per_point))(u, seen, points)  # (C, 3, 2)
        if not dense:
            return jac_theta, jac_u
        out = jnp.zeros((3 * c, 2 * c + theta_n)).at[:, 2 * c :].set(jac_theta)
        rows = jnp.arange(3 * c).reshape(c, 3, 1)
        cols = 2 * jnp.arange(c).reshape(c, 1, 1) + jnp.arange(2)
        return out.at[rows, cols].set(jac_u)

    return jacobian, x, objective


def asdex_jacobian(objective: Callable[[Any], Any], x: Any) -> tuple[Callable, int, float]:
    """(jitted asdex Jacobian, its colours, detection + colouring seconds); asdex must be
    installed."""
    import time

    import asdex

    jax = _jax()
    start = time.process_time()
    coloring = asdex.jacobian_coloring(objective, x)
    seconds = time.process_time() - start
    return jax.jit(asdex.jacobian_from_coloring(objective, coloring)), coloring.num_colors, seconds


def blocked(value: Any) -> Any:
    """``value`` once computed (JAX dispatches asynchronously)."""
    import jax

    return jax.block_until_ready(value)
