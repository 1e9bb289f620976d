"""tau2-bench retail tools over our SQLite tables (tool code contract: `def tool(db, **args)`).

Same results and state changes as tau2's `RetailTools` for the same calls, quirks included
(modify_pending_order_items gives every modified item the price and options of the last new
variant checked, as tau2 does). Checked call for call by tests/envs/test_tau2_equivalence.py.
Error messages are tau2's ValueError texts.
"""

import json

from envs.toolkit import ToolError

CANCEL_REASONS = ("no longer needed", "ordered by mistake")


# ----------------------------------------------------------------------------- helpers
def _pm_out(row):
    out = {"source": row["source"], "id": row["id"]}
    if row["source"] == "credit_card":
        out.update(brand=row["brand"], last_four=row["last_four"])
    elif row["source"] == "gift_card":
        out["balance"] = row["balance"]
    return out


def _order(db, order_id):
    row = db.get("orders", order_id=order_id)
    if row is None:
        raise ToolError("Order not found")
    return row


def _user(db, user_id):
    row = db.get("users", user_id=user_id)
    if row is None:
        raise ToolError("User not found")
    return row


def _product(db, product_id):
    row = db.get("products", product_id=product_id)
    if row is None:
        raise ToolError("Product not found")
    return row


def _variant(db, product_id, variant_id):
    _product(db, product_id)
    row = db.get("variants", product_id=product_id, item_id=variant_id)
    if row is None:
        raise ToolError("Variant not found")
    return row


def _payment_method(db, user_id, payment_method_id):
    _user(db, user_id)
    row = db.get("payment_methods", user_id=user_id, id=payment_method_id)
    if row is None:
        raise ToolError("Payment method not found")
    return row


def _set_balance(db, pm, balance):
    db.update("payment_methods", {"user_id": pm["user_id"], "id": pm["id"]}, {"balance": balance})


def _save_order(db, order, *fields):
    db.update("orders", {"order_id": order["order_id"]}, {f: order[f] for f in fields})
    return order


# ------------------------------------------------------------------------------- tools
def calculate(db, expression):
    if not all(char in "0123456789+-*/(). " for char in expression):
        raise ToolError("Invalid characters in expression")
    try:
        return str(round(float(eval(expression, {"__builtins__": None}, {})), 2))
    except Exception as exc:  # tau2 reports the exception text
        raise ToolError(str(exc)) from None


def cancel_pending_order(db, order_id, reason):
    order = _order(db, order_id)
    if order["status"] != "pending":
        raise ToolError("Non-pending order cannot be cancelled")
    if reason not in CANCEL_REASONS:
        raise ToolError("Invalid reason")
    refunds = []
    for payment in order["payment_history"]:
        pmid = payment["payment_method_id"]
        refunds.append({"transaction_type": "refund", "amount": payment["amount"], "payment_method_id": pmid})
        pm = _payment_method(db, order["user_id"], pmid)
        if pm["source"] == "gift_card":  # refund to gift card immediately
            _set_balance(db, pm, round(pm["balance"] + payment["amount"], 2))
    order["status"] = "cancelled"
    order["cancel_reason"] = reason
    order["payment_history"] = order["payment_history"] + refunds
    return _save_order(db, order, "status", "cancel_reason", "payment_history")


def _check_items(order, item_ids, message):
    all_item_ids = [item["item_id"] for item in order["items"]]
    for item_id in item_ids:
        if item_ids.count(item_id) > all_item_ids.count(item_id):
            raise ToolError(message(item_id))


