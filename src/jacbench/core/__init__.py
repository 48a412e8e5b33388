"""The library's contract: problems, strategies, prepared Jacobians, the registry, numerics
and sparsity."""
