"""Scenarios a person would ask for, on the issue's service corpus (built and run in the real sandbox):
the stated mix, chains, gold reads that find something, plain intents, and gold replays the
verifier accepts."""

from __future__ import annotations

import pytest

from agentscaler.artifacts import load_scenarios
from agentscaler.models import GoldCall, Scenario
from agentscaler.workspace import Workspace
from envs.episode import Environment
from envs.sandbox import unsafe_from_env
from envs.spec import DomainSpec
from tasks.environments.synthesize import synthesize_domain
from tasks.rollouts.gold import gold_trajectory
from tasks.scenarios.build import build_scenarios
from tasks.scenarios.intents import asks_for_change, plain
from tasks.scenarios.quality import is_empty, scenario_kind, scenario_quality
from tasks.verify.replay import Replayer
from tasks.verify.verify import verify_trajectories
from tests.tasks.environments.services import service_record, service_tools

UNSAFE = unsafe_from_env()
DOMAINS = ("cinema", "parking", "library", "vet_clinic")


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("services"))
    for name in DOMAINS:
        synthesize_domain(ws, service_record(name), service_tools(name), unsafe=UNSAFE)
        build_scenarios(ws, name, per_domain=12, max_length=3, seed=0, unsafe=UNSAFE)
    return ws


def test_the_mix_chains_and_reads_that_find_something(ws: Workspace):
    scenarios = [s for d in DOMAINS for s in load_scenarios(ws, d)]
    q = scenario_quality(scenarios)
    assert q["scenarios"] >= 40
    assert q["kinds"]["single"] > 0 and q["kinds"]["create_then_change"] > 0 and q["kinds"]["chained_read"] > 0
    assert q["chain_share"] >= 0.9  # multi-call walks must chain; the few left unchained are counted
    assert q["nonempty_read_share"] >= 0.9 and q["scenarios_all_reads_empty"] == 0


def test_intents_are_plain_and_a_read_only_one_asks_for_no_change(ws: Workspace):
    for d in DOMAINS:
        spec = DomainSpec.load(ws.domain_dir(d))
        for s in load_scenarios(ws, d):
            assert plain(s.intent, s.user_facts.values()), s.intent
            assert spec.name not in s.intent and not any(t.name in s.intent for t in spec.tools), s.intent
            if s.read_only:
                assert "don't change anything" in s.intent and not asks_for_change(s.intent), s.intent


def test_every_gold_replay_passes_verification(ws: Workspace):
    for d in DOMAINS:
        spec = DomainSpec.load(ws.domain_dir(d))
        schemas = [t.openai_schema() for t in spec.tools]
        env = Environment.open(ws.domain_dir(d), unsafe=UNSAFE)
        try:
            scen = load_scenarios(ws, d)
            trajs = [gold_trajectory(s, env, schemas, "system", "t") for s in scen]
            with Replayer(ws.root / "domains", envs={d: env}) as rp:
                verify_trajectories(ws, trajs, replayer=rp)
            for s, t in zip(scen, trajs):
                assert t.verdict.passed, (d, s.gold_calls, t.verdict.reasons)
        finally:
            env.close()


def _scenario(calls: list[GoldCall], facts: dict) -> Scenario:
    return Scenario(id="s", domain="d", read_only=all(c.kind == "read" for c in calls), intent="x", user_facts=facts,
                    gold_calls=calls, gold_hash="h", seed_hash="h")


def test_kinds_count_only_what_the_agent_must_read_from_a_result():
    found = GoldCall(name="search", arguments={"city": "Oslo"}, output=[{"hotel_id": "h1", "name": "Fjord"}])
    booked = GoldCall(name="book", arguments={"hotel_id": "h1"}, output={"booking_id": "b7"}, kind="write")
    cancel = GoldCall(name="cancel", arguments={"booking_id": "b7"}, output={"status": "cancelled"}, kind="write")
    again = GoldCall(name="search", arguments={"city": "Oslo"}, output=[{"hotel_id": "h1", "city": "Oslo"}])
    assert scenario_kind(_scenario([found], {"city": "Oslo"})) == "single"
    assert scenario_kind(_scenario([found, booked], {"city": "Oslo"})) == "chained_read"
    assert scenario_kind(_scenario([booked, cancel], {"hotel_id": "h1"})) == "create_then_change"
    # the second search repeats the user's own value: nothing was read from the first result
    assert scenario_kind(_scenario([found, again], {"city": "Oslo"})) == "unchained"
    assert is_empty([]) and is_empty({"items": []}) and not is_empty({"items": [1]}) and not is_empty(0)


def test_the_run_report_shows_the_quality_per_domain_and_pooled(ws: Workspace):
    from tasks.environments.quality import quality_summary
    from tasks.evaluation.report import report_markdown

    q = quality_summary(ws)
    assert {d["domain"] for d in q["domains"]} == set(DOMAINS)
    p = q["pooled"]
    assert p["id_coherence"] == 1.0 and p["write_observability"] == 1.0 and p["execute_rate"] == 1.0
    assert p["chain_share"] >= 0.9 and p["nonempty_read_share"] >= 0.9
    md = report_markdown(None, {"tools": 1}, [5], quality=q)
    assert "## Environment quality" in md and "| id coherence (id parameters that resolve" in md
    assert "100.0%" in md and "scenario kinds" in md
