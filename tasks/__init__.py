"""Pipeline stages: plain functions that do the work, and thin Prefect @task wrappers."""
