"""tau2-bench airline tools over our SQLite tables (tool code contract: `def tool(db, **args)`).

Same results and state changes as tau2's `AirlineTools` for the same calls, including its quirks
(cancellation does not release seats; flight changes do not touch seat counts; one-stop search
builds the next-day date without zero padding). Checked call for call by
tests/envs/test_tau2_equivalence.py. Error messages are tau2's ValueError texts.
"""

from envs.toolkit import ToolError

CABINS = ("basic_economy", "economy", "business")
NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")
NEW_CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")
AIRPORTS = [("SFO", "San Francisco"), ("JFK", "New York"), ("LAX", "Los Angeles"), ("ORD", "Chicago"),
            ("DFW", "Dallas"), ("DEN", "Denver"), ("SEA", "Seattle"), ("ATL", "Atlanta"), ("MIA", "Miami"),
            ("BOS", "Boston"), ("PHX", "Phoenix"), ("IAH", "Houston"), ("LAS", "Las Vegas"), ("MCO", "Orlando"),
            ("EWR", "Newark"), ("CLT", "Charlotte"), ("MSP", "Minneapolis"), ("DTW", "Detroit"),
            ("PHL", "Philadelphia"), ("LGA", "LaGuardia")]


# ----------------------------------------------------------------------------- helpers
def _payment_method(row):
    out = {"source": row["source"], "id": row["id"]}
    if row["source"] == "credit_card":
        out.update(brand=row["brand"], last_four=row["last_four"])
    else:
        out["amount"] = row["amount"]
    return out


def _user(db, user_id):
    row = db.get("users", user_id=user_id)
    if row is None:
        raise ToolError(f"User {user_id} not found")
    return row


def _user_out(db, row):
    out = {k: v for k, v in row.items() if k != "pos"}
    out["payment_methods"] = {pm["id"]: _payment_method(pm)
                              for pm in db.select("payment_methods", {"user_id": row["user_id"]})}
    return out


def _reservation(db, reservation_id):
    row = db.get("reservations", reservation_id=reservation_id)
    if row is None:
        raise ToolError(f"Reservation {reservation_id} not found")
    return row


def _flight(db, flight_number):
    row = db.get("flights", flight_number=flight_number)
    if row is None:
        raise ToolError(f"Flight {flight_number} not found")
    return row


def _flight_instance(db, flight_number, date):
    row = db.get("flight_dates", flight_number=flight_number, date=date)
    if row is None:  # a date row implies its flight (no tool removes flights): one lookup when found
        _flight(db, flight_number)
        raise ToolError(f"Flight {flight_number} not found on date {date}")
    return row


def _flight_info(f):
    if not isinstance(f, dict) or "flight_number" not in f or "date" not in f:
        raise ToolError(f"invalid flight {f!r}: needs flight_number and date")
    return {"flight_number": f["flight_number"], "date": f["date"]}


def _passenger(p):
    if not isinstance(p, dict) or any(k not in p for k in ("first_name", "last_name", "dob")):
        raise ToolError(f"invalid passenger {p!r}: needs first_name, last_name, dob")
    return {"first_name": p["first_name"], "last_name": p["last_name"], "dob": p["dob"]}


def _int(v, what):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v:
        raise ToolError(f"{what} must be an integer, got {v!r}")
    return int(v)


def _search_direct(db, date, origin=None, destination=None, leave_after=None):
    sql = ("SELECT f.flight_number, f.origin, f.destination, f.scheduled_departure_time_est, "
           "f.scheduled_arrival_time_est, d.seats_basic_economy, d.seats_economy, d.seats_business, "
           "d.price_basic_economy, d.price_economy, d.price_business "
           # CROSS JOIN keeps flights as the outer loop (build.INDEXES' route index when origin is
           # given, then a primary-key probe into flight_dates), not a scan of every flight date.
           "FROM flights f CROSS JOIN flight_dates d ON d.flight_number = f.flight_number "
           "WHERE d.date = ? AND d.status = 'available'")
    params = [date]
    if origin is not None:
        sql += " AND f.origin = ?"
        params.append(origin)
    if destination is not None:
        sql += " AND f.destination = ?"
        params.append(destination)
    if leave_after is not None:
        sql += " AND f.scheduled_departure_time_est >= ?"
        params.append(leave_after)
    out = []
    for r in db.query(sql + " ORDER BY f.pos", params):
        out.append({"flight_number": r["flight_number"], "origin": r["origin"], "destination": r["destination"],
                    "status": "available", "scheduled_departure_time_est": r["scheduled_departure_time_est"],
                    "scheduled_arrival_time_est": r["scheduled_arrival_time_est"], "date": None,
                    "available_seats": {c: r[f"seats_{c}"] for c in CABINS},
                    "prices": {c: r[f"price_{c}"] for c in CABINS}})
    return out


