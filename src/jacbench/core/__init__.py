"""The contract: problems, strategies, prepared Jacobians, the registry, references, numerics
and sparsity."""
