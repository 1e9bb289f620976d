"""Why a write is not seen: no read about its table in the domain, or a read that shows nothing; tau2's
writes measured with calls its checks accept."""

from agentscaler.models import GoldCall
from envs.episode import Environment
from envs.sandbox import unsafe_from_env
from envs.spec import DomainSpec, ToolSpec
from envs.tau2.build import build_tau2_domain
from envs.tau2.calls import task_actions
from tasks.environments.quality import first_writes, observe_writes, unobserved_why
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
    spec = build_tau2_domain("airline", tmp_path / "airline")
    kinds = {t.name: t.kind for t in spec.tools}
    gold = [[GoldCall(name=c["name"], arguments=c["arguments"], kind=kinds[c["name"]]) for c in calls]
            for _task, calls in task_actions("airline")]
    env = Environment.open(tmp_path / "airline", unsafe=unsafe_from_env())
    try:
        state = StateView(spec, tmp_path / "airline" / spec.seed_path)
        bad = env.call("book_reservation", {**gold_booking(gold), "payment_methods": [
            {"payment_id": "gift_card_0000000", "amount": 1}]})  # what a random grounded call looks like
        told, _ = observe_writes(env, spec, state, examples=first_writes(gold))
    finally:
        env.close()
    assert not bad.ok and "payment" in (bad.error or "").lower(), bad
    assert told["writes"] == 6 and told["writes_observed"] == 6, told


def gold_booking(gold: list[list[GoldCall]]) -> dict:
    return next(c.arguments for calls in gold for c in calls if c.name == "book_reservation")


def test_writes_seen_by_reads_through_the_batched_round_trip_also_one_answering_otherwise(tmp_path):
    """observe_writes runs each write's reads by running the write again from the seed in one
    round trip; a write whose second run answers otherwise (here: the wall clock in its output and
    its state) has its reads run on the state its first run left, so it is still seen; a write no
    read shows is still reported unseen."""
    from tests.data.domains.shop.build import build_shop

    d = build_shop(tmp_path / "shop")
    (d / "tools.py").write_text((d / "tools.py").read_text() + (
        "\n\nimport datetime as _clock\n_update_email = update_email\n\n\n"
        "def update_email(db, user_id: str, email: str) -> dict:\n"
        "    return _update_email(db, user_id, f'{_clock.datetime.now().microsecond}.{email}')\n"))
    full = DomainSpec.load(d)
    told = {}
    with Environment.open(d, unsafe=unsafe_from_env()) as env:
        for names in (("update_email", "get_user", "place_order"), ("update_email", "find_products")):
            spec = full.model_copy(update={"tools": [t for t in full.tools if t.name in names]})
            told[names[-1]], _ = observe_writes(env, spec, StateView(spec, d / spec.seed_path))
    assert told["place_order"]["writes"] == told["place_order"]["writes_observed"] == 2, told  # get_user shows both
    assert told["find_products"]["unobserved"].keys() == {"update_email"}, told  # no read of users here
