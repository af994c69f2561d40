"""`serve-pipeline tune`: search the server settings for the best throughput within the SLO."""
