"""A Dagster project that replicates a Parquet dataset to another region with skyplane-ops."""
