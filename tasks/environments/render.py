"""Tool code of a planned domain, from templates: plain Python following the tool code contract
(docs/ARCHITECTURE.md), one function per tool. The code is text: it is never imported or executed
here (only the sandbox worker runs it)."""

from __future__ import annotations

from typing import Any

from agentscaler.naming import ascii_identifier, snake
from agentscaler.schemas import is_valid
from tasks.environments.plan import TERMINAL, Entity, Plan, column_name, schema_type

_PY_RESERVED = {"db", "params", "ToolError", "str", "isinstance", "len", "float", "dict", "list", "int", "bool",
                "round", "any", "all", "sorted", "row", "rows", "values", "key", "found", "None", "True", "False",
                "min", "max", "print", "object", "super", "globals"}

def _pyname(name: str) -> bool:
    """May the template spell this parameter or tool name as an identifier (else: **params, a
    globals() alias)? agentscaler.naming.ascii_identifier, and not a name the template uses."""
    return ascii_identifier(name) and name not in _PY_RESERVED and not name.startswith("_")


_PYTYPE = {"integer": "int", "number": "float", "boolean": "bool", "string": "str", "array": "list",
           "object": "dict", "null": "None"}


def _literal(v: Any) -> str | None:
    if v is None or isinstance(v, (bool, int, float, str)):
        return repr(v)
    return None


def _doc(text: str) -> str:
    first = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    first = first.replace("\\", "/").replace('"""', "'''")[:200]
    return first


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
                lit = _literal(p.schema.get("default")) if "default" in p.schema else None
                if lit is not None and is_valid(p.schema.get("default"), p.schema):
                    sig.append(f"{p.name}: {ann} | None = {lit}")
                else:
                    sig.append(f"{p.name}: {ann} | None = None")
        sig_s = ", ".join(sig)
    else:
        sig_s = "db, **params"
    ret = "list" if pl.action == "search" else "dict"
    L = [f"def {fname}({sig_s}) -> {ret}:"]
    doc = _doc(pl.tool.description)
    L.append(f'    """{doc or pl.name} ({pl.kind}: {pl.action} {e.table})."""')
    if not explicit:
        req = [p.name for p in pl.params if p.required]
        if req:
            L.append(f"    for _name in {req!r}:")
            L.append("        if params.get(_name) is None:")
            L.append('            raise ToolError(f"missing required field {_name}")')
        L += [f"    {local[p.name]} = params.get({p.name!r})" for p in pl.params]
    T = repr(e.table)
    what = e.name.replace("_", " ")

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

    pk = next((p for p in pl.params if p.role == "pk"), None)
    pk_list = next((p for p in pl.params if p.role == "pk_list"), None)
    cols = [p for p in pl.params if p.role == "column" and p.column in e.columns]
    fks = [p for p in pl.params if p.role == "fk" and p.column in e.columns]

    def not_terminal() -> None:
        if "status" in e.columns:
            L.append(f"    if row.get('status') in {TERMINAL!r}:")
            L.append(f"        raise ToolError(f\"{what} {{row[{e.pk!r}]}} is {{row['status']}} and cannot be changed\")")

    def find_target() -> None:
        """row = the record a write acts on: by primary key, else by the other given fields."""
        if pk is not None:
            L.append(f"    row = _one(db, {T}, {e.pk!r}, {ref(pk)}, {what!r})")
            for p in fks:
                L.append(f"    if {ref(p)} is not None and not _same(row.get({p.column!r}), {ref(p)}):")
                L.append(f"        raise ToolError(f\"{what} {{{ref(pk)}}} does not belong to {said(p)} {{{ref(p)}}}\")")
            return
        keys = fks + ([c for c in cols if schema_type(c.schema) in ("string", "integer", "boolean")]
                      if pl.action in ("delete", "status") else [])
        L.append(f"    rows = db.select({T}, order_by={e.pk!r})")
        for p in keys:
            L.append(f"    if {ref(p)} is not None:")
            L.append(f"        rows = [r for r in rows if _same(r.get({p.column!r}), {ref(p)})]")
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

    if pl.action == "get":
        if pk_list is not None and pk is None:
            L.append(f"    out = [_one(db, {T}, {e.pk!r}, _key, {what!r}) for _key in {ref(pk_list)}]")
            L.append("    return {'items': out}")
        else:
            check_refs()
            L.append(f"    row = _one(db, {T}, {e.pk!r}, {ref(pk)}, {what!r})")
            for p in fks:
                L.append(f"    if {ref(p)} is not None and not _same(row.get({p.column!r}), {ref(p)}):")
                L.append(f"        raise ToolError(f\"{what} {{{ref(pk)}}} not found for {said(p)} {{{ref(p)}}}\")")
            L.append("    return row")
    elif pl.action == "search":
        check_refs()
        L.append(f"    rows = db.select({T}, order_by={e.pk!r})")
        for p in pl.params:
            t = schema_type(p.schema)
            r = ref(p)
            if p.role in ("fk",) and p.column in e.columns:
                L.append(f"    if {r} is not None:")
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
    elif pl.action == "create":
        check_refs(skip_own=False)
        if pk is not None:
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
            first = next((s for s in e.statuses if s not in TERMINAL), "active")
            L.append(f"    row['status'] = {first!r}")
        if "created_at" in e.columns and not any(p.column == "created_at" for p in pl.params):
            L.append("    row['created_at'] = db.now()")
        L.append(f"    db.insert({T}, row)")
        L.append("    return row")
    elif pl.action == "update":
        check_refs()
        find_target()
        not_terminal()
        set_values({e.pk})
        if "updated_at" in e.columns:
            L.append("    values['updated_at'] = db.now()")
        L.append("    if not values:")
        L.append("        raise ToolError(\"nothing to update\")")
        L.append(f"    db.update({T}, {{{e.pk!r}: row[{e.pk!r}]}}, values)")
        L.append(f"    return db.get({T}, **{{{e.pk!r}: row[{e.pk!r}]}})")
    elif pl.action == "delete":
        check_refs()
        find_target()
        L.append(f"    db.delete({T}, {{{e.pk!r}: row[{e.pk!r}]}})")
        L.append(f"    return {{'deleted': True, {e.pk!r}: row[{e.pk!r}]}}")
    elif pl.action == "status":
        check_refs()
        find_target()
        target = pl.status_to
        L.append(f"    if row.get('status') == {target!r}:")
        L.append(f"        raise ToolError(f\"{what} {{row[{e.pk!r}]}} is already {target}\")")
        not_terminal()
        set_values({e.pk, "status"})
        L.append(f"    values['status'] = {target!r}")
        if "updated_at" in e.columns:
            L.append("    values['updated_at'] = db.now()")
        L.append(f"    db.update({T}, {{{e.pk!r}: row[{e.pk!r}]}}, values)")
        L.append(f"    return db.get({T}, **{{{e.pk!r}: row[{e.pk!r}]}})")
    src = "\n".join(L) + "\n"
    if fname != pl.name:
        src += f"\n\nglobals()[{pl.name!r}] = {fname}\n"
    return src


HEADER = '''"""Tool code of domain {id} ({name}): generated by the rule-based synthesizer from templates.

Follows the tool code contract (docs/ARCHITECTURE.md): one function per tool, `db` first.
"""

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
'''
