"""Running jobs and sweeps: the Hydra app, one job, sweeps, resume, claims, launchers and bad
input."""
