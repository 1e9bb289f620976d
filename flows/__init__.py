"""Orchestration: every Prefect @task and @flow (stage functions of tasks/ composed into runs), and the
`agentscaler` command line (cli.py)."""

from agentscaler.settings import configure_prefect_env

configure_prefect_env()  # before any flow module imports Prefect: local runs stay offline and quiet
