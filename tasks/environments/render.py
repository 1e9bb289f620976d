"""Tool code of a planned domain, from templates: plain Python following the tool code contract
(docs/ARCHITECTURE.md), one function per tool. The code is text: it is never imported or executed
here (only the sandbox worker runs it).

Each action has one template (get, search, create, update, delete, status, balance, transfer,
extend, refill, login, logout) and each effect of the plan adds its lines: a state machine check
("booking bk_3 is cancelled: only a booking that is active can be cancelled"), a quantity consumed
and given back (seats, stock), money moved with an insufficient-balance error, clock fields and
fees computed from the episode clock (`db.now()`), so every call is deterministic.
"""

from __future__ import annotations

from typing import Any

from agentscaler.naming import ascii_identifier, snake
from agentscaler.schemas import is_valid
from tasks.environments.plan import Entity, Plan, column_name, schema_type
from tasks.environments.verbs import TERMINAL

# names the templates use (builtins, helpers, locals): a parameter named so goes through **params
_PY_RESERVED = {"db", "params", "ToolError", "str", "isinstance", "len", "float", "dict", "list", "int", "bool",
                "round", "any", "all", "sorted", "row", "rows", "values", "key", "found", "None", "True", "False",
                "min", "max", "print", "object", "super", "globals", "datetime", "other", "need", "left", "cost",
                "payer", "parent", "money", "have", "hours", "late", "out"}


def _pyname(name: str) -> bool:
    """May the template spell this parameter or tool name as an identifier (else: **params, a
    globals() alias)? agentscaler.naming.ascii_identifier, and not a name the template uses."""
    return ascii_identifier(name) and name not in _PY_RESERVED and not name.startswith("_")


_ANY = {"dontcare", "any", "all", "none", "no_preference", "either"}  # enum values that filter nothing
_PYTYPE = {"integer": "int", "number": "float", "boolean": "bool", "string": "str", "array": "list",
           "object": "dict", "null": "None"}


def _literal(v: Any) -> str | None:
    if v is None or isinstance(v, (bool, int, float, str)):
        return repr(v)
    return None


def _doc(text: str) -> str:
    first = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return first.replace("\\", "/").replace('"""', "'''")[:200]


def _or(states: tuple[str, ...] | list[str]) -> str:
    s = [x.replace("_", " ") for x in states]
    return s[0] if len(s) == 1 else ", ".join(s[:-1]) + " or " + s[-1]


