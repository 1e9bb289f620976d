"""Recorded tool calls on the tau2 domains, generated deterministically.

Three groups, used by the equivalence test and the benchmark:
- `task_actions`: the gold actions of tau2's tasks.json (evaluation_criteria.actions), per task;
- `sampled_reads`: read calls over real ids of db.json (seeded random sample);
- `error_calls`: calls that must fail (unknown ids, invalid states, bad payments, limits).
A call is {"name": str, "arguments": dict}.
"""

from __future__ import annotations

import json
import random
from typing import Any

from envs.tau2.source import data_dir

Call = dict[str, Any]


def load_db(domain: str) -> dict[str, Any]:
    return json.loads((data_dir(domain) / "db.json").read_text("utf-8"))


def task_actions(domain: str) -> list[tuple[str, list[Call]]]:
    """(task id, gold actions) for every tau2 task that has actions."""
    tasks = json.loads((data_dir(domain) / "tasks.json").read_text("utf-8"))
    out = []
    for t in tasks:
        actions = (t.get("evaluation_criteria") or {}).get("actions") or []
        calls = [{"name": a["name"], "arguments": a.get("arguments") or {}} for a in actions]
        if calls:
            out.append((str(t["id"]), calls))
    return out


def sampled_reads(domain: str, db: dict[str, Any], n: int = 40, seed: int = 0) -> list[Call]:
    rng = random.Random(seed)
    calls: list[Call] = []
    users = list(db["users"])
    if domain == "airline":
        res = list(db["reservations"])
        flights = list(db["flights"].values())
        airports = sorted({f["origin"] for f in flights})
        for u in rng.sample(users, n):
            calls.append({"name": "get_user_details", "arguments": {"user_id": u}})
        for r in rng.sample(res, n):
            calls.append({"name": "get_reservation_details", "arguments": {"reservation_id": r}})
        for f in rng.sample(flights, n):
            date = rng.choice(sorted(f["dates"]))
            calls.append({"name": "get_flight_status", "arguments": {"flight_number": f["flight_number"], "date": date}})
        for _ in range(n // 2):
            o, d = rng.sample(airports, 2)
            date = f"2024-05-{rng.randint(1, 30):02d}"
            calls.append({"name": "search_direct_flight", "arguments": {"origin": o, "destination": d, "date": date}})
        for _ in range(n // 4):
            o, d = rng.sample(airports, 2)
            date = f"2024-05-{rng.randint(10, 29):02d}"
            calls.append({"name": "search_onestop_flight", "arguments": {"origin": o, "destination": d, "date": date}})
        calls.append({"name": "list_all_airports", "arguments": {}})
    else:
        orders = list(db["orders"])
        products = list(db["products"])
        for u in rng.sample(users, n):
            calls.append({"name": "get_user_details", "arguments": {"user_id": u}})
        for o in rng.sample(orders, n):
            calls.append({"name": "get_order_details", "arguments": {"order_id": o}})
        for p in rng.sample(products, n // 2):
            calls.append({"name": "get_product_details", "arguments": {"product_id": p}})
        for u in rng.sample(users, n // 2):
            email = db["users"][u]["email"]
            calls.append({"name": "find_user_id_by_email",
                          "arguments": {"email": email.upper() if rng.random() < 0.3 else email}})
        for u in rng.sample(users, n // 2):
            user = db["users"][u]
            calls.append({"name": "find_user_id_by_name_zip",
                          "arguments": {"first_name": user["name"]["first_name"].lower(),
                                        "last_name": user["name"]["last_name"], "zip": user["address"]["zip"]}})
        calls.append({"name": "list_all_product_types", "arguments": {}})
    for expr in ("2 + 2", "(1024.5 - 3) * 1.1", "10 / 4"):
        calls.append({"name": "calculate", "arguments": {"expression": expr}})
    calls.append({"name": "transfer_to_human_agents", "arguments": {"summary": "user asks for a human"}})
    return calls


def error_calls(domain: str, db: dict[str, Any], seed: int = 0) -> list[Call]:
    """Calls that fail in tau2 before changing anything (and a few that hit tau2's limits)."""
    rng = random.Random(seed + 1)
    c = lambda name, **a: {"name": name, "arguments": a}  # noqa: E731
    calls = [c("calculate", expression="2 ** 3"), c("calculate", expression="1 / 0"),
             c("calculate", expression="import os")]
    if domain == "airline":
        user_id = rng.choice(sorted(db["users"]))
        rid = rng.choice(sorted(db["reservations"]))
        r = db["reservations"][rid]
        calls += [
            c("get_user_details", user_id="nobody_000"),
            c("get_reservation_details", reservation_id="ZZZZZZ"),
            c("get_flight_status", flight_number="HAT999", date="2024-05-15"),
            c("get_flight_status", flight_number="HAT001", date="2023-01-01"),
            c("cancel_reservation", reservation_id="ZZZZZZ"),
            c("update_reservation_passengers", reservation_id=rid, passengers=r["passengers"] * 2),
            c("update_reservation_baggages", reservation_id=rid, total_baggages=9, nonfree_baggages=9,
              payment_id="credit_card_0000000"),
            c("send_certificate", user_id="nobody_000", amount=100),
        ]
        # certificates and gift cards that cannot pay for a change
        for u in sorted(db["users"]):
            pms = db["users"][u]["payment_methods"]
            cert = next((p for p in pms if p.startswith("certificate")), None)
            gift = next((p for p, v in pms.items() if p.startswith("gift_card") and v["amount"] < 50), None)
            mine = [x for x in db["users"][u]["reservations"] if x in db["reservations"]]
            if mine and cert:
                calls.append(c("update_reservation_baggages", reservation_id=mine[0],
                               total_baggages=db["reservations"][mine[0]]["total_baggages"] + 1,
                               nonfree_baggages=db["reservations"][mine[0]]["nonfree_baggages"] + 1,
                               payment_id=cert))
            if mine and gift:
                calls.append(c("update_reservation_baggages", reservation_id=mine[0],
                               total_baggages=10, nonfree_baggages=db["reservations"][mine[0]]["nonfree_baggages"] + 5,
                               payment_id=gift))
                break
        # a booking whose payments do not add up, and one on an unavailable flight
        f = next(f for f in db["flights"].values() if any(d["status"] == "available" for d in f["dates"].values()))
        date = next(k for k, d in f["dates"].items() if d["status"] == "available")
        gone = next(k for k, d in f["dates"].items() if d["status"] != "available")
        card = next((p for p in db["users"][user_id]["payment_methods"] if p.startswith("credit_card")), "credit_card_x")
        u = db["users"][user_id]
        pax = [{"first_name": u["name"]["first_name"], "last_name": u["name"]["last_name"], "dob": u["dob"]}]
        base = dict(user_id=user_id, origin=f["origin"], destination=f["destination"], flight_type="one_way",
                    cabin="economy", passengers=pax, total_baggages=0, nonfree_baggages=0, insurance="no")
        calls.append(c("book_reservation", flights=[{"flight_number": f["flight_number"], "date": date}],
                       payment_methods=[{"payment_id": card, "amount": 1}], **base))
        calls.append(c("book_reservation", flights=[{"flight_number": f["flight_number"], "date": gone}],
                       payment_methods=[{"payment_id": card, "amount": 1}], **base))
        calls.append(c("book_reservation", flights=[{"flight_number": f["flight_number"], "date": date}],
                       payment_methods=[{"payment_id": "credit_card_nope", "amount": 1}], **base))
        # tau2's limits: three new certificates per user, three new reservations per episode
        calls += [c("send_certificate", user_id=user_id, amount=50 + i) for i in range(4)]
        price = f["dates"][date]["prices"]["economy"]
        calls += [c("book_reservation", flights=[{"flight_number": f["flight_number"], "date": date}],
                    payment_methods=[{"payment_id": card, "amount": price}], **base) for _ in range(4)]
        calls.append(c("get_user_details", user_id=user_id))
    else:
        by_status: dict[str, list[str]] = {}
        for oid, o in db["orders"].items():
            by_status.setdefault(o["status"], []).append(oid)
        delivered = rng.choice(sorted(by_status["delivered"]))
        pending = rng.choice(sorted(by_status["pending"]))
        processed = rng.choice(sorted(by_status.get("processed", by_status["delivered"])))
        first = db["users"][min(db["users"])]
        item0 = db["orders"][delivered]["items"][0]["item_id"]
        calls += [
            c("get_order_details", order_id="#W0000000"),
            c("get_order_details", order_id="W0000000"),
            c("get_product_details", product_id="0000000000"),
            c("get_user_details", user_id="nobody_000"),
            c("find_user_id_by_email", email="nobody@example.com"),
            c("find_user_id_by_name_zip", first_name="No", last_name="Body", zip="00000"),
            # a real user's name with part of the zip (the address text holds it, the zip is not it)
            # and with a LIKE wildcard for a zip (matches any address text if taken as a pattern)
            c("find_user_id_by_name_zip", first_name=first["name"]["first_name"],
              last_name=first["name"]["last_name"], zip=first["address"]["zip"][:3]),
            c("find_user_id_by_name_zip", first_name=first["name"]["first_name"],
              last_name=first["name"]["last_name"], zip="%"),
            c("cancel_pending_order", order_id=delivered, reason="no longer needed"),
            c("cancel_pending_order", order_id=pending, reason="too expensive"),
            c("modify_pending_order_address", order_id=delivered, address1="1 A St", address2="", city="X",
              state="CA", country="USA", zip="00000"),
            c("modify_pending_order_items", order_id=processed, item_ids=[], new_item_ids=[],
              payment_method_id="credit_card_0"),
            c("modify_pending_order_payment", order_id=pending, payment_method_id="nope_0"),
            c("exchange_delivered_order_items", order_id=pending, item_ids=[], new_item_ids=[],
              payment_method_id="credit_card_0"),
            c("exchange_delivered_order_items", order_id=delivered, item_ids=[item0, item0, item0, item0],
              new_item_ids=[item0] * 4, payment_method_id="credit_card_0"),
            c("exchange_delivered_order_items", order_id=delivered, item_ids=[item0], new_item_ids=[],
              payment_method_id="credit_card_0"),
            c("exchange_delivered_order_items", order_id=delivered, item_ids=[item0], new_item_ids=["0000000000"],
              payment_method_id="credit_card_0"),
            c("return_delivered_order_items", order_id=pending, item_ids=[], payment_method_id="credit_card_0"),
            c("return_delivered_order_items", order_id=delivered, item_ids=["0000000000"],
              payment_method_id=db["orders"][delivered]["payment_history"][0]["payment_method_id"]),
            c("modify_user_address", user_id="nobody_000", address1="1 A St", address2="", city="X", state="CA",
              country="USA", zip="00000"),
        ]
        # a payment method that is neither the original one nor a gift card
        for oid in sorted(by_status["delivered"]):
            o = db["orders"][oid]
            pms = db["users"][o["user_id"]]["payment_methods"]
            other = [p for p, v in pms.items() if v["source"] != "gift_card"
                     and p != o["payment_history"][0]["payment_method_id"]]
            if other:
                calls.append(c("return_delivered_order_items", order_id=oid, item_ids=[o["items"][0]["item_id"]],
                               payment_method_id=other[0]))
                break
    return calls
