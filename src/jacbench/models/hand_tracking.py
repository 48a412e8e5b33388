"""ADBench's hand tracking (HT): the field's tall Jacobian problem, 3C x 26 (or 3C x (2C + 26)).

A skinned hand mesh (22 bones, 544 vertices) is posed by 26 parameters theta: a global
rotation (axis-angle, 0:3) and translation (3:6), then four angles per finger (two at its
base joint, one at each of the next two joints). Each of C observed 3-D points corresponds to
a mesh vertex ("simple") or to a point of a mesh triangle given by two barycentric
coordinates u ("complicated", which adds those 2C unknowns). The residuals are the observed
points minus the posed ones. Written from the problem statement (GradBench ``evals/ht`` and
its file reader, the ADBench paper); the unknowns are ordered as ADBench orders them
(complicated: the 2C u's first, then theta), and the function is branch-free so it traces.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
from torch import nn

from jacbench.models.adbench import data_file, rotation_matrix

THETA = 26  # global rotation 3, translation 3, five fingers x 4 angles
VARIANTS = ("simple", "complicated")
FINGERS = 5


@dataclass(frozen=True)
class HandMesh:
    """The rigged hand of ADBench's model folder: bones (parents, rest transforms) and
    vertices (rest positions, bone weights), plus the mesh's triangles."""

    parents: list[int]
    base_relatives: torch.Tensor  # (B, 4, 4), a bone's rest pose relative to its parent
    inverse_base_absolutes: torch.Tensor  # (B, 4, 4)
    positions: torch.Tensor  # (V, 4), homogeneous rest positions
    weights: torch.Tensor  # (V, B)
    triangles: torch.Tensor  # (T, 3) vertex indices

    @classmethod
    def read(cls) -> HandMesh:
        bones = [line.split(":") for line in _lines("model/bones.txt")]
        matrices = torch.tensor([[float(v) for v in b[2:34]] for b in bones], dtype=torch.float64)
        vertices = [line.split(":") for line in _lines("model/vertices.txt")]
        positions = torch.ones(len(vertices), 4, dtype=torch.float64)
        weights = torch.zeros(len(vertices), len(bones), dtype=torch.float64)
        for i, atoms in enumerate(vertices):
            positions[i, :3] = torch.tensor([float(v) for v in atoms[:3]], dtype=torch.float64)
            for k in range(int(atoms[8])):  # then (bone, weight) pairs
                weights[i, int(atoms[9 + 2 * k])] = float(atoms[10 + 2 * k])
        triangles = [[int(v) for v in line.split(":")] for line in _lines("model/triangles.txt")]
        return cls(
            parents=[int(b[1]) for b in bones],
            base_relatives=matrices[:, :16].reshape(-1, 4, 4),
            inverse_base_absolutes=matrices[:, 16:].reshape(-1, 4, 4),
            positions=positions,
            weights=weights,
            triangles=torch.tensor(triangles),
        )

    @cached_property
    def angle_index(self) -> torch.Tensor:
        """(B, 3) index into theta padded with a zero (index THETA) of each bone's Euler
        angles: a finger's second bone takes two angles, its third and fourth one each; its
        first bone, the wrist and the forearm stay in their rest pose."""
        index = torch.full((len(self.parents), 3), THETA)
        slot = 6
        for finger in range(FINGERS):
            bone = 2 + 4 * finger
            index[bone, :2] = torch.tensor([slot, slot + 1])
            index[bone + 1, 0], index[bone + 2, 0] = slot + 2, slot + 3
            slot += 4
        return index

    def moved_by(self) -> torch.Tensor:
        """(V, THETA) bool: which parameters can move each vertex (its bones' ancestors')."""
        n_bones = len(self.parents)
        ancestors = torch.eye(n_bones, dtype=torch.bool)  # [b, a]: a is b or an ancestor
        for bone, parent in enumerate(self.parents):
            if parent >= 0:
                ancestors[bone] |= ancestors[parent]
        bone_params = torch.zeros(n_bones, THETA + 1, dtype=torch.bool)
        bone_params.scatter_(1, self.angle_index, True)
        by_bone = (ancestors.double() @ bone_params[:, :THETA].double()) > 0
        moved = ((self.weights != 0).double() @ by_bone.double()) > 0
        moved[:, :6] = True  # the global rotation and translation move everything
        return moved


def _lines(relative: str) -> list[str]:
    return [line for line in data_file("ht", relative).read_text().splitlines() if line.strip()]


def euler_rotations(angles: torch.Tensor) -> torch.Tensor:
    """(B, 3, 3) rotations Rz @ Ry @ Rx of ADBench's (x, z, y) Euler angles (B, 3)."""
    cx, cz, cy = torch.cos(angles).unbind(-1)
    sx, sz, sy = torch.sin(angles).unbind(-1)
    zero, one = torch.zeros_like(cx), torch.ones_like(cx)
    rx = torch.stack([one, zero, zero, zero, cx, -sx, zero, sx, cx], -1)
    ry = torch.stack([cy, zero, -sy, zero, one, zero, sy, zero, cy], -1)
    rz = torch.stack([cz, -sz, zero, sz, cz, zero, zero, zero, one], -1)
    shape = angles.shape[:-1] + (3, 3)
    return rz.reshape(shape) @ ry.reshape(shape) @ rx.reshape(shape)