def _payment_for_update(db, user_id, payment_id, total_price):
    pm = db.get("payment_methods", user_id=user_id, id=payment_id)
    if pm is None:
        raise ToolError("Payment method not found")
    if pm["source"] == "certificate":
        raise ToolError("Certificate cannot be used to update reservation")
    if pm["source"] == "gift_card" and pm["amount"] < total_price:
        raise ToolError("Gift card balance is not enough")
    if pm["source"] == "gift_card":
        db.update("payment_methods", {"user_id": user_id, "id": payment_id}, {"amount": pm["amount"] - total_price})
    if total_price != 0:
        return {"payment_id": payment_id, "amount": total_price}
    return None


# ------------------------------------------------------------------------------- tools
def book_reservation(db, user_id, origin, destination, flight_type, cabin, flights, passengers, payment_methods,
                     total_baggages, nonfree_baggages, insurance):
    flights = [_flight_info(f) for f in flights]
    passengers = [_passenger(p) for p in passengers]
    payments = [{"payment_id": p["payment_id"], "amount": _int(p["amount"], "amount")} for p in payment_methods]
    _user(db, user_id)
    reservation_id = next((r for r in NEW_RESERVATION_IDS if db.get("reservations", reservation_id=r) is None), None)
    if reservation_id is None:
        raise ToolError("Too many reservations")
    n = len(passengers)
    total_price = 0
    res_flights = []
    for fi in flights:
        flight = _flight(db, fi["flight_number"])
        inst = _flight_instance(db, fi["flight_number"], fi["date"])
        if inst["status"] != "available":
            raise ToolError(f"Flight {fi['flight_number']} not available on date {fi['date']}")
        if inst[f"seats_{cabin}"] < n:
            raise ToolError(f"Not enough seats on flight {fi['flight_number']}")
        price = inst[f"price_{cabin}"]
        res_flights.append({"origin": flight["origin"], "destination": flight["destination"],
                            "flight_number": fi["flight_number"], "date": fi["date"], "price": price})
        total_price += price * n
    if insurance == "yes":
        total_price += 30 * n
    total_price += 50 * nonfree_baggages
    methods = {}
    for p in payments:
        pm = db.get("payment_methods", user_id=user_id, id=p["payment_id"])
        if pm is None:
            raise ToolError(f"Payment method {p['payment_id']} not found")
        if pm["source"] in ("gift_card", "certificate") and pm["amount"] < p["amount"]:
            raise ToolError(f"Not enough balance in payment method {p['payment_id']}")
        methods[p["payment_id"]] = pm
    total_payment = sum(p["amount"] for p in payments)
    if total_payment != total_price:
        raise ToolError(f"Payment amount does not add up, total price is {total_price}, but paid {total_payment}")
    for p in payments:  # checks passed: deduct
        key = {"user_id": user_id, "id": p["payment_id"]}
        pm = db.get("payment_methods", **key)
        if pm is None:
            raise ToolError(f"'{p['payment_id']}'")
        if pm["source"] == "gift_card":
            db.update("payment_methods", key, {"amount": pm["amount"] - p["amount"]})
        elif pm["source"] == "certificate":
            db.delete("payment_methods", key)
    for fi in flights:
        db.execute(f"UPDATE flight_dates SET seats_{cabin} = seats_{cabin} - ? WHERE flight_number = ? AND date = ?",
                   (n, fi["flight_number"], fi["date"]))
    reservation = {"reservation_id": reservation_id, "user_id": user_id, "origin": origin, "destination": destination,
                   "flight_type": flight_type, "cabin": cabin, "flights": res_flights, "passengers": passengers,
                   "payment_history": payments, "created_at": db.now(), "total_baggages": total_baggages,
                   "nonfree_baggages": nonfree_baggages, "insurance": insurance, "status": None}
    db.insert("reservations", reservation)
    user = db.get("users", user_id=user_id)
    db.update("users", {"user_id": user_id}, {"reservations": user["reservations"] + [reservation_id]})
    return reservation


def calculate(db, expression):
    if not all(char in "0123456789+-*/(). " for char in expression):
        raise ToolError("Invalid characters in expression")
    try:
        return str(round(float(eval(expression, {"__builtins__": None}, {})), 2))
    except Exception as exc:  # tau2 reports the exception text
        raise ToolError(str(exc)) from None


