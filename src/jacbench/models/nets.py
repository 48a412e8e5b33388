"""Realistic small networks: a CNN and a transformer block (Jacobians w.r.t. the input)."""

from __future__ import annotations

import math

import torch
from torch import nn


class SmallCNN(nn.Module):
    """Two convolutions and a linear head on a (channels, size, size) image."""

    accepts_batch = True

    def __init__(self, channels: int = 1, size: int = 12, width: int = 4, n_out: int = 10) -> None:
        super().__init__()
        if size < 7:
            raise ValueError(f"size must be at least 7 for two 3x3 convolutions, got {size}")
        self.input_shape = (channels, size, size)
        self.features = nn.Sequential(
            nn.Conv2d(channels, width, 3),
            nn.Tanh(),
            nn.Conv2d(width, width, 3, stride=2),
            nn.Tanh(),
        )
        side = (size - 2 - 3) // 2 + 1
        self.head = nn.Linear(width * side * side, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(-3))


class TransformerBlock(nn.Module):
    """Pre-written self-attention block (attention, layer norm, MLP) on a (seq_len, d_model)
    sequence. Written out rather than nn.TransformerEncoderLayer, whose inference fast path
    has no forward-mode derivative."""

    accepts_batch = True

    def __init__(self, seq_len: int = 6, d_model: int = 16, heads: int = 2, d_ff: int = 32):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by heads ({heads})")
        self.input_shape = (seq_len, d_model)
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        *lead, length, d_model = x.shape
        d_head = d_model // self.heads
        q, k, v = self.qkv(x).chunk(3, dim=-1)

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(*lead, length, self.heads, d_head).transpose(-3, -2)

        scores = split(q) @ split(k).transpose(-2, -1) / math.sqrt(d_head)
        attended = (scores.softmax(-1) @ split(v)).transpose(-3, -2).reshape(x.shape)
        x = self.norm1(x + self.proj(attended))
        return self.norm2(x + self.mlp(x))
