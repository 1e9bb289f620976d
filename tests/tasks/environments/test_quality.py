"""Why a write is not seen: no read about its table in the domain, or a read that shows nothing; tau2's
writes measured with calls its checks accept."""

from agentscaler.artifacts import load_scenarios
from agentscaler.workspace import Workspace
from envs.episode import Environment
from envs.sandbox import unsafe_from_env
from envs.spec import DomainSpec, ToolSpec
from tasks.environments.quality import first_writes, observe_writes, unobserved_why
from tasks.evaluation.tau2 import tau2_domain_dir
from tasks.scenarios.arguments import StateView


def _read(name: str, description: str) -> ToolSpec:
    return ToolSpec(name=name, description=description, parameters={"type": "object", "properties": {}}, kind="read")


def test_a_write_no_read_is_about_is_told_apart_from_one_a_read_misses():
    reads = [_read("search_businesses", "Search for businesses by region."),
             _read("find_events", "Find cultural events in a city.")]
    assert unobserved_why(["tickets"], reads, {}) == "no read about ['tickets'] in the domain"
    # by the read's plan, or by its name and description naming the table
    assert unobserved_why(["tickets"], reads, {"find_events": {"table": "tickets"}}).startswith("no read shows")
    assert unobserved_why(["events"], reads, {}).startswith("no read shows")
    # a read's plan says what it is about: policy violations are not policies, whatever the name says
    badge = [_read("get_project_policy_violations", "Policy violations of a project.")]
    plans = {"get_project_policy_violations": {"table": "policy_violations"}}
    assert unobserved_why(["policies"], badge, plans) == "no read about ['policies'] in the domain"


def test_tau2_writes_are_measured_with_calls_its_checks_accept(tmp_path):
    """tau2 airline rejects random grounded writes (a payment method the user does not hold, a
    flight without a date): those say nothing about reads. With the first gold write of tau2's own
    tasks tried after them, every write is made and every one is shown by a read (get_*_details)."""
    ws = Workspace(tmp_path)
    d = tau2_domain_dir(ws, "airline")
    spec = DomainSpec.load(d)
    env = Environment.open(d, unsafe=unsafe_from_env())
    try:
        state = StateView(spec, d / spec.seed_path)
        blind, _ = observe_writes(env, spec, state)
        told, _ = observe_writes(env, spec, state, examples=first_writes(load_scenarios(ws, d.name)))
    finally:
        env.close()
    assert any(w.startswith("write failed") for w in blind["unobserved"].values()), blind
    assert told["writes"] == 6 and told["writes_observed"] == 6, told
