"""Why a write is not seen: no read about its table in the domain, or a read that shows nothing."""

from envs.spec import ToolSpec
from tasks.environments.quality import unobserved_why


def _read(name: str, description: str) -> ToolSpec:
    return ToolSpec(name=name, description=description, parameters={"type": "object", "properties": {}}, kind="read")


def test_a_write_no_read_is_about_is_told_apart_from_one_a_read_misses():
    reads = [_read("search_businesses", "Search for businesses by region."),
             _read("find_events", "Find cultural events in a city.")]
    assert unobserved_why(["tickets"], reads, {}) == "no read about ['tickets'] in the domain"
    # by the read's plan, or by its name and description naming the table
    assert unobserved_why(["tickets"], reads, {"find_events": {"table": "tickets"}}).startswith("no read shows")
    assert unobserved_why(["events"], reads, {}).startswith("no read shows")