class HandTracking(nn.Module):
    """HT residuals of an ADBench hand file (``file``) of the ``variant`` folder."""

    accepts_batch = False

    def __init__(self, variant: str = "simple", file: str = "hand1_t26_c100.txt") -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"unknown HT variant {variant!r}; valid: {', '.join(VARIANTS)}")
        self.complicated = variant == "complicated"
        mesh = HandMesh.read()
        self.parents = mesh.parents
        self.register_buffer("base_relatives", mesh.base_relatives)
        self.register_buffer("inverse_base_absolutes", mesh.inverse_base_absolutes)
        self.register_buffer("rest", mesh.positions)
        self.register_buffer("weights", mesh.weights)
        self.register_buffer("angle_index", mesh.angle_index, persistent=False)
        self._mesh = mesh
        c, points, correspondences, us, theta = read_ht(variant, file)
        self.c = c
        self.register_buffer("points", points)
        # the vertices each point blends: (C, 3), with weights (u0, u1, 1 - u0 - u1)
        corners = mesh.triangles[correspondences] if self.complicated else correspondences[:, None]
        self.register_buffer("corners", corners, persistent=False)
        self.register_buffer("start", torch.cat([us.reshape(-1), theta]))
        self.input_shape = (self.start.numel(),)

    def sample_input(self, gen: torch.Generator) -> torch.Tensor:
        """The file's starting point (u's and theta), as ADBench evaluates it."""
        return self.start.clone()

    def vertices(self, theta: torch.Tensor) -> torch.Tensor:
        """(V, 3) posed vertex positions: linear blend skinning, then the global transform."""
        angles = torch.cat([theta, theta.new_zeros(1)])[self.angle_index]
        rel = self.base_relatives.to(theta.dtype)
        rotated = rel[:, :, :3] @ euler_rotations(angles)  # relative @ [[R, 0], [0, 1]]
        relatives = torch.cat([rotated, rel[:, :, 3:]], dim=2)
        absolutes: list[torch.Tensor] = []
        for bone, parent in enumerate(self.parents):
            absolutes.append(relatives[bone] if parent < 0 else absolutes[parent] @ relatives[bone])
        transforms = torch.stack(absolutes) @ self.inverse_base_absolutes.to(theta.dtype)
        blended = self.weights.to(theta.dtype) @ transforms[:, :3, :].reshape(-1, 12)
        local = (blended.reshape(-1, 3, 4) @ self.rest.to(theta.dtype).unsqueeze(-1)).squeeze(-1)
        return local @ rotation_matrix(theta[0:3]).T + theta[3:6]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        theta = x[-THETA:]
        seen = self.vertices(theta)[self.corners]  # (C, k, 3)
        if self.complicated:
            u = x[:-THETA].reshape(self.c, 2)
            blend = torch.cat([u, 1 - u.sum(-1, keepdim=True)], dim=-1)
            posed = (blend.unsqueeze(-1) * seen).sum(1)
        else:
            posed = seen[:, 0]
        return (self.points.to(x.dtype) - posed).reshape(-1)

    def jacobian_sparsity(self) -> torch.Tensor:
        """Point i's three rows: the parameters that move its corners' vertices and, when
        complicated, its own two u's (columns 2i, 2i + 1)."""
        moved = self._mesh.moved_by()[self.corners].any(dim=1)  # (C, THETA)
        rows = moved.repeat_interleave(3, dim=0)
        if not self.complicated:
            return rows
        own = torch.zeros(3 * self.c, 2 * self.c, dtype=torch.bool)
        point = torch.arange(3 * self.c) // 3
        own[torch.arange(3 * self.c), 2 * point] = True
        own[torch.arange(3 * self.c), 2 * point + 1] = True
        return torch.cat([own, rows], dim=1).to_sparse()


def read_ht(
    variant: str, name: str
) -> tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(C, points (C, 3), correspondences (C,), u's (C, 2) or (0, 2), theta) of a hand file."""
    lines = data_file(f"ht/{variant}", name).read_text().splitlines()
    c, n_theta = (int(v) for v in lines[0].split())
    if n_theta != THETA:
        raise ValueError(f"{name}: expected {THETA} pose parameters, found {n_theta}")
    rows = [line.split() for line in lines[1 : 1 + c]]
    correspondences = torch.tensor([int(r[0]) for r in rows])
    points = torch.tensor([[float(v) for v in r[1:4]] for r in rows], dtype=torch.float64)
    n_us = c if variant == "complicated" else 0
    us_lines = lines[1 + c : 1 + c + n_us]
    us = torch.tensor([[float(v) for v in r.split()] for r in us_lines], dtype=torch.float64)
    theta_lines = lines[1 + c + n_us : 1 + c + n_us + THETA]
    theta = torch.tensor([float(v) for v in theta_lines], dtype=torch.float64)
    return c, points, correspondences, us.reshape(-1, 2), theta
