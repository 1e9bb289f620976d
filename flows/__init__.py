"""Orchestration: every Prefect @task and @flow (stage functions of tasks/ composed into runs), and the
`agentscaler` command line (cli.py)."""

import logging

from agentscaler.settings import configure_prefect_env

configure_prefect_env()  # before any flow module imports Prefect: local runs stay offline


class OneLinePerStep(logging.Filter):
    """Prefect's run logs at INFO: our tasks log one line per domain step (what was built, how
    long it took); Prefect's own "Finished in state Completed()" after every task run would double
    that for nothing, so it is dropped. Failures, retries and flow-level lines still show."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Finished in state Completed")


logging.getLogger("prefect.task_runs").addFilter(OneLinePerStep())
