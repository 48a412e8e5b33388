"""The benchmark's own side of a job, apart from the library: problems built from model
configs, the trusted float64 reference, and judging an answer against it."""
