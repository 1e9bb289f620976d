"""Prefect flows: composition of stage functions (tasks/) into runs, and every Prefect @task/@flow."""

from agentscaler.settings import configure_prefect_env

configure_prefect_env()  # before any flow module imports Prefect: local runs stay offline and quiet