def exchange_delivered_order_items(db, order_id, item_ids, new_item_ids, payment_method_id):
    order = _order(db, order_id)
    if order["status"] != "delivered":
        raise ToolError("Non-delivered order cannot be exchanged")
    _check_items(order, item_ids, lambda i: f"Number of {i} not found.")
    if len(item_ids) != len(new_item_ids):
        raise ToolError("The number of items to be exchanged should match.")
    diff_price = 0
    for item_id, new_item_id in zip(item_ids, new_item_ids):
        item = next((it for it in order["items"] if it["item_id"] == item_id), None)
        if item is None:
            raise ToolError(f"Item {item_id} not found")
        variant = _variant(db, item["product_id"], new_item_id)
        if not variant["available"]:
            raise ToolError(f"New item {new_item_id} not found or available")
        diff_price += variant["price"] - item["price"]
    diff_price = round(diff_price, 2)
    pm = _payment_method(db, order["user_id"], payment_method_id)
    if pm["source"] == "gift_card" and pm["balance"] < diff_price:
        raise ToolError("Insufficient gift card balance to pay for the price difference")
    order.update(status="exchange requested", exchange_items=sorted(item_ids),
                 exchange_new_items=sorted(new_item_ids), exchange_payment_method_id=payment_method_id,
                 exchange_price_difference=diff_price)
    return _save_order(db, order, "status", "exchange_items", "exchange_new_items", "exchange_payment_method_id",
                       "exchange_price_difference")


def find_user_id_by_name_zip(db, first_name, last_name, zip):
    # LIKE first: a cheap test of the address text that only rows holding the zip pass, so
    # json_extract() parses those alone (an index on json_extract() is refused where state oracles
    # read images: build.INDEXES). Only for a zip that any JSON encoder writes verbatim and that
    # holds no LIKE wildcard; any other value is looked up by json_extract() alone.
    plain = isinstance(zip, str) and zip.isascii() and zip.replace("-", "").replace(" ", "").isalnum()
    rows = db.query("SELECT user_id, json_extract(name, '$.first_name') AS f, json_extract(name, '$.last_name') AS l "
                    "FROM users WHERE " + ("address LIKE ? AND " if plain else "")
                    + "json_extract(address, '$.zip') = ? ORDER BY pos", (f"%{zip}%", zip) if plain else (zip,))
    for r in rows:
        if r["f"].lower() == first_name.lower() and r["l"].lower() == last_name.lower():
            return r["user_id"]
    raise ToolError("User not found")


def find_user_id_by_email(db, email):
    email = email.lower()
    if email.isascii():  # SQLite lower() folds ASCII only; Python's lower() folds all of Unicode
        rows = db.query("SELECT user_id, email FROM users WHERE lower(email) = ? ORDER BY pos", (email,))
    else:
        rows = db.query("SELECT user_id, email FROM users ORDER BY pos")
    for r in rows:
        if r["email"].lower() == email:
            return r["user_id"]
    raise ToolError("User not found")


def get_order_details(db, order_id):
    return _order(db, order_id)


def get_product_details(db, product_id):
    p = _product(db, product_id)
    variants = db.select("variants", {"product_id": product_id})
    return {"name": p["name"], "product_id": p["product_id"],
            "variants": {v["item_id"]: {"item_id": v["item_id"], "options": v["options"],
                                        "available": v["available"], "price": v["price"]} for v in variants}}


def get_user_details(db, user_id):
    u = _user(db, user_id)
    out = {k: v for k, v in u.items() if k != "pos"}
    out["payment_methods"] = {pm["id"]: _pm_out(pm) for pm in db.select("payment_methods", {"user_id": user_id})}
    return out


def list_all_product_types(db):
    rows = db.query("SELECT name, product_id FROM products ORDER BY pos")
    return json.dumps({r["name"]: r["product_id"] for r in rows}, sort_keys=True)


def _address(address1, address2, city, state, country, zip):
    return {"address1": address1, "address2": address2, "city": city, "state": state, "country": country,
            "zip": zip}


def modify_pending_order_address(db, order_id, address1, address2, city, state, country, zip):
    order = _order(db, order_id)
    if "pending" not in order["status"]:
        raise ToolError("Non-pending order cannot be modified")
    order["address"] = _address(address1, address2, city, state, country, zip)
    return _save_order(db, order, "address")