def cancel_reservation(db, reservation_id):
    res = _reservation(db, reservation_id)
    refunds = [{"payment_id": p["payment_id"], "amount": -p["amount"]} for p in res["payment_history"]]
    res["payment_history"] = res["payment_history"] + refunds
    res["status"] = "cancelled"
    db.update("reservations", {"reservation_id": reservation_id},
              {"payment_history": res["payment_history"], "status": "cancelled"})
    return res


def get_reservation_details(db, reservation_id):
    return _reservation(db, reservation_id)


def get_user_details(db, user_id):
    return _user_out(db, _user(db, user_id))


def list_all_airports(db):
    return [{"iata": code, "city": city} for code, city in AIRPORTS]


def search_direct_flight(db, origin, destination, date):
    return _search_direct(db, date=date, origin=origin, destination=destination)


def search_onestop_flight(db, origin, destination, date):
    results = []
    for r1 in _search_direct(db, date=date, origin=origin):
        r1["date"] = date
        date2 = f"2024-05-{int(date[-2:]) + 1}" if "+1" in r1["scheduled_arrival_time_est"] else date
        for r2 in _search_direct(db, date=date2, origin=r1["destination"], destination=destination,
                                 leave_after=r1["scheduled_arrival_time_est"]):
            r2["date"] = date2
            results.append([r1, r2])
    return results


def send_certificate(db, user_id, amount):
    _user(db, user_id)
    for payment_id in NEW_CERTIFICATE_IDS:
        if db.get("payment_methods", user_id=user_id, id=payment_id) is None:
            db.insert("payment_methods", {"user_id": user_id, "id": payment_id, "source": "certificate",
                                          "brand": None, "last_four": None, "amount": float(amount)})
            return f"Certificate {payment_id} added to user {user_id} with amount {amount}."
    raise ToolError("Too many certificates")


def transfer_to_human_agents(db, summary):
    return "Transfer successful"


def update_reservation_baggages(db, reservation_id, total_baggages, nonfree_baggages, payment_id):
    res = _reservation(db, reservation_id)
    _user(db, res["user_id"])
    total_price = 50 * max(0, nonfree_baggages - res["nonfree_baggages"])
    payment = _payment_for_update(db, res["user_id"], payment_id, total_price)
    if payment is not None:
        res["payment_history"] = res["payment_history"] + [payment]
    res["total_baggages"] = total_baggages
    res["nonfree_baggages"] = nonfree_baggages
    db.update("reservations", {"reservation_id": reservation_id},
              {"payment_history": res["payment_history"], "total_baggages": total_baggages,
               "nonfree_baggages": nonfree_baggages})
    return res


def update_reservation_flights(db, reservation_id, cabin, flights, payment_id):
    flights = [_flight_info(f) for f in flights]
    res = _reservation(db, reservation_id)
    _user(db, res["user_id"])
    n = len(res["passengers"])
    total_price = 0
    new_flights = []
    for fi in flights:
        match = next((rf for rf in res["flights"] if rf["flight_number"] == fi["flight_number"]
                      and rf["date"] == fi["date"] and cabin == res["cabin"]), None)
        if match:
            total_price += match["price"] * n
            new_flights.append(match)
            continue
        flight = _flight(db, fi["flight_number"])
        inst = _flight_instance(db, fi["flight_number"], fi["date"])
        if inst["status"] != "available":
            raise ToolError(f"Flight {fi['flight_number']} not available on date {fi['date']}")
        if inst[f"seats_{cabin}"] < n:
            raise ToolError(f"Not enough seats on flight {fi['flight_number']}")
        rf = {"flight_number": fi["flight_number"], "date": fi["date"], "price": inst[f"price_{cabin}"],
              "origin": flight["origin"], "destination": flight["destination"]}
        total_price += rf["price"] * n
        new_flights.append(rf)
    total_price -= sum(f["price"] for f in res["flights"]) * n
    payment = _payment_for_update(db, res["user_id"], payment_id, total_price)
    if payment is not None:
        res["payment_history"] = res["payment_history"] + [payment]
    res["flights"] = new_flights
    res["cabin"] = cabin
    db.update("reservations", {"reservation_id": reservation_id},
              {"payment_history": res["payment_history"], "flights": new_flights, "cabin": cabin})
    return res


def update_reservation_passengers(db, reservation_id, passengers):
    passengers = [_passenger(p) for p in passengers]
    res = _reservation(db, reservation_id)
    if len(passengers) != len(res["passengers"]):
        raise ToolError("Number of passengers does not match")
    res["passengers"] = passengers
    db.update("reservations", {"reservation_id": reservation_id}, {"passengers": passengers})
    return res


def get_flight_status(db, flight_number, date):
    return _flight_instance(db, flight_number, date)["status"]
