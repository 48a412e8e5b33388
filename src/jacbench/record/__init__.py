"""Where Results go: the Result record, parquet files (the source of truth), MLflow runs and
sync."""
