"""Pipeline stages, one package each (corpus, discover, environments, scenarios, rollouts, verify, sft,
evaluation): plain functions that do the work; no Prefect (flows/ orchestrates them)."""