def render_tool(pl: Plan, entities: dict[str, Entity]) -> str:
    e = entities[pl.entity]
    explicit = all(_pyname(p.name) for p in pl.params)
    # Otherwise every parameter reaches the tool through **params and is read once into an ASCII
    # local: a name is only ever a string literal in code, never an identifier or f-string text.
    local = {p.name: f"arg_{i}" for i, p in enumerate(pl.params)}
    ref = (lambda p: p.name) if explicit else (lambda p: local[p.name])
    said = (lambda p: p.name) if explicit else (lambda p: snake(p.name) or "parameter")  # in messages
    fname = pl.name if _pyname(pl.name) else "tool_" + column_name(pl.name)
    # signature: required first, then optional with defaults
    if explicit:
        sig = ["db"]
        for p in [p for p in pl.params if p.required] + [p for p in pl.params if not p.required]:
            ann = _PYTYPE.get(schema_type(p.schema), "str")
            if p.required:
                sig.append(f"{p.name}: {ann}")
            else:
                # a read's omitted filter matches everything (its schema default is not a filter)
                lit = _literal(p.schema.get("default")) if "default" in p.schema and pl.kind == "write" else None
                if lit is not None and is_valid(p.schema.get("default"), p.schema):
                    sig.append(f"{p.name}: {ann} | None = {lit}")
                else:
                    sig.append(f"{p.name}: {ann} | None = None")
        sig_s = ", ".join(sig)
    else:
        sig_s = "db, **params"
    ret = "list" if pl.action == "search" else "dict"
    L = [f"def {fname}({sig_s}) -> {ret}:"]
    L.append(f'    """{_doc(pl.tool.description) or pl.name} ({pl.kind}: {pl.action} {e.table})."""')
    if not explicit:
        req = [p.name for p in pl.params if p.required]
        if req:
            L.append(f"    for _name in {req!r}:")
            L.append("        if params.get(_name) is None:")
            L.append('            raise ToolError(f"missing required field {_name}")')
        L += [f"    {local[p.name]} = params.get({p.name!r})" for p in pl.params]
    T = repr(e.table)
    what = e.name.replace("_", " ")
    pk = next((p for p in pl.params if p.role == "pk"), None)
    pk_list = next((p for p in pl.params if p.role == "pk_list"), None)
    cols = [p for p in pl.params if p.role == "column" and p.column in e.columns]
    fks = [p for p in pl.params if p.role == "fk" and p.column in e.columns]
    by_name = {p.name: p for p in pl.params}
    sc = pl.status_col  # the state column a move changes

    def check_refs(skip_own: bool = True) -> None:
        for p in pl.params:
            if p.role == "fk" and p.ref in entities:
                r = entities[p.ref]
                if skip_own and r is e:
                    continue
                guard = "" if p.required else f"if {ref(p)} is not None:\n        "
                L.append(f"    {guard}_one(db, {r.table!r}, {r.pk!r}, {ref(p)}, {r.name.replace('_', ' ')!r})")
            elif p.role == "fk_list" and p.ref in entities:
                r = entities[p.ref]
                L.append(f"    for _ref in {ref(p)} or []:")
                L.append(f"        _one(db, {r.table!r}, {r.pk!r}, _ref, {r.name.replace('_', ' ')!r})")

    def find_target(states: tuple[str, ...] = ()) -> None:
        """row = the record a write acts on: by primary key, else by the other given fields (one in a
        state the move may start from first)."""
        if pk is not None:
            L.append(f"    row = _one(db, {T}, {e.pk!r}, {ref(pk)}, {what!r})")
            for p in fks:
                L.append(f"    if {ref(p)} is not None and not _same(row.get({p.column!r}), {ref(p)}):")
                L.append(f"        raise ToolError(f\"{what} {{{ref(pk)}}} does not belong to {said(p)} {{{ref(p)}}}\")")
            return
        keys = fks + ([c for c in cols if schema_type(c.schema) in ("string", "integer", "boolean")]
                      if pl.action in ("delete", "status", "extend", "refill", "logout") and sc == "status" else [])
        L.append(f"    rows = db.select({T}, order_by={e.pk!r})")
        for p in keys:
            L.append(f"    if {ref(p)} is not None:")
            L.append(f"        rows = [r for r in rows if _same(r.get({p.column!r}), {ref(p)})]")
        if states and sc in e.columns:
            L.append(f"    rows = sorted(rows, key=lambda r: r.get({sc!r}) not in {states!r})")
        L.append("    if not rows:")
        L.append(f"        raise ToolError(\"no matching {what} found\")")
        L.append("    row = rows[0]")

    def set_values(exclude: set[str]) -> None:
        L.append("    values = {}")
        for p in cols:
            if p.column in exclude:
                continue
            L.append(f"    if {ref(p)} is not None:")
            L.append(f"        values[{p.column!r}] = {ref(p)}")

    def state_check(states: tuple[str, ...], to: str) -> None:
        if sc not in e.columns or not states:
            return
        part = "" if sc == "status" else " " + sc[: -len("_status")].replace("_", " ") if sc.endswith("_status") else ""
        L.append(f"    if row.get({sc!r}) not in {states!r}:")
        L.append(f"        raise ToolError(f\"{what} {{row[{e.pk!r}]}}{part} is {{row.get({sc!r})}}: only a {what}{part} "
                 f"that is {_or(states)} can be {to.replace('_', ' ')}\")")

    def not_terminal() -> None:
        if "status" in e.columns:
            L.append(f"    if row.get('status') in {TERMINAL!r}:")
            L.append(f"        raise ToolError(f\"{what} {{row[{e.pk!r}]}} is {{row['status']}} and cannot be changed\")")

    def amount(name: str | None, default: str = "1") -> str:
        return f"_num({ref(by_name[name])}, {default})" if name and name in by_name else default

    def positive(expr: str, label: str) -> None:
        L.append(f"    if {expr} <= 0:")
        L.append(f"        raise ToolError(\"{label} must be positive\")")

    def stamp_updated(target: str = "values") -> None:
        if "updated_at" in e.columns:
            L.append(f"    {target}['updated_at'] = db.now()")

    def finish_update() -> None:
        L.append(f"    db.update({T}, {{{e.pk!r}: row[{e.pk!r}]}}, values)")
        L.append(f"    return db.get({T}, **{{{e.pk!r}: row[{e.pk!r}]}})")

    a = pl.action
    if a == "get":
        if pk_list is not None and pk is None:
            L.append(f"    out = [_one(db, {T}, {e.pk!r}, _key, {what!r}) for _key in {ref(pk_list)}]")
            L.append("    return {'items': out}")
        else:
            check_refs()
            L.append(f"    row = _one(db, {T}, {e.pk!r}, {ref(pk)}, {what!r})")
            for p in fks:
                L.append(f"    if {ref(p)} is not None and not _same(row.get({p.column!r}), {ref(p)}):")
                L.append(f"        raise ToolError(f\"{what} {{{ref(pk)}}} not found for {said(p)} {{{ref(p)}}}\")")
            for table, col, key in e.children:  # records that belong to this one (no tool reads them alone)
                L.append(f"    row[{table!r}] = [r[{key!r}] for r in db.select({table!r}, {{{col!r}: row[{e.pk!r}]}}, "
                         f"order_by={key!r})]")
            L.append("    return row")
    elif a == "search":
        check_refs()
        L.append(f"    rows = db.select({T}, order_by={e.pk!r})")
        for p in pl.params:
            t = schema_type(p.schema)
            r = ref(p)
            if p.role == "fk" and p.column in e.columns:
                L.append(f"    if {r} is not None:")
                L.append(f"        rows = [r for r in rows if _same(r.get({p.column!r}), {r})]")
            elif p.role == "column" and p.column in e.columns and t == "string" and p.schema.get("enum") and \
                    any(str(v).lower() in _ANY for v in p.schema["enum"]):
                L.append(f"    if {r} is not None and str({r}).lower() not in {sorted(_ANY)!r}:")
                L.append(f"        rows = [r for r in rows if _same(r.get({p.column!r}), {r})]")
            elif p.role == "query":
                L.append(f"    if {r}:")
                L.append(f"        rows = [r for r in rows if _contains(' '.join(str(v) for v in r.values()), {r})]")
            elif p.role == "pk_list":
                L.append(f"    if {r}:")
                L.append(f"        rows = [r for r in rows if any(_same(r.get({e.pk!r}), v) for v in {r})]")
            elif p.role == "column" and p.column in e.columns:
                if t == "string" and not p.schema.get("enum"):
                    L.append(f"    if {r} is not None:")
                    L.append(f"        rows = [r for r in rows if _contains(r.get({p.column!r}), {r})]")
                elif t in ("integer", "number", "boolean", "string"):
                    L.append(f"    if {r} is not None:")
                    L.append(f"        rows = [r for r in rows if _same(r.get({p.column!r}), {r})]")
            elif p.role in ("min", "max") and p.column in e.columns:
                op = ">=" if p.role == "min" else "<="
                L.append(f"    if {r} is not None:")
                L.append(f"        rows = [r for r in rows if _cmp(r.get({p.column!r}), {op!r}, {r})]")
        for p in pl.params:
            if p.role == "offset":
                L.append(f"    if {ref(p)}:")
                L.append(f"        rows = rows[max(0, int({ref(p)})):]")
        for p in pl.params:
            if p.role == "limit":
                L.append(f"    if {ref(p)} is not None:")
                L.append(f"        rows = rows[:max(0, int({ref(p)}))]")
        L.append("    return rows")
    elif a in ("create", "login"):
        check_refs(skip_own=False)
        if pk is not None:
            if not pk.required:  # an optional id the caller leaves out: the environment gives one
                fresh = f"_next_int(db, {T}, {e.pk!r})" if e.pk_type == "integer" else f"db.new_id({T}, {e.prefix!r})"
                L.append(f"    if {ref(pk)} is None:")
                L.append(f"        {ref(pk)} = {fresh}")
            L.append(f"    if db.get({T}, **{{{e.pk!r}: {ref(pk)}}}) is not None:")
            L.append(f"        raise ToolError(f\"{what} {{{ref(pk)}}} already exists\")")
            L.append(f"    row = {{{e.pk!r}: {ref(pk)}}}")
        elif e.pk_type == "integer":
            L.append(f"    row = {{{e.pk!r}: _next_int(db, {T}, {e.pk!r})}}")
        else:
            L.append(f"    row = {{{e.pk!r}: db.new_id({T}, {e.prefix!r})}}")
        for p in pl.params:
            if p.role in ("column", "fk", "fk_list", "pk_list") and p.column in e.columns and p.column != e.pk:
                L.append(f"    row[{p.column!r}] = {ref(p)}")
        if "status" in e.columns and not any(p.column == "status" for p in pl.params):
            first = pl.status_to or next((s for s in e.statuses if s not in TERMINAL), "active")
            L.append(f"    row['status'] = {first!r}")
        for col in ("created_at", "started_at"):
            if col in e.columns and not any(p.column == col for p in pl.params) and (
                    col == "created_at" or pl.verb in ("start", "launch", "begin", "check_in", "checkin")
                    or a == "login"):
                L.append(f"    row[{col!r}] = db.now()")
        for eff in pl.effects:
            k = eff["kind"]
            if k == "assign":  # a field a read looks records up by (plan._looked_up_by)
                v = f"str(row[{e.pk!r}])" if eff["value"] == "$id" else _literal(eff["value"])
                if v is not None:
                    L.append(f"    if row.get({eff['column']!r}) is None:")
                    L.append(f"        row[{eff['column']!r}] = {v}")
            elif k == "due":
                L.append(f"    row[{eff['column']!r}] = _add(db.now(), days={eff['days']})")
            elif k == "consume":
                r = entities[eff["ref"]]
                rname = r.name.replace("_", " ")
                n = amount(eff["amount"])
                L.append(f"    need = {n}")
                positive("need", eff["amount"] or "quantity")
                if eff["param"]:
                    rp = by_name[eff["param"]]
                    L.append(f"    other = _one(db, {r.table!r}, {r.pk!r}, {ref(rp)}, {rname!r})")
                else:  # the booked row named by its attributes (a bus by from/to/date)
                    L.append(f"    found = db.select({r.table!r}, order_by={r.pk!r})")
                    for pname, col in eff["match"]:
                        pp = by_name[pname]
                        L.append(f"    if {ref(pp)} is not None:")
                        L.append(f"        found = [r for r in found if _same(r.get({col!r}), {ref(pp)})]")
                    matched = ", ".join(f"{c}={{{ref(by_name[p_])}}}" for p_, c in eff["match"])
                    L.append("    if not found:")
                    L.append(f"        raise ToolError(f\"no {rname} matches {matched}\")")
                    L.append("    other = found[0]")
                    L.append(f"    row[{r.pk!r}] = other[{r.pk!r}]")
                L.append(f"    left = _num(other.get({eff['column']!r}), 0)")
                L.append("    if left < need:")
                L.append(f"        raise ToolError(f\"not enough {eff['column'].replace('_', ' ')} on "
                         f"{rname} {{other[{r.pk!r}]}}: {{left}} left, {{need}} requested\")")
                L.append(f"    db.update({r.table!r}, {{{r.pk!r}: other[{r.pk!r}]}}, {{{eff['column']!r}: left - need}})")
                L.append(f"    row[{eff['store']!r}] = need")
                if eff.get("price"):
                    L.append(f"    row['total_price'] = round(_num(other.get({eff['price']!r}), 0) * need, 2)")
            elif k == "rate":
                r = entities[eff["ref"]]
                L.append(f"    parent = _one(db, {r.table!r}, {r.pk!r}, {ref(by_name[eff['param']])}, "
                         f"{r.name.replace('_', ' ')!r})")
                L.append(f"    row[{eff['column']!r}] = parent.get({eff['column']!r})")
            elif k == "charge":
                r = entities[eff["ref"]]
                rp = by_name[eff["param"]]
                L.append(f"    cost = {amount(eff['amount'], '0')}")
                L.append(f"    payer = _one(db, {r.table!r}, {r.pk!r}, {ref(rp)}, {r.name.replace('_', ' ')!r})")
                L.append(f"    if _num(payer.get({eff['column']!r}), 0) < cost:")
                L.append(f"        raise ToolError(f\"insufficient {eff['column']} on {r.name.replace('_', ' ')} "
                         f"{{{ref(rp)}}}: {{payer.get({eff['column']!r})}} left, {{cost}} needed\")")
                L.append(f"    db.update({r.table!r}, {{{r.pk!r}: payer[{r.pk!r}]}}, "
                         f"{{{eff['column']!r}: round(_num(payer.get({eff['column']!r}), 0) - cost, 2)}})")
        L.append(f"    db.insert({T}, row)")
        L.append("    return row")
    elif a == "update":
        check_refs()
        find_target()
        not_terminal()
        set_values({e.pk})
        stamp_updated()
        L.append("    if not values:")
        L.append("        raise ToolError(\"nothing to update\")")
        finish_update()
    elif a == "delete":
        check_refs()
        find_target()
        L.append(f"    db.delete({T}, {{{e.pk!r}: row[{e.pk!r}]}})")
        L.append(f"    return {{'deleted': True, {e.pk!r}: row[{e.pk!r}]}}")
    elif a in ("status", "logout"):
        check_refs()
        states = pl.status_from or (("active",) if a == "logout" else ())
        target = pl.status_to or "ended"
        find_target(states)
        if a == "logout":
            L.append("    if row.get('status') != 'active':")
            L.append("        raise ToolError(\"no active session\")")
        else:
            L.append(f"    if row.get({sc!r}) == {target!r}:")
            L.append(f"        raise ToolError(f\"{what} {{row[{e.pk!r}]}} is already {target.replace('_', ' ')}\")")
            state_check(states, target)
        set_values({e.pk, sc})
        L.append(f"    values[{sc!r}] = {target!r}")
        if a == "logout" and "ended_at" in e.columns:
            L.append("    values['ended_at'] = db.now()")
        for eff in pl.effects:
            k = eff["kind"]
            if k == "stamp":
                L.append(f"    values[{eff['column']!r}] = db.now()")
            elif k == "fee":
                L.append(f"    hours = max(0.0, _hours(row.get({eff['since']!r}), db.now()))")
                L.append(f"    values[{eff['column']!r}] = round(_num(row.get({eff['column']!r}), 0) + hours * "
                         f"_num(row.get({eff['rate']!r}), 0), 2)")
            elif k == "late_fee":
                L.append(f"    late = max(0.0, _hours(row.get({eff['due']!r}), db.now()) / 24.0)")
                L.append(f"    values[{eff['column']!r}] = round(int(late + 0.999) * {eff['per_day']}, 2)")
            elif k == "restore":
                r = entities[eff["ref"]]
                L.append(f"    if row.get({eff['fk']!r}) is not None:")
                L.append(f"        other = db.get({r.table!r}, **{{{r.pk!r}: row[{eff['fk']!r}]}})")
                L.append("        if other is not None:")
                L.append(f"            db.update({r.table!r}, {{{r.pk!r}: other[{r.pk!r}]}}, {{{eff['column']!r}: "
                         f"_num(other.get({eff['column']!r}), 0) + _num(row.get({eff['store']!r}), 1)}})")
        stamp_updated()
        finish_update()
    elif a == "balance":
        eff = pl.effects[0]
        check_refs()
        key = by_name.get(eff["key"]) if eff.get("key") else None
        if key is not None:
            L.append(f"    row = _one(db, {T}, {e.pk!r}, {ref(key)}, {what!r})")
        else:
            find_target()
        not_terminal()
        L.append(f"    money = {amount(eff['amount'])}")
        positive("money", eff["amount"] or "amount")
        L.append(f"    have = _num(row.get({eff['column']!r}), 0)")
        if eff["sign"] < 0:
            L.append("    if have < money:")
            L.append(f"        raise ToolError(f\"insufficient {eff['column']} on {what} {{row[{e.pk!r}]}}: "
                     f"{{have}} left, {{money}} requested\")")
        sign = "-" if eff["sign"] < 0 else "+"
        set_values({e.pk, eff["column"]})
        L.append(f"    values[{eff['column']!r}] = round(have {sign} money, 2)")
        stamp_updated()
        finish_update()
    elif a == "transfer":
        eff = pl.effects[0]
        src, dst = by_name[eff["from"]], by_name[eff["to"]]
        col = eff["column"]
        L.append(f"    row = _one(db, {T}, {e.pk!r}, {ref(src)}, {what!r})")
        L.append(f"    other = _one(db, {T}, {e.pk!r}, {ref(dst)}, {what!r})")
        L.append("    if _same(row[" + repr(e.pk) + "], other[" + repr(e.pk) + "]):")
        L.append(f"        raise ToolError(\"cannot transfer to the same {what}\")")
        L.append(f"    money = {amount(eff['amount'])}")
        positive("money", eff["amount"] or "amount")
        L.append(f"    if _num(row.get({col!r}), 0) < money:")
        L.append(f"        raise ToolError(f\"insufficient {col} on {what} {{row[{e.pk!r}]}}: "
                 f"{{row.get({col!r})}} left, {{money}} requested\")")
        L.append(f"    db.update({T}, {{{e.pk!r}: row[{e.pk!r}]}}, {{{col!r}: round(_num(row.get({col!r}), 0) - money, 2)}})")
        L.append(f"    db.update({T}, {{{e.pk!r}: other[{e.pk!r}]}}, {{{col!r}: round(_num(other.get({col!r}), 0) + money, 2)}})")
        L.append(f"    return {{'from': db.get({T}, **{{{e.pk!r}: row[{e.pk!r}]}}), "
                 f"'to': db.get({T}, **{{{e.pk!r}: other[{e.pk!r}]}}), 'amount': money}}")
    elif a in ("extend", "refill"):
        check_refs()
        states = pl.status_from
        find_target(states)
        state_check(states, "extended" if a == "extend" else "refilled")
        L.append("    values = {}")
        for eff in pl.effects:
            k = eff["kind"]
            if k == "extend":
                n = amount(eff["by"], str(eff["default"]))
                L.append(f"    _by = {n}")
                positive("_by", eff["by"] or "extension")
                if eff.get("minutes"):
                    L.append("    _by = _by / 60.0")
                unit = "hours" if eff["unit"] == "hours" else "days"
                L.append(f"    values[{eff['column']!r}] = _add(row.get({eff['column']!r}) or db.now(), {unit}=_by)")
            elif k == "extend_fee":
                L.append(f"    values[{eff['column']!r}] = round(_num(row.get({eff['column']!r}), 0) + _by * "
                         f"_num(row.get({eff['rate']!r}), 0), 2)")
            elif k == "refill":
                L.append(f"    if _num(row.get({eff['column']!r}), 0) <= 0:")
                L.append(f"        raise ToolError(f\"no refills left on {what} {{row[{e.pk!r}]}}\")")
                L.append(f"    values[{eff['column']!r}] = int(_num(row.get({eff['column']!r}), 0)) - 1")
        for p in cols:
            if p.column != e.pk and p.column not in ("status",):
                L.append(f"    if {ref(p)} is not None:")
                L.append(f"        values[{p.column!r}] = {ref(p)}")
        stamp_updated()
        finish_update()
    src = "\n".join(L) + "\n"
    if fname != pl.name:
        src += f"\n\nglobals()[{pl.name!r}] = {fname}\n"
    return src


