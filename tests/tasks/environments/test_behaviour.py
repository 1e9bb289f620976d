"""The service corpus's environments behave like the APIs they come from: run for real in the sandbox
(synthesize_domain validates them; `play_calls` runs calls in one fresh episode, as `agentscaler play`)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentscaler.workspace import Workspace
from envs.sandbox import unsafe_from_env
from envs.spec import DomainSpec
from tasks.environments.play import PlayError, play_calls
from tasks.environments.synthesize import synthesize_domain
from tasks.scenarios.arguments import read_seed
from tests.tasks.environments.services import NAMES, service_record, service_tools

UNSAFE = unsafe_from_env()


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("services"))
    for name in NAMES:
        synthesize_domain(ws, service_record(name), service_tools(name), unsafe=UNSAFE)
    return ws


def seed(ws: Workspace, domain: str, table: str) -> list[dict]:
    return read_seed(DomainSpec.load(ws.domain_dir(domain)), ws.domain_dir(domain) / "seed.sqlite")[table]


def play(ws: Workspace, domain: str, *calls: tuple[str, dict]) -> dict:
    return play_calls(ws, domain, [{"name": n, "arguments": a} for n, a in calls], unsafe=UNSAFE)


def test_every_service_is_coherent_observable_and_executes(ws: Workspace):
    for name in NAMES:
        r = DomainSpec.load(ws.domain_dir(name)).report
        assert r["execute_rate"] == 1.0, (name, r["failures"])
        assert r["quality"]["id_coherence"] in (1.0, None), (name, r["quality"]["unresolved_ids"])
        assert r["quality"]["write_observability"] == 1.0, (name, r["quality"]["unobserved"])


def test_a_booking_takes_seats_its_id_cancels_it_once_and_gives_them_back(ws: Workspace):
    shows = seed(ws, "cinema", "showtimes")
    full = next(s for s in shows if s["seats_available"] == 0)
    show = next(s for s in shows if s["seats_available"] >= 3)
    booked = play(ws, "cinema", ("book_cinema_tickets", {"showtime_id": show["showtime_id"], "quantity": 2}))
    bid = booked["results"][0]["content"]["booking_id"]
    out = play(ws, "cinema", ("book_cinema_tickets", {"showtime_id": show["showtime_id"], "quantity": 2}),
               ("get_showtime", {"showtime_id": show["showtime_id"]}),
               ("cancel_cinema_booking", {"booking_id": bid}),
               ("cancel_cinema_booking", {"booking_id": bid}),
               ("get_showtime", {"showtime_id": show["showtime_id"]}),
               ("book_cinema_tickets", {"showtime_id": full["showtime_id"], "quantity": 1}),
               ("get_booking", {"booking_id": "nope"}))
    r = out["results"]
    assert r[1]["content"]["seats_available"] == show["seats_available"] - 2
    assert r[2]["ok"] and r[2]["content"]["status"] == "cancelled"
    assert not r[3]["ok"] and "already cancelled" in r[3]["error"]  # a wrong state, as a real API says
    assert r[4]["content"]["seats_available"] == show["seats_available"]
    assert not r[5]["ok"] and "0 left, 1 requested" in r[5]["error"]  # insufficient quantity
    assert not r[6]["ok"] and "not found" in r[6]["error"]
    assert {d["table"] for d in out["diff"]} == {"bookings"}  # net: one cancelled booking, seats restored
    assert len(out["state_hash"]) >= 16


def test_parking_fee_comes_from_the_clock_and_extending_moves_the_end(ws: Workspace):
    ses = [s for s in seed(ws, "parking", "sessions") if s["status"] == "active"]
    clock = DomainSpec.load(ws.domain_dir("parking")).clock
    out = play(ws, "parking", ("end_parking_session", {"session_id": ses[0]["session_id"]}),
               ("end_parking_session", {"session_id": ses[0]["session_id"]}),
               ("extend_parking_session", {"session_id": ses[1]["session_id"], "hours": 2}),
               ("extend_parking_session", {"session_id": ses[0]["session_id"], "hours": 1}))
    r = out["results"]
    ended = r[0]["content"]
    assert ended["status"] == "ended" and ended["ended_at"] == clock
    from datetime import datetime
    hours = (datetime.fromisoformat(clock) - datetime.fromisoformat(ses[0]["started_at"])).total_seconds() / 3600
    assert ended["fee"] == pytest.approx(round(ses[0]["fee"] + hours * ses[0]["hourly_rate"], 2))
    assert not r[1]["ok"] and "already ended" in r[1]["error"]
    assert r[2]["content"]["ends_at"] > ses[1]["ends_at"]
    assert not r[3]["ok"] and "only a session that is active can be extended" in r[3]["error"]


def test_refills_run_out_and_loans_are_renewed_and_returned(ws: Workspace):
    rx = next(p for p in seed(ws, "pharmacy", "prescriptions") if p["status"] == "active" and p["refills_left"] > 0)
    n = rx["refills_left"]
    out = play(ws, "pharmacy", *[("refill_prescription", {"prescription_id": rx["prescription_id"]})] * (n + 1))
    assert [r["content"]["refills_left"] for r in out["results"][:n]] == list(range(n - 1, -1, -1))
    assert "no refills left" in out["results"][n]["error"]
    book = next(b for b in seed(ws, "library", "books") if b["copies_available"] > 0)
    patron = seed(ws, "library", "patrons")[0]
    lent = play(ws, "library", ("borrow_book", {"book_id": book["book_id"], "patron_id": patron["patron_id"]}))
    loan = lent["results"][0]["content"]
    assert loan["due_date"] == "2024-05-29T15:00:00"  # 14 days after the episode clock
    out = play(ws, "library", ("borrow_book", {"book_id": book["book_id"], "patron_id": patron["patron_id"]}),
               ("renew_loan", {"loan_id": loan["loan_id"]}), ("return_book", {"loan_id": loan["loan_id"]}),
               ("renew_loan", {"loan_id": loan["loan_id"]}))
    r = out["results"]
    assert r[1]["content"]["due_date"] == "2024-06-12T15:00:00" and r[2]["content"]["status"] == "returned"
    assert not r[3]["ok"] and "returned" in r[3]["error"]


def test_appointments_move_only_from_requested(ws: Workspace):
    pet, vet = seed(ws, "vet_clinic", "pets")[0], seed(ws, "vet_clinic", "vets")[0]
    made = play(ws, "vet_clinic", ("request_appointment", {"pet_id": pet["pet_id"], "vet_id": vet["vet_id"],
                                                            "date": "2024-06-01"}))
    aid = made["results"][0]["content"]["appointment_id"]
    assert made["results"][0]["content"]["status"] == "pending"
    out = play(ws, "vet_clinic", ("request_appointment", {"pet_id": pet["pet_id"], "vet_id": vet["vet_id"],
                                                           "date": "2024-06-01"}),
               ("approve_appointment", {"appointment_id": aid}), ("reject_appointment", {"appointment_id": aid}))
    assert out["results"][1]["content"]["status"] == "approved"
    assert "only a appointment that is pending can be rejected" in out["results"][2]["error"]


def test_play_reports_bad_calls_and_the_cli_prints_the_documented_shape(ws: Workspace, tmp_path):
    out = play_calls(ws, "gym", [{"name": "get_member"}, {"arguments": {}}, 7, {"name": "nope", "arguments": {}}],
                     unsafe=UNSAFE)
    errs = [r["error"] for r in out["results"]]
    assert not any(r["ok"] for r in out["results"]) and out["diff"] == []
    assert "member_id" in errs[0] and "call 1: name" in errs[1] and "call 2" in errs[2] and "unknown tool" in errs[3]
    with pytest.raises(PlayError, match="no finished environment"):
        play_calls(ws, "nowhere", [])
    from flows.cli import app

    member = seed(ws, "gym", "members")[0]["member_id"]
    calls = tmp_path / "calls.json"
    calls.write_text(json.dumps([{"name": "get_member", "arguments": {"member_id": member}}]))
    res = CliRunner().invoke(app, ["--workspace", str(ws.root), "play", "gym", str(calls), "--json"],
                             env={"AGENTSCALER_UNSAFE_SANDBOX": "1" if UNSAFE else "0"})
    assert res.exit_code == 0, res.output
    body = json.loads(res.stdout)
    assert set(body) == {"results", "diff", "state_hash"} and set(body["results"][0]) == {"ok", "content", "error"}
    assert body["results"][0]["content"]["member_id"] == member
    calls.write_text("{not json")
    res = CliRunner().invoke(app, ["--workspace", str(ws.root), "play", "gym", str(calls), "--json"])
    assert res.exit_code == 1 and "not JSON" in " ".join(res.output.split())


def test_money_moves_with_insufficient_balance_errors(tmp_path):
    """Deposits, withdrawals and transfers move a balance a read shows; overdrafts are refused."""
    from agentscaler.models import Tool

    def t(name, desc, props, req):
        return Tool(name=name, source_name=name, source="t", description=desc,
                    parameters={"type": "object", "properties": props, "required": req}).with_id()

    acc = {"account_id": {"type": "string"}}
    amount = {"amount": {"type": "number", "minimum": 0}}
    tools = [t("get_account", "Get an account with its balance.", acc, ["account_id"]),
             t("deposit_funds", "Deposit money into an account.", {**acc, **amount}, ["account_id", "amount"]),
             t("withdraw_funds", "Withdraw money from an account.", {**acc, **amount}, ["account_id", "amount"]),
             t("transfer_funds", "Transfer money between two accounts.",
               {"from_account_id": {"type": "string"}, "to_account_id": {"type": "string"}, **amount},
               ["from_account_id", "to_account_id", "amount"])]
    ws = Workspace(tmp_path / "bank")
    spec = synthesize_domain(ws, {"domain": "bank", "tools": [x.id for x in tools]}, tools, unsafe=UNSAFE)
    assert spec.report["quality"]["write_observability"] == 1.0
    a, b = seed(ws, "bank", "accounts")[:2]
    out = play(ws, "bank", ("deposit_funds", {"account_id": a["account_id"], "amount": 10}),
               ("withdraw_funds", {"account_id": a["account_id"], "amount": a["balance"] + 1000}),
               ("transfer_funds", {"from_account_id": a["account_id"], "to_account_id": b["account_id"], "amount": 5}),
               ("get_account", {"account_id": b["account_id"]}))
    r = out["results"]
    assert r[0]["content"]["balance"] == pytest.approx(a["balance"] + 10)
    assert not r[1]["ok"] and "insufficient balance" in r[1]["error"]
    assert r[2]["content"]["from"]["balance"] == pytest.approx(a["balance"] + 5)
    assert r[3]["content"]["balance"] == pytest.approx(b["balance"] + 5)
