"""ADBench's bundle adjustment (BA): the field's sparse Jacobian problem, at 10^5 columns.

The unknowns are N cameras (11 parameters each: Rodrigues rotation, centre, focal length,
principal point, two radial distortion coefficients), M 3-D points and P observation weights;
observation i sees point i % M from camera i % N. The residuals are the weighted reprojection
errors (2 per observation) and the weights' deviation from 1 (1 - w^2, one per observation):
a (3P) x (11N + 3M + P) Jacobian whose rows touch at most 15 unknowns, declared as its
sparsity pattern. ADBench's input files give one camera, point, weight and feature, repeated.
Written from the problem statement (GradBench ``evals/ba``), branch-free so it traces.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import torch
from torch import nn

from jacbench.core.local_blocks import Blocks

CAMERA = 11  # rotation 0:3, centre 3:6, focal 6, principal point 7:9, distortion 9:11


def data_file(problem: str, name: str) -> Path:
    """A shipped ADBench file of ``problem`` (a folder under data/adbench) by name, or a path."""
    path = Path(name)
    if path.is_file():
        return path
    folder = resources.files("jacbench.models") / "data" / "adbench" / problem
    shipped = folder / name
    if not shipped.is_file():
        names = sorted(p.name for p in folder.iterdir() if p.is_file())
        raise ValueError(f"no {problem} file {name!r}; shipped: {', '.join(names)}")
    return Path(str(shipped))


def read_ba(name: str) -> tuple[int, int, int, list[float]]:
    """(N, M, P, the 17 numbers: camera, point, weight, feature) of an ADBench BA file."""
    text = data_file("ba", name).read_text().split()
    n, m, p = (int(v) for v in text[:3])
    values = [float(v) for v in text[3:]]
    if len(values) != CAMERA + 3 + 1 + 2:
        raise ValueError(f"{name}: expected 17 numbers after N M P, found {len(values)}")
    return n, m, p, values


def rodrigues_rotate(rot: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Rotate points ``x`` (P, 3) by axis-angle vectors ``rot`` (P, 3); the first-order form
    where the angle is 0 (both branches computed, so the function has no Python branch)."""
    sq = (rot * rot).sum(-1, keepdim=True)
    small = sq <= 0
    theta = torch.sqrt(torch.where(small, torch.ones_like(sq), sq))
    axis = rot / theta
    cos, sin = torch.cos(theta), torch.sin(theta)
    rotated = (
        x * cos
        + torch.linalg.cross(axis, x, dim=-1) * sin
        + axis * (axis * x).sum(-1, keepdim=True) * (1 - cos)
    )
    return torch.where(small, x + torch.linalg.cross(rot, x, dim=-1), rotated)


def rotation_matrix(rot: torch.Tensor) -> torch.Tensor:
    """The 3x3 rotation of one axis-angle vector ``rot`` (3,): Rodrigues' formula as a
    matrix, and I + [rot]x where the angle is 0 (both computed, no Python branch). One
    rotation of many points (hand tracking's global pose) is then computed once, not per
    point as ``rodrigues_rotate`` on the expanded vector would, once per tangent."""
    sq = (rot * rot).sum()
    small = sq <= 0
    theta = torch.sqrt(torch.where(small, torch.ones_like(sq), sq))
    eye = torch.eye(3, dtype=rot.dtype, device=rot.device)
    cross = _cross_matrix(rot / theta)
    rotation = eye + torch.sin(theta) * cross + (1 - torch.cos(theta)) * (cross @ cross)
    return torch.where(small, eye + _cross_matrix(rot), rotation)


def _cross_matrix(k: torch.Tensor) -> torch.Tensor:
    """[k]x, the matrix of the cross product with ``k`` (3,)."""
    zero = torch.zeros_like(k[0])
    return torch.stack([zero, -k[2], k[1], k[2], zero, -k[0], -k[1], k[0], zero]).reshape(3, 3)