HEADER = '''"""Tool code of domain {id} ({name}): generated by the rule-based synthesizer from templates.

Follows the tool code contract (docs/ARCHITECTURE.md): one function per tool, `db` first.
"""

import datetime

from envs.toolkit import ToolError


def _one(db, table, key, value, what):
    """The row of `table` whose `key` is `value`, or a not-found error."""
    if value is None:
        raise ToolError(f"missing {{what}} id")
    row = db.get(table, **{{key: value}})
    if row is None:
        raise ToolError(f"{{what}} {{value}} not found")
    return row


def _same(a, b):
    return a == b or (a is not None and b is not None and str(a).strip().lower() == str(b).strip().lower())


def _contains(haystack, needle):
    return haystack is not None and str(needle).strip().lower() in str(haystack).lower()


def _cmp(value, op, bound):
    if value is None:
        return False
    try:
        return value >= bound if op == ">=" else value <= bound
    except TypeError:
        return str(value) >= str(bound) if op == ">=" else str(value) <= str(bound)


def _next_int(db, table, key):
    rows = db.query(f'SELECT COALESCE(MAX("{{key}}"), 0) + 1 AS n FROM "{{table}}"')
    return rows[0]["n"]


def _num(value, default):
    """A number from a field or an argument (default when missing or not a number)."""
    if isinstance(value, bool) or value is None:
        return default
    try:
        return float(value) if not isinstance(value, int) else value
    except (TypeError, ValueError):
        return default


def _time(value):
    """An ISO date or date-time (a trailing Z allowed) as a naive datetime; None when unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "")[:19])
    except ValueError:
        try:
            return datetime.datetime.fromisoformat(value[:10])
        except ValueError:
            return None


def _hours(start, end):
    """Hours from `start` to `end` (0 when either is unreadable)."""
    a, b = _time(start), _time(end)
    return (b - a).total_seconds() / 3600.0 if a and b else 0.0


def _add(value, hours=0.0, days=0.0):
    """An ISO date-time `hours` and `days` after `value` (the episode clock when unreadable)."""
    base = _time(value) or datetime.datetime(2024, 1, 1)
    return (base + datetime.timedelta(hours=hours, days=days)).strftime("%Y-%m-%dT%H:%M:%S")
'''
