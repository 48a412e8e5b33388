"""Built-in strategies. Each is one decorated function, registered by one entry-point line
in jacbench's pyproject.toml (group ``jacbench.strategies``)."""
