"""What the tests share besides fixtures: the CLI, the contract, MLflow's store, results."""
