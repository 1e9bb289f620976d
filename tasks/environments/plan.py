"""Rule-based planning of a domain: each tool's kind, action, entity and effects; the entities'
tables, keys, columns and states.

From the tools alone (deterministic, data only):
1. each tool's verb (tasks.environments.verbs: description first, then the name) gives its kind and
   action: get / search (reads), create, update, delete, status (a move in a state machine),
   balance (money in or out), transfer, extend, refill, login / logout;
2. its own noun and the nouns of its id parameters are unified across the domain
   (tasks.environments.entities): one entity per real-world noun, the id a creating tool returns
   is the key every other tool takes;
3. columns come from the parameters a tool reads or writes and from output specs; a foreign key
   only where a tool shows a "belongs to" relation (an order created for a user, orders listed by
   user); states from the state-changing verbs (TRANSITIONS); a quantity column (seats, stock,
   copies...) on an entity that creating tools consume; a balance on an entity money moves in and
   out of; clock fields (started/ended/due) for verbs that need them.
The plan drives the seed rows (tasks.environments.seed) and the tool code (tasks.environments.render).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agentscaler.models import Tool
from agentscaler.naming import (CANONICAL, QUERY_NAMES, SYNONYMS, column_key, id_noun, is_id_name, name_tokens, plural,
                               singular, snake, synonyms)
from envs.spec import ColumnSpec
from tasks.environments.entities import ATTRS, GENERIC, Unifier, description_phrase, head, name_phrase, output_noun
from tasks.environments.verbs import NOUNLIKE, TERMINAL, TRANSITIONS, classify, description_verb, name_verb, read_verb

CONTROL = {"limit", "max_results", "num_results", "results", "top_k", "top_n", "k", "page", "page_size",
           "per_page", "offset", "sort", "sort_by", "sort_order", "order_by", "fields", "cursor", "page_token",
           "format", "response_format", "output_format", "verbose", "pretty", "include_details", "detailed",
           "api_key", "apikey", "token", "access_token", "key_", "callback", "lang", "locale", "language",
           "pagination_token", "url_embed_safe", "include_sensitive", "notify", "send_updates", "notify_attendees",
           "human_readable", "precision", "round_off", "unit", "units", "timeout", "verify", "stream", "debug",
           "client_id", "client_secret", "grant_type", "refresh_token", "auth", "cert", "proxies", "cookies",
           "allow_redirects"}
LIMIT_NAMES = {"limit", "max_results", "num_results", "results", "top_k", "top_n", "k", "page_size", "per_page"}
# what a create consumes, by the consumed entity's noun (a showtime's seats, a product's stock)
QUANTITY_COLUMNS = (
    ("seats_available", {"showtime", "show", "screening", "showing", "flight", "event", "concert", "trip", "train",
                         "bus", "performance", "match", "game", "tour", "ride", "cruise", "route"}),
    ("spots_available", {"class", "course", "workshop", "slot", "lesson", "camp", "program", "session",
                         "appointment_slot", "timeslot", "time_slot", "shift"}),
    ("copies_available", {"book", "title", "dvd", "copy", "edition", "album", "magazine"}),
    ("rooms_available", {"hotel", "property", "house", "hostel", "resort", "room_type"}),
    ("stock", {"product", "item", "medicine", "medication", "drug", "ingredient", "part", "article", "sku",
               "variant", "stock", "inventory", "supply", "ticket_type", "car", "vehicle", "equipment", "bike"}),
)
CONSUME_VERBS = {"book", "reserve", "buy", "purchase", "order", "rent", "borrow", "enroll", "join", "hire",
                 "checkout", "place", "register", "adopt", "refill", "dispense", "sell", "issue", "schedule"}
QUANTITY_PARAMS = ("quantity", "qty", "count", "number_of_tickets", "tickets", "num_tickets", "ticket_count",
                   "seats", "number_of_seats", "num_seats", "party_size", "number_of_adults", "adults", "passengers",
                   "number_of_passengers", "copies", "units", "guests", "num_guests", "number_of_guests", "people",
                   "rooms", "room_qty", "number_of_rooms", "amount_of_items", "pieces", "pack_size", "spots")
PEOPLE = {"user", "customer", "member", "client", "patient", "person", "owner", "guest", "traveler", "passenger",
          "employee", "driver", "student", "account_holder", "patron", "subscriber", "contact", "agent"}
BALANCE_NOUNS = ("account", "wallet", "card", "credit_card", "gift_card", "budget", "balance", "fund", "user",
                 "member", "customer", "subscription")
MONEY = ("amount", "value", "funds", "sum", "total", "price", "cost", "fare", "fee", "payment", "deposit",
         "withdrawal", "charge", "insurance_cost", "gb_amount", "money", "cash", "credit", "top_up_amount")
FEE_WORDS = re.compile(r"\b(fee|fees|charge|charges|cost|settle|settles|pay|payment|price|bill|fine|fines)\b", re.I)
TIME_PARAMS = re.compile(r"(hour|hours|hrs|day|days|minute|minutes|mins|week|weeks|month|months|duration|extra_time|"
                         r"extension|period)$")
CLOCK_VERBS = {"borrow", "checkout", "rent", "hire", "lend"}  # creates with a due date
# the record a booking-like create makes when its object is the thing booked (book_house -> booking)
BOOKING_NOUN = {"book": "booking", "reserve": "reservation", "rent": "rental", "hire": "rental", "borrow": "loan",
                "checkout": "loan", "enroll": "enrollment", "subscribe": "subscription", "buy": "purchase",
                "purchase": "purchase", "order": "order", "place": "order", "adopt": "adoption", "lend": "loan"}
# records a start-like verb creates (start_parking_session(zone) makes a session; start_engine moves a state)
STARTABLE = {"session", "trip", "ride", "visit", "timer", "workout", "recording", "game", "call", "meeting", "shift",
             "job", "task", "process", "campaign", "project", "journey", "stream", "tour", "lesson", "class", "exam",
             "survey", "chat", "conversation", "parking_session", "booking", "reservation", "order", "loan", "rental",
             "subscription", "membership", "ticket", "appointment", "stay", "check_in", "run", "race", "round"}
RECORD_NOUNS = {"booking", "reservation", "ticket", "order", "appointment", "rental", "loan", "subscription",
                "enrollment", "registration", "purchase", "session", "visit", "transaction", "payment", "transfer",
                "request", "claim", "application", "policy", "membership", "pass", "voucher", "adoption", "ride",
                "delivery", "shipment", "invoice", "donation", "refill", "prescription", "insurance"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def column_name(name: str) -> str:
    c = re.sub(r"[^A-Za-z0-9_]", "_", snake(name)) or "field"
    if not _IDENT.match(c):
        c = "f_" + c
    return c[:60]


def schema_type(schema: dict[str, Any]) -> str:
    t = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), "string")
    if t is None and isinstance(schema, dict):
        if "properties" in schema:
            return "object"
        if "items" in schema:
            return "array"
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            v = schema["enum"][0]
            return "integer" if isinstance(v, int) and not isinstance(v, bool) else (
                "number" if isinstance(v, float) else "string")
    return t or "string"


_COLTYPE = {"integer": "integer", "number": "real", "boolean": "boolean", "string": "text", "array": "json",
            "object": "json", "null": "text"}


# --- plans --------------------------------------------------------------------------------------
@dataclass
class Param:
    name: str
    schema: dict[str, Any]
    required: bool
    # pk | pk_list | fk | fk_list | column | min | max | limit | offset | query | control | amount | key
    role: str = "column"
    column: str = ""
    ref: str = ""  # referenced entity for pk/fk roles


@dataclass
class Entity:
    name: str
    table: str
    pk: str
    pk_type: str = "text"  # text | integer
    pk_schema: dict[str, Any] = field(default_factory=dict)
    prefix: str = ""
    columns: dict[str, ColumnSpec] = field(default_factory=dict)
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)  # column -> schema its values must fit
    param_cols: set[str] = field(default_factory=set)  # columns some tool parameter reads or writes
    list_refs: dict[str, str] = field(default_factory=dict)  # json column of ids -> entity they point to
    status_targets: set[str] = field(default_factory=set)
    statuses: list[str] = field(default_factory=list)  # every state, the initial one first
    quantity: str = ""  # the counter other entities' creates consume (seats_available, stock...)
    balance: str = ""  # the money column debits and credits move
    clock: set[str] = field(default_factory=set)  # started_at | ended_at | due_date | returned_at | ends_at
    extra_states: dict[str, list[str]] = field(default_factory=dict)  # roaming_status -> its states
    alt_schemas: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # other tools' schemas of a column
    children: list[tuple[str, str, str]] = field(default_factory=list)  # (table, its column naming us, its key)


@dataclass
class Plan:
    tool: Tool
    name: str
    kind: str
    action: str  # get | search | create | update | delete | status | balance | transfer | extend | refill | login | logout
    verb: str
    entity: str
    params: list[Param]
    status_to: str = ""
    status_from: tuple[str, ...] = ()
    kind_reason: str = ""
    effects: list[dict[str, Any]] = field(default_factory=list)
    status_col: str = "status"  # the column a state move changes (roaming_status: a line's roaming)
    anchor: str = ""  # the entity whose row a call's arguments come from, when not its own


def _id_ref(pname: str, schema: dict[str, Any]) -> str | None:
    """The entity noun an id-like parameter refers to ('' = the tool's own entity), None if not an id."""
    if not is_id_name(pname):
        return None
    t = schema_type(schema)
    s = snake(pname)
    if s.endswith("_ids") or s == "ids":
        if t != "array":
            return None
    elif t == "array":  # networkId: [..] is a list of network ids
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
        if schema_type(items) not in ("string", "integer"):
            return None
    elif t not in ("string", "integer"):
        return None
    return id_noun(pname)


def _by_noun(tool: Tool) -> str:
    """get_violations_by_project(uuid): the noun after `by` in the name (what a bare id names)."""
    words = list(name_tokens(tool.name))
    for i, w in enumerate(words[:-1]):
        if w == "by" and words[i + 1] not in ("id", "ids", "uuid", "name", "type", "date", "time"):
            return singular(words[i + 1])
    return ""


def _words(text: str | None) -> set[str]:
    return {singular(w) for w in re.findall(r"[a-z]+", (text or "").lower())}


def booked_noun(tool: Tool, verb: str) -> str:
    """What a booking-like create books (book_house: house; buy_bus_ticket: bus), "" when unsaid."""
    nv = name_verb(tool.name)
    dv = description_verb(tool.description)
    for phrase in (name_phrase(tool.name, nv.verb if nv.verb == verb else ""),
                   description_phrase(tool.description, dv.verb) if dv.verb == verb else ""):
        words = [w for w in phrase.split("_") if w]
        if not words:
            continue
        if head(phrase) in RECORD_NOUNS:  # a bus ticket books a bus, a movie ticket a movie
            words = words[:-1]
        if words:
            return "_".join(words[-2:])
    return ""


def _own_noun(tool: Tool, action: str, verb: str, ids: list[tuple[Param, str | None]]) -> str:
    """The tool's own noun before unification (see tasks.environments.entities)."""
    nv = name_verb(tool.name)
    dv = description_verb(tool.description)
    nphrase = name_phrase(tool.name, nv.verb if nv.verb and (nv.verb not in NOUNLIKE or nv.verb == dv.verb or
                                                             not dv.verb) else "")
    dphrase = description_phrase(tool.description, dv.verb) if dv.verb else ""
    words = set(snake(tool.name).split("_"))
    phrase = ""
    if dphrase and (head(dphrase) in words or singular(head(dphrase)) in {singular(w) for w in words}):
        phrase = dphrase
    elif nphrase and nphrase not in GENERIC:
        phrase = nphrase
    else:
        phrase = dphrase or nphrase
    id_nouns = [e for p, e in ids if e]
    if action == "create":
        out = output_noun(tool.returns, {p.name for p, _ in ids})
        if out:
            return out
        if verb in BOOKING_NOUN and head(phrase) not in RECORD_NOUNS:
            return BOOKING_NOUN[verb]  # book_house creates a booking (of a house), not a house
    if action not in ("create", "search", "login"):
        scalar = [e for p, e in ids if e and schema_type(p.schema) != "array"]
        if len(scalar) == 1 and action != "read":  # return_book(loan_id) acts on the loan it names
            return scalar[0]
        in_phrase = [e for e in scalar if e == phrase or phrase.endswith("_" + e)]  # the phrase's head, not a modifier
        if in_phrase:
            return in_phrase[-1]
        if phrase and head(phrase) in ATTRS and scalar:
            said = [e for e in scalar if e in _words(tool.description)]
            return (said or scalar)[-1]
        if not phrase and scalar:
            return scalar[-1]
        if any(e == "" for _, e in ids) and phrase:
            return phrase
        if scalar and (not phrase or phrase in GENERIC):
            return scalar[-1]
    if action == "search" and not phrase and id_nouns:
        return id_nouns[-1]
    if not phrase and not id_nouns:  # a noun from the parameters (requests_get(url) -> url)
        firsts = [p for p, _ in ids] or [p for p in [Param(n, s if isinstance(s, dict) else {}, True) for n, s in
                                                     (tool.parameters.get("properties") or {}).items()]
                                         if snake(p.name) not in CONTROL and schema_type(p.schema) == "string"]
        phrase = singular(snake(firsts[0].name).split("_")[-1]) if firsts else ""
    if head(phrase) in CANONICAL:  # message_login, user_authentication: a session
        phrase = "_".join(phrase.split("_")[:-1] + [CANONICAL[head(phrase)]])
    return CANONICAL.get(phrase, phrase) or (id_nouns[-1] if id_nouns else "") or "record"


def _action(verb_action: str, verb: str, kind: str, own_id: bool, ids: list[tuple[Param, str | None]]) -> str:
    """The action a tool's verb takes on its entity (see the module docstring, step 1)."""
    if kind == "read":
        return "read"
    if verb_action in ("create", "update", "delete"):
        return verb_action
    if verb_action == "transition":
        if not own_id and verb in ("start", "launch", "begin", "check_in", "checkin", "open", "reopen"):
            return "create"  # start_parking_session(zone, plate): a new record in the started state
        return "status"
    if verb_action in ("credit", "debit"):
        return "balance"
    if verb_action == "transfer":
        same = [e for _, e in ids if e]
        return "transfer" if len(same) >= 2 and len(set(same)) < len(same) else "create"
    if verb_action in ("extend", "refill", "login", "logout"):
        return verb_action
    return "create" if not own_id and not ids else "update"


_EXPLICIT = (("min_", "minimum_"), ("_min",), ("max_", "maximum_"), ("_max",))
_PAIRED = {"start_": "end_", "from_": "to_", "_start": "_end", "_from": "_to"}


def _orderable(schema: dict[str, Any], s: str) -> bool:
    """Numbers, dates and times have ranges; from_city/to_city are two places."""
    t = schema_type(schema)
    if t in ("integer", "number"):
        return True
    return t == "string" and (schema.get("format") in ("date", "date-time", "time") or
                              bool(re.search(r"(date|time|year|day|hour|month)", s)))


def _bound(s: str, names: set[str]) -> str:
    """min | max | "": max_price is a bound; start_date/end_date and price_from/price_to are bounds
    only as a pair (where_to alone is a place, not the end of a range)."""
    if s.startswith(_EXPLICIT[0]) or s.endswith(_EXPLICIT[1]):
        return "min"
    if s.startswith(_EXPLICIT[2]) or s.endswith(_EXPLICIT[3]):
        return "max"
    for lo, hi in _PAIRED.items():
        if lo.endswith("_") and s.startswith(lo) and hi + s[len(lo):] in names:
            return "min"
        if hi.endswith("_") and s.startswith(hi) and lo + s[len(hi):] in names:
            return "max"
        if lo.startswith("_") and s.endswith(lo) and s[: -len(lo)] + hi in names:
            return "min"
        if hi.startswith("_") and s.endswith(hi) and s[: -len(hi)] + lo in names:
            return "max"
    return ""


def _money_param(params: list[Param]) -> Param | None:
    nums = [p for p in params if schema_type(p.schema) in ("number", "integer") and p.role in ("column", "amount")]
    for m in MONEY:
        for p in nums:
            if snake(p.name) == m or snake(p.name).endswith("_" + m):
                return p
    return None


def _quantity_param(params: list[Param]) -> Param | None:
    for q in QUANTITY_PARAMS:
        for p in params:
            if snake(p.name) == q and schema_type(p.schema) in ("integer", "number") and p.role == "column":
                return p
    return None


def plan_tools(tools: list[Tool]) -> tuple[list[Plan], dict[str, Entity]]:
    """Decide each tool's action, entity and effects, and the entities' tables, columns and states."""
    plans = plan_actions(tools)
    entities = _entities(plans)
    _effects(plans, entities)
    _children(plans, entities)
    return plans, entities


def plan_actions(tools: list[Tool]) -> list[Plan]:
    """Each tool's kind, action, entity and parameter roles (the first half of plan_tools: the
    tables, effects and children that follow change none of these)."""
    plans: list[Plan] = []
    uni = Unifier()
    raw: list[tuple[Tool, str, str, str, str, list[Param], list[tuple[Param, str | None]], str]] = []
    for tool in tools:
        kind, why = classify(tool)
        vr = read_verb(tool)
        verb = vr.verb
        verb_action = vr.action if vr.verb else ("read" if kind == "read" else "")
        if tool.kind in ("read", "write") and (verb_action == "read") != (tool.kind == "read"):
            verb_action = "read" if tool.kind == "read" else ""  # the corpus knows better than the verb
        props = tool.parameters.get("properties") or {}
        required = set(tool.parameters.get("required") or [])
        params = [Param(name=p, schema=s if isinstance(s, dict) else {}, required=p in required)
                  for p, s in props.items()]
        ids = [(p, _id_ref(p.name, p.schema)) for p in params]
        ids = [(p, e) for p, e in ids if e is not None]
        by = _by_noun(tool)
        if by:  # a bare id of a tool named ..._by_project names the project
            ids = [(p, by if e == "" else e) for p, e in ids]
        pre_action = _action(verb_action or ("read" if kind == "read" else "update"), verb, kind,
                             any(e == "" for _, e in ids), ids)
        noun = "session" if pre_action in ("login", "logout") else _own_noun(tool, pre_action, verb, ids)
        noun = column_name(noun)[:40]
        if pre_action == "create" and verb in TRANSITIONS and head(noun) not in STARTABLE:
            pre_action = "status"  # start_engine(mode): the engine's state moves; start_session(...) makes a session
        raw.append((tool, kind, why, verb, pre_action, params, ids, noun))
        uni.add(noun, own=True, created=pre_action == "create", listed=pre_action == "read")
        for p, e in ids:
            if e:
                uni.add(e, id_param=True)
    canon = uni.resolve()

    for tool, kind, why, verb, pre_action, params, ids, noun in raw:
        entity = canon.get(noun, noun)
        for p, e in ids:
            p.ref = canon.get(e, e) if e else entity
        own_id = any(p.ref == entity and schema_type(p.schema) != "array" for p, _ in ids)
        action = pre_action
        if action == "read":
            action = "get" if own_id else "search"
        elif action == "create" and own_id and not any(p.name.lower().startswith(("new_",)) for p, _ in ids) and \
                verb not in ("create", "add", "insert", "register", "new", "mkdir", "touch", "upload", "save",
                             "store", "write", "post", "publish"):
            action = "update"  # add_to(cart_id, ...): a change to an existing record
        for p, e in ids:
            arr = schema_type(p.schema) == "array"
            own = p.ref == entity
            if own and not (action == "create" and arr):
                p.role = "pk_list" if arr else "pk"
            else:
                p.role = "fk_list" if arr else "fk"
            p.column = column_name(p.name)
        names = {snake(p.name) for p in params}
        for p in params:
            if p.role not in ("column",) or p.column:
                continue
            s = snake(p.name)
            t = schema_type(p.schema)
            if s in LIMIT_NAMES and t in ("integer", "number"):
                p.role = "limit"
            elif s in QUERY_NAMES and t == "string" and action == "search":
                p.role = "query"
            elif s == "offset" and t in ("integer", "number"):
                p.role = "offset"
            elif s in CONTROL or s.startswith("include_") and t == "boolean":
                p.role = "control"
            elif column_key(p.name) != s and _orderable(p.schema, s) and _bound(s, names) == "min":
                p.role = "min"
            elif column_key(p.name) != s and _orderable(p.schema, s) and _bound(s, names) == "max":
                p.role = "max"
            p.column = (column_name(column_key(p.name)) if p.role in ("min", "max") else
                        "" if p.role in ("query", "control", "limit", "offset") else column_name(p.name))
        to, frm = ("", ())
        if action == "status":
            to, frm = TRANSITIONS.get(verb, (f"{verb}ed" if verb else "done", ("active",)))
        elif action == "create" and verb in TRANSITIONS:
            to = TRANSITIONS[verb][0]
        plans.append(Plan(tool=tool, name=tool.name, kind=kind, action=action, verb=verb, entity=entity,
                          params=params, status_to=to, status_from=frm, kind_reason=why))

    _retarget(plans)
    return plans


def _children(plans: list[Plan], entities: dict[str, Entity]) -> None:
    """A record no tool reads on its own is shown by the record it belongs to (as tau2's user shows
    its reservations): looking up the parent lists the children's ids."""
    read = {pl.entity for pl in plans if pl.kind == "read"}
    got = {pl.entity for pl in plans if pl.action == "get"}
    by_table = {e.table: e for e in entities.values()}
    for c in entities.values():
        if c.name in read:
            continue
        for col in c.columns.values():
            parent = by_table.get((col.foreign_key or "").split(".")[0])
            if parent is not None and parent is not c and parent.name in got and c.table not in parent.columns:
                parent.children.append((c.table, col.name, c.pk))


def _main_entity(plans: list[Plan]) -> str:
    """The entity a domain is about (the car of a vehicle API): read by some tool and named in
    most tools' descriptions ("" when none is named in at least 40% of them)."""
    read = {pl.entity for pl in plans if pl.kind == "read"}
    texts = [_words(pl.tool.description) | set(snake(pl.name).split("_")) for pl in plans]
    best, score = "", 0
    for e in sorted(read):
        names = {e, head(e)} | {w for g in SYNONYMS if head(e) in g for w in g}
        n = sum(1 for t in texts if names & t)
        if n > score:
            best, score = e, n
    return best if score >= 0.4 * len(plans) and score >= 2 else ""


def _retarget(plans: list[Plan]) -> None:
    """A state or setting with no record of its own is a field of the record it belongs to:
    enable_roaming(line_id) moves a line's roaming_status; activate_parking_brake(mode) sets the
    car's parking_brake_mode when the domain is about one car (module docstring, step 3)."""
    for pl in plans:  # money moves on the record named by the ids (fund_account(account_id) moves an account's)
        if pl.action in ("balance", "transfer"):
            money = _money_param(pl.params)
            if money is not None:
                money.role = "amount"  # how much moves: not a stored field
        elif pl.action == "extend":
            by = next((p for p in pl.params if TIME_PARAMS.search(snake(p.name)) and
                       schema_type(p.schema) in ("integer", "number") and p.role == "column"), None)
            if by is not None:
                by.role = "amount"
        if pl.action == "balance":
            target = next((p for p in pl.params if p.role in ("pk", "fk")), None)
            if target is not None:
                target.role, pl.entity = "pk", target.ref
        elif pl.action == "transfer":
            pair = [p for p in pl.params if p.role in ("pk", "fk")][:2]
            pl.entity = pair[0].ref
            for p in pair:
                p.role = "key"  # names an account to move money from or to: not a stored field
    readers = {pl.entity for pl in plans if pl.kind == "read"}
    creators = {pl.entity for pl in plans if pl.action == "create"}
    referenced = {p.ref for pl in plans for p in pl.params if p.role in ("pk", "pk_list", "fk", "fk_list", "key")}
    main = _main_entity(plans)
    for pl in plans:
        noun = pl.entity
        if pl.action not in ("status", "update") or noun in readers or noun in creators or noun in referenced:
            continue
        owner = next((p for p in pl.params if p.role == "fk"), None)
        if owner is not None:
            owner.role = "pk"
            pl.entity = owner.ref
        elif main and main != noun and not any(p.role in ("pk", "pk_list", "fk_list") for p in pl.params):
            pl.entity = main
        else:
            continue
        if pl.action == "status":
            pl.status_col = column_name(f"{noun}_status")
        for p in pl.params:
            if p.role == "column" and p.column and not p.column.startswith(noun):
                p.column = column_name(f"{noun}_{p.column}")


# --- entities -------------------------------------------------------------------------------------
def _entities(plans: list[Plan]) -> dict[str, Entity]:
    entities: dict[str, Entity] = {}

    def ent(name: str) -> Entity:
        if name not in entities:
            pk = column_name(f"{name}_id")
            table = column_name(plural(name))
            taken = {x.table for x in entities.values()}
            while table in taken:
                table = table + "_x"
            abbr = "".join(w[:3] for w in name.split("_")[:2]) or "r"
            entities[name] = Entity(name=name, table=table, pk=pk, prefix=f"{abbr}_")
            entities[name].columns[pk] = ColumnSpec(name=pk, type="text", nullable=False)
        return entities[name]

    # id types: integer when any reference is an integer (an int id also fits a string parameter)
    for pl in plans:
        ent(pl.entity)
        for p in pl.params:
            if p.role in ("pk", "pk_list", "fk", "fk_list", "key"):
                target = ent(p.ref)
                sch = p.schema.get("items", {}) if p.role.endswith("_list") else p.schema
                if isinstance(sch, dict) and schema_type(sch) == "integer" and target.pk_type != "integer":
                    target.pk_type = "integer"
                    target.columns[target.pk].type = "integer"
                    target.pk_schema = sch
    belongs: set[tuple[str, str]] = set()  # (child, parent): a tool shows the child belongs to the parent
    for pl in plans:
        for p in pl.params:
            if p.role == "fk" and p.ref != pl.entity and pl.action in ("create", "search", "get", "update",
                                                                       "status", "delete", "extend"):
                belongs.add((pl.entity, p.ref))
    for pl in plans:
        e = entities[pl.entity]
        for p in pl.params:
            if p.role in ("pk", "pk_list", "fk", "fk_list"):
                target = entities[p.ref]
                if not target.pk_schema and p.role in ("pk", "fk"):
                    target.pk_schema = p.schema
                if p.role in ("pk", "pk_list"):
                    p.column = target.pk
        for p in pl.params:
            if p.role in ("fk", "fk_list"):
                target = entities[p.ref]
                col = p.column
                if p.role == "fk" and snake(p.name) in (f"{p.ref}_id", target.pk) or p.role == "fk" and \
                        id_noun(p.name) and col not in e.columns and target.pk not in e.columns:
                    col = p.column = target.pk if target.pk != e.pk else p.column
                if col not in e.columns:
                    # a foreign key only for a "belongs to" the tools show, never back from the parent
                    fk_ok = p.role == "fk" and target is not e and (pl.entity, p.ref) in belongs and \
                        (p.ref, pl.entity) not in belongs
                    e.columns[col] = ColumnSpec(
                        name=col, type="json" if p.role == "fk_list" else target.columns[target.pk].type,
                        foreign_key=f"{target.table}.{target.pk}" if fk_ok else None)
                    e.schemas[col] = p.schema
                    if p.role == "fk_list":
                        e.list_refs[col] = p.ref
            elif p.role in ("column", "min", "max") and p.column in e.columns and p.column in e.schemas:
                alt = {k: v for k, v in p.schema.items() if k != "default"}
                if schema_type(p.schema) in ("array", "object") and e.columns[p.column].type != "json":
                    e.columns[p.column].type = "json"  # another tool passes a list here: store JSON
                if alt != e.schemas[p.column] and alt not in e.alt_schemas.get(p.column, []):
                    e.alt_schemas.setdefault(p.column, []).append(alt)
            elif p.role in ("column", "min", "max") and p.column not in e.columns:
                t = schema_type(p.schema)
                e.columns[p.column] = ColumnSpec(name=p.column, type=_COLTYPE.get(t, "text"),
                                                 policy="numeric" if t == "number" else "exact")
                e.schemas[p.column] = {k: v for k, v in p.schema.items() if k != "default"}
            if p.role in ("column", "min", "max", "fk", "fk_list"):
                e.param_cols.add(p.column)
        if pl.action in ("get", "search", "create") and isinstance(pl.tool.returns, dict):
            rprops = pl.tool.returns.get("properties")
            if pl.tool.returns.get("type") == "array" and isinstance(pl.tool.returns.get("items"), dict):
                rprops = pl.tool.returns["items"].get("properties")
            for rk, rs in (rprops or {}).items():
                col = column_name(rk)
                if col not in e.columns and isinstance(rs, dict) and _id_ref(rk, rs) is None and \
                        not col.startswith("f_") and len(e.columns) < 40:
                    t = schema_type(rs)
                    e.columns[col] = ColumnSpec(name=col, type=_COLTYPE.get(t, "text"))
                    e.schemas[col] = {k: v for k, v in rs.items() if k in ("type", "enum", "format", "minimum",
                                                                           "maximum", "items", "properties")}
        if pl.action == "search" and pl.verb in ("calculate", "calc", "compute", "estimate", "convert", "predict",
                                                 "forecast", "solve", "determine", "evaluate", "measure"):
            if "result" not in e.columns:
                e.columns["result"] = ColumnSpec(name="result", type="real", policy="numeric")
                e.schemas["result"] = {"type": "number"}
    for e in entities.values():
        if not any("name" in c for c in e.columns):
            e.columns["name"] = ColumnSpec(name="name", type="text")
    _states(plans, entities)
    return entities


def _states(plans: list[Plan], entities: dict[str, Entity]) -> None:
    """Each entity's states (per state column): the initial one, every transition's target and
    main source. `status` is the record's own state; other columns hold a part's state
    (roaming_status of a line)."""
    for e in entities.values():
        cols = sorted({pl.status_col for pl in plans if pl.entity == e.name and pl.action == "status"} |
                      ({"status"} if any(pl.entity == e.name and (pl.action == "create" and pl.status_to or
                                                                   pl.action in ("extend", "refill", "logout"))
                                         for pl in plans) else set()))
        for col in cols:
            if col in e.columns and e.columns[col].type in ("integer", "real"):
                continue  # a numeric status parameter is a plain numeric column: no lifecycle words in it
            moves = [pl for pl in plans if pl.entity == e.name and pl.action == "status" and pl.status_col == col]
            creates = [pl for pl in plans if pl.entity == e.name and pl.action == "create"] if col == "status" else []
            enum = (e.schemas.get(col) or {}).get("enum")
            base = [v for v in enum if isinstance(v, str)] if isinstance(enum, list) and enum and \
                col in e.param_cols else []
            targets = {pl.status_to for pl in moves}
            if base:
                states = sorted(base, key=lambda v: (v in TERMINAL or v in targets, base.index(v)))
            else:
                initial = next((pl.status_to for pl in creates if pl.status_to), "")
                sources = [x for pl in moves for x in pl.status_from]
                if not initial:
                    initial = "pending" if sources.count("pending") > sources.count("active") else "active"
                states = [initial]
                for pl in moves:
                    for x in (pl.status_from[:1] + (pl.status_to,)):
                        if x not in states:
                            states.append(x)
            if col == "status":
                e.statuses = states
                e.status_targets |= targets
            else:
                e.extra_states[col] = states
            if col not in e.columns:
                e.columns[col] = ColumnSpec(name=col, type="text")
            for pl in moves:  # sources limited to the states this column has (never empty)
                pl.status_from = tuple(x for x in pl.status_from if x in states) or tuple(
                    x for x in states if x != pl.status_to and x not in TERMINAL)[:2] or (states[0],)


def _quantity_column(name: str) -> str:
    for col, nouns in QUANTITY_COLUMNS:
        if name in nouns or head(name) in nouns:
            return col
    return "available"


def _looked_up_by(plans: list[Plan], e: Entity) -> dict[str, dict[str, Any]]:
    """column -> schema of the fields a read of `e` must be given (required filters): what a
    record has to hold for that read to find it (lawsuit_info(case_number) finds a lawsuit by
    its case number)."""
    out: dict[str, dict[str, Any]] = {}
    for pl in plans:
        if pl.kind == "read" and pl.entity == e.name and pl.action == "search":
            for p in pl.params:
                if p.required and p.role == "column" and p.column in e.columns and p.column != e.pk:
                    out.setdefault(p.column, p.schema)
    return out


def _assigned_value(schema: dict[str, Any]) -> Any:
    """What a create assigns to a field a read looks its records up by, when the caller gave
    none: the schema's default, its first allowed value, else (text) the new record's own id,
    as a real API numbers a filed case; None (not assigned) for other types."""
    if "default" in schema and schema["default"] is not None:
        return schema["default"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    return "$id" if schema_type(schema) == "string" and not schema.get("format") else None


def _effects(plans: list[Plan], entities: dict[str, Entity]) -> None:
    """What each write does beyond its own row: consume or restore a quantity, move money,
    stamp clock fields, compute a fee or a due date, assign the fields reads look records up by."""
    for pl in plans:
        e = entities[pl.entity]
        text = f"{pl.tool.description}"
        if pl.action == "create":
            given = {p.column for p in pl.params}
            for col, schema in sorted(_looked_up_by(plans, e).items()):
                value = _assigned_value(schema)
                if col not in given and value is not None:
                    pl.effects.append({"kind": "assign", "column": col, "value": value})
            if pl.status_to:  # start_session: a record created in the started state
                e.statuses = e.statuses or [pl.status_to]
                if "status" not in e.columns:
                    e.columns["status"] = ColumnSpec(name="status", type="text")
            if "created_at" not in e.columns:
                e.columns["created_at"] = ColumnSpec(name="created_at", type="text")
            if pl.verb in ("start", "launch", "begin", "check_in", "checkin"):
                _clock(e, "started_at")
            if pl.verb in CLOCK_VERBS:
                _clock(e, "due_date")
                pl.effects.append({"kind": "due", "column": "due_date", "days": 14})
            fks = [p for p in pl.params if p.role == "fk" and p.ref in entities and p.ref != e.name]
            if pl.verb in CONSUME_VERBS:
                _consume(pl, e, entities, fks)
            money = _money_param(pl.params)
            payer = [p for p in fks if any(head(p.ref) == b or p.ref == b for b in BALANCE_NOUNS[:6])]
            if money is not None and payer:
                r = entities[payer[0].ref]
                r.balance = r.balance or "balance"
                _money_col(r, r.balance)
                pl.effects.append({"kind": "charge", "param": payer[0].name, "ref": r.name, "column": r.balance,
                                   "amount": money.name})
        elif pl.action == "status":
            if pl.status_to in ("cancelled", "returned", "refunded", "voided"):
                for other in plans:  # give back what the record's creation consumed
                    for eff in other.effects:
                        if other.entity == e.name and eff["kind"] == "consume":
                            pl.effects.append({"kind": "restore", **{k: eff[k] for k in ("ref", "column", "store",
                                                                                          "fk")}})
                            break
            if pl.verb in ("stop", "end", "terminate", "finish", "complete", "check_out"):
                _clock(e, "started_at")
                _clock(e, "ended_at")
                pl.effects.append({"kind": "stamp", "column": "ended_at"})
                if FEE_WORDS.search(text):
                    _money_col(e, "hourly_rate")
                    _money_col(e, "fee")
                    pl.effects.append({"kind": "fee", "column": "fee", "rate": "hourly_rate", "since": "started_at"})
                    _copy_rate(plans, e, entities)
            if pl.verb == "return":
                _clock(e, "due_date")
                _clock(e, "returned_at")
                pl.effects.append({"kind": "stamp", "column": "returned_at"})
                if FEE_WORDS.search(text) or re.search(r"\b(late|overdue)\b", text, re.I):
                    _money_col(e, "late_fee")
                    pl.effects.append({"kind": "late_fee", "column": "late_fee", "due": "due_date", "per_day": 0.5})
        elif pl.action == "balance":
            target = next((p for p in pl.params if p.role == "pk"), None)
            r = e
            money = _moves_money(pl, r)
            sign = -1 if (pl.verb in ("withdraw", "pay", "charge", "debit", "spend", "redeem")) else 1
            pl.effects.append({"kind": "balance", "sign": sign, "amount": money.name if money else None,
                               "column": r.balance, "key": target.name if target is not None else None})
        elif pl.action == "transfer":
            pair = [p for p in pl.params if p.role == "key"][:2]
            r = e
            money = _moves_money(pl, r)
            pl.effects.append({"kind": "transfer", "from": pair[0].name, "to": pair[1].name,
                               "amount": money.name if money else None, "column": r.balance})
        elif pl.action == "extend":
            by = next((p for p in pl.params if p.role == "amount"), None)
            unit = "hours" if by is not None and re.search(r"hour|hrs|minute|min", snake(by.name)) else "days"
            col = "ends_at" if unit == "hours" else "due_date"
            if by is not None:
                by.role = "amount"
            _clock(e, col)
            if not e.statuses:
                e.statuses = ["active", "expired"]
                e.columns.setdefault("status", ColumnSpec(name="status", type="text"))
            pl.status_from = tuple(s for s in e.statuses if s not in TERMINAL)[:3] or ("active",)
            pl.effects.append({"kind": "extend", "column": col, "by": by.name if by else None, "unit": unit,
                               "default": 14 if unit == "days" else 1,
                               "minutes": bool(by is not None and "min" in snake(by.name))})
            if unit == "hours" and FEE_WORDS.search(text) or "paid" in text.lower():
                _money_col(e, "hourly_rate")
                _money_col(e, "fee")
                pl.effects.append({"kind": "extend_fee", "column": "fee", "rate": "hourly_rate", "by": by.name if by else None})
        elif pl.action == "refill":
            _int_col(e, "refills_left")
            if not e.statuses:
                e.statuses = ["active", "expired"]
                e.columns.setdefault("status", ColumnSpec(name="status", type="text"))
            pl.status_from = tuple(s for s in e.statuses if s not in TERMINAL)[:3] or ("active",)
            pl.effects.append({"kind": "refill", "column": "refills_left"})
        elif pl.action == "login":
            e.statuses = e.statuses or ["active", "ended"]
            e.columns.setdefault("status", ColumnSpec(name="status", type="text"))
            _clock(e, "started_at")
        elif pl.action == "logout":
            e.statuses = e.statuses or ["active", "ended"]
            e.columns.setdefault("status", ColumnSpec(name="status", type="text"))
            _clock(e, "ended_at")
        if pl.action in ("update", "status", "extend", "refill", "balance", "transfer") and \
                "updated_at" not in entities[pl.entity].columns:
            entities[pl.entity].columns["updated_at"] = ColumnSpec(name="updated_at", type="text")


def _consume(pl: Plan, e: Entity, entities: dict[str, Entity], fks: list[Param]) -> None:
    """A booking-like create takes from what it books: a seat of the showtime it names by id, or of
    the bus whose from/to/date it names (its attributes match a row of the booked entity)."""
    q = _quantity_param(pl.params)
    things = [p for p in fks if p.ref not in PEOPLE and head(p.ref) not in PEOPLE]
    counted = [p for p in things if _quantity_column(p.ref) != "available"]
    target = (counted or things or [None])[0]
    match: list[tuple[str, str]] = []
    if target is not None:
        r = entities[target.ref]
    else:
        booked = booked_noun(pl.tool, pl.verb)
        cands = []
        for r in entities.values():
            if r is e or r.name in PEOPLE or head(r.name) in PEOPLE or head(r.name) in RECORD_NOUNS:
                continue
            m = [(p.name, p.column) for p in pl.params if p.role == "column" and p.column in r.columns and
                 p.column in r.param_cols and p is not q and p.column != r.pk]
            named = bool(booked) and (r.name == booked or head(r.name) == head(booked) or synonyms(r.name, booked))
            if m and (named or len(m) >= 2):
                cands.append((named, len(m), r.name, m))
        if not cands:
            return
        _, _, name, match = max(cands)
        r = entities[name]
        pl.anchor = r.name
        if r.pk not in e.columns:
            e.columns[r.pk] = ColumnSpec(name=r.pk, type=r.columns[r.pk].type, foreign_key=f"{r.table}.{r.pk}")
    r.quantity = r.quantity or _quantity_column(r.name)
    _int_col(r, r.quantity)
    if q is None:
        _int_col(e, "quantity")
    price = next((c for c in ("price", "unit_price", "ticket_price", "fare", "cost") if c in r.columns), None)
    if price:
        _money_col(e, "total_price")
    pl.effects.append({"kind": "consume", "param": target.name if target is not None else None, "match": match,
                       "ref": r.name, "column": r.quantity, "amount": q.name if q else None,
                       "store": q.column if q else "quantity", "price": price,
                       "fk": (target.column if target is not None else r.pk)})


def _moves_money(pl: Plan, r: Entity) -> Param | None:
    """`r` gets a balance; the tool's money parameter is an amount (not a stored field)."""
    r.balance = r.balance or "balance"
    _money_col(r, r.balance)
    money = _money_param(pl.params)
    if money is not None:
        money.role = "amount"
    return money


def _copy_rate(plans: list[Plan], e: Entity, entities: dict[str, Entity]) -> None:
    """A record whose fee runs on an hourly rate takes the rate of what it is created in (a parking
    session, its zone's): the parent gets the rate, the create copies it."""
    for pl in plans:
        if pl.entity != e.name or pl.action != "create" or any(x["kind"] == "rate" for x in pl.effects):
            continue
        parent = next((p for p in pl.params if p.role == "fk" and p.ref in entities and p.ref != e.name
                       and p.ref not in PEOPLE and head(p.ref) not in PEOPLE), None)
        if parent is None:
            continue
        _money_col(entities[parent.ref], "hourly_rate")
        pl.effects.append({"kind": "rate", "param": parent.name, "ref": parent.ref, "column": "hourly_rate"})


def _clock(e: Entity, col: str) -> None:
    e.clock.add(col)
    if col not in e.columns:
        e.columns[col] = ColumnSpec(name=col, type="text")


def _int_col(e: Entity, col: str) -> None:
    if col not in e.columns:
        e.columns[col] = ColumnSpec(name=col, type="integer")
    elif e.columns[col].type == "json":  # a tool passes a list here (quantities per item): keep it
        return
    elif e.columns[col].type not in ("integer", "real"):
        e.columns[col].type = "integer"
    e.schemas.setdefault(col, {"type": "integer", "minimum": 0})


def _money_col(e: Entity, col: str) -> None:
    if col not in e.columns:
        e.columns[col] = ColumnSpec(name=col, type="real", policy="numeric")
    e.schemas.setdefault(col, {"type": "number", "minimum": 0})


def tool_reading(tool: Tool) -> tuple[str, str]:
    """One tool's kind and entity noun, planned on its own (discovery groups reads with the writes
    they observe by it: tasks.discover.observers; 30k tools at discovery, so no tables)."""
    try:
        pl = plan_actions([tool])[0]
    except Exception:  # noqa: BLE001 - a tool the rules cannot plan is neither read nor write here
        return "", ""
    return pl.kind, pl.entity