def project(cams: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Pixel coordinates (P, 2) of ``points`` seen by ``cams`` (P, 11)."""
    in_camera = rodrigues_rotate(cams[:, 0:3], points - cams[:, 3:6])
    plane = in_camera[:, :2] / in_camera[:, 2:3]
    rsq = (plane * plane).sum(-1, keepdim=True)
    distortion = 1 + cams[:, 9:10] * rsq + cams[:, 10:11] * rsq * rsq
    return plane * distortion * cams[:, 6:7] + cams[:, 7:9]


class BundleAdjustment(nn.Module):
    """BA residuals of an ADBench file (``file``), or of N, M, P observations of the file's
    camera, point and feature (``n``, ``m``, ``p``: generated with the same rule)."""

    accepts_batch = False
    # buffers (register_buffer), declared for the type checker
    camera: torch.Tensor
    point: torch.Tensor
    feature: torch.Tensor
    obs_cam: torch.Tensor
    obs_point: torch.Tensor

    def __init__(
        self,
        file: str = "ba1_n49_m7776_p31843.txt",
        n: int | None = None,
        m: int | None = None,
        p: int | None = None,
    ) -> None:
        super().__init__()
        n0, m0, p0, values = read_ba(file)
        self.n, self.m, self.p = n or n0, m or m0, p or p0
        if min(self.n, self.m, self.p) < 1:
            raise ValueError(f"need n, m, p >= 1, got {self.n}, {self.m}, {self.p}")
        values_t = torch.tensor(values, dtype=torch.float64)
        self.register_buffer("camera", values_t[:CAMERA])
        self.register_buffer("point", values_t[CAMERA : CAMERA + 3])
        self.weight0 = float(values_t[CAMERA + 3])
        self.register_buffer("feature", values_t[CAMERA + 4 :])
        obs = torch.arange(self.p)
        self.register_buffer("obs_cam", obs % self.n, persistent=False)
        self.register_buffer("obs_point", obs % self.m, persistent=False)
        self.input_shape = (CAMERA * self.n + 3 * self.m + self.p,)

    def sample_input(self, gen: torch.Generator) -> torch.Tensor:
        """The file's camera, point and weight, repeated as ADBench does."""
        return torch.cat(
            [
                self.camera.repeat(self.n),
                self.point.repeat(self.m),
                self.camera.new_full((self.p,), self.weight0),  # on the module's device
            ]
        )

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cams_end = CAMERA * self.n
        points_end = cams_end + 3 * self.m
        cams = x[..., :cams_end].reshape(self.n, CAMERA)
        return cams, x[..., cams_end:points_end].reshape(self.m, 3), x[..., points_end:]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cams, points, weights = self.split(x)
        seen = project(cams[self.obs_cam], points[self.obs_point])
        reprojection = weights.unsqueeze(-1) * (seen - self.feature.to(x.dtype))
        return torch.cat([reprojection.reshape(-1), 1 - weights * weights])

    def observation_columns(self) -> torch.Tensor:
        """(P, 15): observation i's unknowns, ascending: camera i % N, point i % M, weight i."""
        n_cams = CAMERA * self.n
        cam_cols = (self.obs_cam.cpu() * CAMERA).unsqueeze(1) + torch.arange(CAMERA)
        point_cols = n_cams + (self.obs_point.cpu() * 3).unsqueeze(1) + torch.arange(3)
        weight_cols = (n_cams + 3 * self.m + torch.arange(self.p)).unsqueeze(1)
        return torch.cat([cam_cols, point_cols, weight_cols], dim=1)

    def observation(self, unknowns: torch.Tensor) -> torch.Tensor:
        """One observation's 3 residuals (its 2 weighted reprojection errors, 1 - w^2) from
        its 15 unknowns: ``forward``'s arithmetic for one observation."""
        cam, point, weight = unknowns[:CAMERA], unknowns[CAMERA:-1], unknowns[-1]
        seen = project(cam.unsqueeze(0), point.unsqueeze(0))[0]
        error = weight * (seen - self.feature.to(unknowns.dtype))
        return torch.cat([error, (1 - weight * weight).unsqueeze(0)])

    def jacobian_blocks(self) -> Blocks:
        """Observation i is a block: rows 2i, 2i+1 and 2P + i, of its 15 unknowns."""
        obs = torch.arange(self.p)
        rows = torch.stack([2 * obs, 2 * obs + 1, 2 * self.p + obs], dim=1)
        return Blocks(self.observation_columns(), rows, self.observation)

    def jacobian_sparsity(self) -> torch.Tensor:
        """Rows 2i, 2i+1: camera i % N (11), point i % M (3), weight i; row 2P + i: weight i.
        Built in row-major order, each row's columns ascending, so that the tensor is
        coalesced as made (coalescing ba1's 1.4e6 entries took 0.34 CPU-s of a first call)."""
        p = self.p
        obs = torch.arange(p)
        cols = self.observation_columns()  # (P, 15), ascending
        weight_cols = cols[:, -1:]
        width = cols.shape[1]
        pairs = torch.stack([cols, cols], dim=1).reshape(-1)  # rows 2i, 2i+1: the same 15
        pair_rows = torch.arange(2 * p).repeat_interleave(width)
        all_rows = torch.cat([pair_rows, 2 * p + obs])
        all_cols = torch.cat([pairs, weight_cols.reshape(-1)])
        values = torch.ones(all_rows.numel())
        indices = torch.stack([all_rows, all_cols])
        shape = (3 * p, self.input_shape[0])
        return torch.sparse_coo_tensor(
            indices, values, shape, check_invariants=False, is_coalesced=True
        )