def modify_pending_order_items(db, order_id, item_ids, new_item_ids, payment_method_id):
    order = _order(db, order_id)
    if order["status"] != "pending":
        raise ToolError("Non-pending order cannot be modified")
    _check_items(order, item_ids, lambda i: f"{i} not found")
    if len(item_ids) != len(new_item_ids):
        raise ToolError("The number of items to be exchanged should match")
    diff_price = 0
    variant = None
    for item_id, new_item_id in zip(item_ids, new_item_ids):
        if item_id == new_item_id:
            raise ToolError("The new item id should be different from the old item id")
        item = next((it for it in order["items"] if it["item_id"] == item_id), None)
        if item is None:
            raise ToolError(f"Item {item_id} not found")
        variant = _variant(db, item["product_id"], new_item_id)
        if not variant["available"]:
            raise ToolError(f"New item {new_item_id} not found or available")
        diff_price += variant["price"] - item["price"]
    pm = _payment_method(db, order["user_id"], payment_method_id)
    if pm["source"] == "gift_card" and pm["balance"] < diff_price:
        raise ToolError("Insufficient gift card balance to pay for the new item")
    order["payment_history"] = order["payment_history"] + [{
        "transaction_type": "payment" if diff_price > 0 else "refund", "amount": abs(diff_price),
        "payment_method_id": payment_method_id}]
    if pm["source"] == "gift_card":
        _set_balance(db, pm, round(pm["balance"] - diff_price, 2))
    for item_id, new_item_id in zip(item_ids, new_item_ids):
        item = next((it for it in order["items"] if it["item_id"] == item_id), None)
        if item is None:
            raise ToolError(f"Item {item_id} not found")
        item["item_id"] = new_item_id
        item["price"] = variant["price"]  # tau2 uses the last variant checked above, for every item
        item["options"] = variant["options"]
    order["status"] = "pending (item modified)"
    return _save_order(db, order, "payment_history", "items", "status")


def modify_pending_order_payment(db, order_id, payment_method_id):
    order = _order(db, order_id)
    if "pending" not in order["status"]:
        raise ToolError("Non-pending order cannot be modified")
    pm = _payment_method(db, order["user_id"], payment_method_id)
    history = order["payment_history"]
    if len(history) != 1 or history[0]["transaction_type"] != "payment":
        raise ToolError("There should be exactly one payment for a pending order")
    old_id = history[0]["payment_method_id"]
    if old_id == payment_method_id:
        raise ToolError("The new payment method should be different from the current one")
    amount = history[0]["amount"]
    if pm["source"] == "gift_card" and pm["balance"] < amount:
        raise ToolError("Insufficient gift card balance to pay for the order")
    order["payment_history"] = history + [
        {"transaction_type": "payment", "amount": amount, "payment_method_id": payment_method_id},
        {"transaction_type": "refund", "amount": amount, "payment_method_id": old_id}]
    if pm["source"] == "gift_card":
        _set_balance(db, pm, round(pm["balance"] - amount, 2))
    _save_order(db, order, "payment_history")
    old = _payment_method(db, order["user_id"], old_id)
    if old["source"] == "gift_card":
        _set_balance(db, old, round(old["balance"] + amount, 2))
    return order


def modify_user_address(db, user_id, address1, address2, city, state, country, zip):
    _user(db, user_id)
    db.update("users", {"user_id": user_id},
              {"address": _address(address1, address2, city, state, country, zip)})
    return get_user_details(db, user_id)


def return_delivered_order_items(db, order_id, item_ids, payment_method_id):
    order = _order(db, order_id)
    if order["status"] != "delivered":
        raise ToolError("Non-delivered order cannot be returned")
    _user(db, order["user_id"])
    pm = _payment_method(db, order["user_id"], payment_method_id)
    if pm["source"] != "gift_card" and payment_method_id != order["payment_history"][0]["payment_method_id"]:
        raise ToolError("Payment method should be the original payment method")
    _check_items(order, item_ids, lambda i: "Some item not found")
    order.update(status="return requested", return_items=sorted(item_ids), return_payment_method_id=payment_method_id)
    return _save_order(db, order, "status", "return_items", "return_payment_method_id")


def transfer_to_human_agents(db, summary):
    return "Transfer successful"
