"""Where Results go: parquet files (the source of truth) and MLflow runs."""
