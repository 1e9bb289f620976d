"""Rule-based environment synthesis (the embedded default: no LLM).

From a domain's tools, infer entities and tables (ids, foreign keys, typed columns from the
parameter schemas), classify each tool as read or write, and generate: the DomainSpec, seed
rows (consistent foreign keys, varied values valid against the parameter schemas) and tool
code (plain Python following docs/ARCHITECTURE.md's tool code contract, from templates).

The generated tools.py is text: it is never imported or executed here (only the sandbox
worker runs it). Everything is deterministic for a given (domain id, seed).
"""

from __future__ import annotations

import keyword
import random
import re
from dataclasses import dataclass, field
from typing import Any

from agentscaler.models import Tool
from envs.spec import ColumnSpec, DomainSpec, Edge, TableSpec, ToolSpec
from agentscaler.naming import QUERY_NAMES, column_key, plural, singular, snake, strip_role
from agentscaler.schemas import is_valid
from tasks.scenarios.arguments import gen_value

# --- vocabulary ---------------------------------------------------------------------------------
READ_VERBS = {
    "get", "fetch", "retrieve", "read", "list", "search", "find", "lookup", "look", "query", "show", "view",
    "display", "check", "describe", "count", "calculate", "calc", "compute", "estimate", "convert", "validate",
    "verify", "is", "has", "can", "browse", "filter", "compare", "predict", "analyze", "analyse", "recommend",
    "translate", "detect", "identify", "extract", "summarize", "parse", "evaluate", "measure", "locate",
    "explore", "discover", "suggest", "inspect", "see", "generate", "download", "solve", "determine", "find",
    "sort", "total", "fetch", "monitor", "track", "ls", "pwd", "cat", "grep", "du", "diff", "wc", "tail",
    "head", "echo", "mean", "median", "sum", "average", "forecast", "simulate", "plot", "lookup", "geocode",
    "resolve_address", "test", "list_all", "retrieve_all", "score", "rank", "classify", "match", "quote",
}
CREATE_VERBS = {
    "create", "add", "insert", "post", "new", "book", "reserve", "place", "make", "submit", "register", "send",
    "schedule", "open", "upload", "write", "save", "log", "record", "publish", "invite", "subscribe", "follow",
    "like", "share", "order", "buy", "purchase", "pay", "apply", "rent", "hire", "enroll", "join", "request",
    "store", "import", "mkdir", "touch", "cp", "copy", "post", "comment", "reply", "tweet", "message", "report",
    "plan", "sign", "signup", "checkout", "donate", "issue", "file", "claim", "upvote", "vote", "bookmark",
}
UPDATE_VERBS = {
    "update", "set", "modify", "edit", "change", "rename", "move", "mv", "assign", "transfer", "adjust", "patch",
    "replace", "upgrade", "downgrade", "reschedule", "mark", "toggle", "configure", "put", "increase",
    "decrease", "rate", "reset", "restore", "exchange", "fill", "press", "release", "turn", "switch", "charge",
    "top", "refill", "sell", "trade", "apply_discount", "attach", "link", "connect", "disconnect", "set_up",
}
DELETE_VERBS = {"delete", "remove", "drop", "erase", "destroy", "purge", "clear", "rm", "rmdir", "unsubscribe",
                "unfollow", "unlike", "discard", "revoke", "uninstall"}
STATUS_VERBS = {
    "cancel": "cancelled", "approve": "approved", "reject": "rejected", "activate": "active",
    "deactivate": "inactive", "enable": "enabled", "disable": "disabled", "close": "closed",
    "archive": "archived", "complete": "completed", "confirm": "confirmed", "lock": "locked",
    "unlock": "unlocked", "block": "blocked", "unblock": "active", "suspend": "suspended",
    "resume": "active", "pause": "paused", "stop": "stopped", "start": "started", "refund": "refunded",
    "return": "returned", "ship": "shipped", "deliver": "delivered", "accept": "accepted",
    "decline": "declined", "resolve": "resolved", "escalate": "escalated", "finish": "finished",
    "dispatch": "dispatched", "void": "voided", "expire": "expired", "renew": "active", "freeze": "frozen",
    "unfreeze": "active", "mute": "muted", "unmute": "active", "hold": "on_hold", "release_hold": "active",
}
TERMINAL = ("cancelled", "closed", "deleted", "archived", "rejected", "refunded", "voided", "expired")
WRITE_VERBS = CREATE_VERBS | UPDATE_VERBS | DELETE_VERBS | set(STATUS_VERBS)
ALL_VERBS = READ_VERBS | WRITE_VERBS
STOP = {"by", "for", "of", "the", "a", "an", "to", "from", "in", "on", "with", "all", "details", "detail", "info",
        "information", "data", "list", "id", "ids", "new", "my", "current", "existing", "specific", "given",
        "single", "multiple", "api", "v1", "v2", "v3", "using", "via", "and", "or", "into", "at", "per", "json",
        "based", "if", "exists", "available", "most", "top", "latest", "recent", "random", "one", "each", "any"}
ATTRS = {"price", "status", "balance", "name", "email", "address", "profile", "summary", "total", "rating",
         "score", "location", "phone", "description", "availability", "value", "password", "settings", "history",
         "count", "state", "level", "title", "type"}
CONTROL = {"limit", "max_results", "num_results", "results", "top_k", "top_n", "k", "page", "page_size",
           "per_page", "offset", "sort", "sort_by", "sort_order", "order_by", "fields", "cursor", "page_token",
           "format", "response_format", "output_format", "verbose", "pretty", "include_details", "detailed",
           "api_key", "apikey", "token", "access_token", "key", "callback", "lang", "locale"}
LIMIT_NAMES = {"limit", "max_results", "num_results", "results", "top_k", "top_n", "k", "page_size", "per_page"}
HTTP_WRITE = re.compile(r"\b(POST|PUT|PATCH|DELETE)\b")
HTTP_READ = re.compile(r"\bGET\b")
_PY_RESERVED = {"db", "params", "ToolError", "str", "isinstance", "len", "float", "dict", "list", "int", "bool",
                "round", "any", "all", "sorted", "row", "rows", "values", "key", "found", "None", "True", "False",
                "min", "max", "print", "object", "super", "globals"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _col(name: str) -> str:
    c = re.sub(r"[^A-Za-z0-9_]", "_", snake(name)) or "field"
    if not _IDENT.match(c):
        c = "f_" + c
    return c[:60]


def _schema_type(schema: dict[str, Any]) -> str:
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
    role: str = "column"  # pk | pk_list | fk | fk_list | column | min | max | limit | offset | control
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
    statuses: list[str] = field(default_factory=list)


@dataclass
class Plan:
    tool: Tool
    name: str
    kind: str
    action: str  # get | search | create | update | delete | status
    verb: str
    entity: str
    params: list[Param]
    status_to: str = ""
    kind_reason: str = ""


@dataclass
class Synthesis:
    """What the rule-based synthesizer produces for one domain (all plain data and text)."""

    spec: DomainSpec
    models_py: str
    tools_py: str
    rows: dict[str, list[dict[str, Any]]]
    skipped: dict[str, str]  # tool name -> reason it was left out


def _tokens(name: str) -> list[str]:
    return [t for t in snake(name).split("_") if t]


def _find_verb(tokens: list[str]) -> tuple[int, str]:
    for i, t in enumerate(tokens[:4]):
        if t in ALL_VERBS:
            return i, t
    return -1, ""


def classify(tool: Tool) -> tuple[str, str]:
    """(kind, reason): the corpus's kind, else HTTP method, else verb, else parameter shapes."""
    if tool.kind in ("read", "write"):
        return tool.kind, "corpus"
    text = f"{tool.description} {tool.source_name}"
    if HTTP_WRITE.search(text):
        return "write", "http"
    if HTTP_READ.search(text):
        return "read", "http"
    _, verb = _find_verb(_tokens(tool.name))
    if verb in WRITE_VERBS:
        return "write", "verb"
    if verb in READ_VERBS:
        return "read", "verb"
    props = tool.parameters.get("properties") or {}
    required = set(tool.parameters.get("required") or [])
    body = [p for p in required if isinstance(props.get(p), dict) and _schema_type(props[p]) == "object"]
    if body and len(body) == len(required):
        return "write", "shape"
    return "read", "default"


def _id_entity(pname: str, schema: dict[str, Any]) -> str | None:
    """Entity an id-like parameter refers to ('' = the tool's own entity), None if not an id."""
    s = snake(pname)
    t = _schema_type(schema)
    if s == "id" and t in ("string", "integer"):
        return ""
    if s in ("ids",) and t == "array":
        return ""
    for suf in ("_ids", "_id", "_uuid"):
        if s.endswith(suf) and len(s) > len(suf):
            if suf == "_ids" and t != "array":
                return None
            if suf != "_ids" and t not in ("string", "integer"):
                return None
            return singular(strip_role(s[: -len(suf)]))
    return None


def _phrase(tokens: list[str], vi: int) -> list[str]:
    rest = tokens[vi + 1:] if vi >= 0 else tokens
    if vi > 0 and not [t for t in rest if t not in STOP]:  # todo_delete: the noun comes first
        rest = tokens[:vi]
    return [singular(t) for t in rest if t not in STOP and singular(t) not in STOP and not t.isdigit() and not re.fullmatch(r"v\d+", t)
            and not (len(t) == 6 and re.fullmatch(r"[0-9a-f]*\d[0-9a-f]*", t))]  # ingest's dedup suffix


def plan_tools(tools: list[Tool]) -> tuple[list[Plan], dict[str, Entity]]:
    """Decide each tool's action and entity, and the entities' tables and columns."""
    plans: list[Plan] = []
    for tool in tools:
        kind, why = classify(tool)
        tokens = _tokens(tool.name)
        vi, verb = _find_verb(tokens)
        phrase = _phrase(tokens, vi)
        props = tool.parameters.get("properties") or {}
        required = set(tool.parameters.get("required") or [])
        params = [Param(name=p, schema=s if isinstance(s, dict) else {}, required=p in required)
                  for p, s in props.items()]
        ids = [(p, _id_entity(p.name, p.schema)) for p in params]
        id_ents = [e for _, e in ids if e]
        # the tool's own entity
        core = [t for t in phrase if t not in id_ents]
        if kind == "read":
            action = "search"
            if core and len(core) == 1 and core[0] in ATTRS and id_ents:
                entity = id_ents[0]
            elif core:
                entity = "_".join(core[-2:])
            elif id_ents:
                entity = id_ents[-1] if phrase and phrase[-1] == id_ents[-1] else id_ents[0]
            else:
                entity = "_".join(phrase[-2:]) or "record"
        else:
            if verb in STATUS_VERBS:
                action = "status"
            elif verb in DELETE_VERBS:
                action = "delete"
            elif verb in UPDATE_VERBS:
                action = "update"
            elif verb in CREATE_VERBS:
                action = "create"
            else:
                action = "update" if id_ents or any(e == "" for _, e in ids) else "create"
            if action == "create":
                if core:
                    entity = "_".join(core[-2:])
                elif phrase and phrase[-1] in id_ents:  # create_task(task_id, ...): the caller names the id
                    entity = phrase[-1]
                elif id_ents:  # add_to(cart_id, ...): a change to an existing record
                    entity, action = id_ents[-1], "update"
                else:
                    entity = "_".join(phrase[-2:]) or "record"
            else:
                scalar = [e for p, e in ids if e and _schema_type(p.schema) != "array"]
                in_phrase = [e for e in scalar if e in phrase] or [e for e in id_ents if e in phrase]
                if in_phrase:
                    entity = in_phrase[-1]
                elif id_ents:
                    entity = id_ents[-1] if action != "update" else id_ents[0]
                else:
                    entity = "_".join(core[-2:]) or "record"
        entity = _col(entity)[:40]
        if kind == "read" and any(e in (entity, "") for _, e in ids if e is not None):
            action = "get" if any(e in (entity, "") and _schema_type(p.schema) != "array" for p, e in ids
                                  if e is not None) else "search"
        for p, e in ids:
            if e is None:
                continue
            own = e in (entity, "")
            arr = _schema_type(p.schema) == "array"
            p.ref = entity if own else e
            if own and not (action == "create" and arr):
                p.role = "pk_list" if arr else "pk"
            else:
                p.role = "fk_list" if arr else "fk"
            p.column = _col(p.name)
        for p in params:
            if p.role not in ("column",) or p.column:
                continue
            s = snake(p.name)
            t = _schema_type(p.schema)
            if s in LIMIT_NAMES and t in ("integer", "number"):
                p.role = "limit"
            elif s in QUERY_NAMES and t == "string" and action == "search":
                p.role = "query"
            elif s == "offset" and t in ("integer", "number"):
                p.role = "offset"
            elif s in CONTROL:
                p.role = "control"
            elif column_key(p.name) != s and t in ("integer", "number", "string") and any(
                    s.startswith(x) or s.endswith(y) for x in ("min_", "minimum_", "start_", "from_")
                    for y in ("_min", "_from", "_start")):
                p.role = "min"
            elif column_key(p.name) != s and t in ("integer", "number", "string") and any(
                    s.startswith(x) or s.endswith(y) for x in ("max_", "maximum_", "end_", "to_")
                    for y in ("_max", "_to", "_end")):
                p.role = "max"
            p.column = (_col(column_key(p.name)) if p.role in ("min", "max") else
                        "" if p.role in ("query", "control", "limit", "offset") else _col(p.name))
        plans.append(Plan(tool=tool, name=tool.name, kind=kind, action=action, verb=verb, entity=entity,
                          params=params, status_to=STATUS_VERBS.get(verb, ""), kind_reason=why))

    # entities: every tool's own entity, and every entity an id points to
    entities: dict[str, Entity] = {}

    def ent(name: str) -> Entity:
        if name not in entities:
            pk = _col(f"{name}_id")
            table = _col(plural(name))
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
            if p.role in ("pk", "pk_list", "fk", "fk_list"):
                target = ent(p.ref)
                sch = p.schema.get("items", {}) if p.role.endswith("_list") else p.schema
                if isinstance(sch, dict) and _schema_type(sch) == "integer" and target.pk_type != "integer":
                    target.pk_type = "integer"
                    target.columns[target.pk].type = "integer"
                    target.pk_schema = sch
    for pl in plans:
        e = ent(pl.entity)
        for p in pl.params:
            if p.role in ("pk", "pk_list", "fk", "fk_list"):
                target = ent(p.ref)
                if not target.pk_schema and p.role in ("pk", "fk"):
                    target.pk_schema = p.schema
                if p.role in ("pk", "pk_list"):
                    p.column = target.pk
        # columns of the tool's own entity
        for p in pl.params:
            if p.role in ("fk", "fk_list"):
                target = entities[p.ref]
                col = p.column
                if p.role == "fk" and snake(p.name) == f"{p.ref}_id":
                    col = p.column = target.pk if target.pk != e.pk else p.column
                if col not in e.columns:
                    e.columns[col] = ColumnSpec(
                        name=col, type="json" if p.role == "fk_list" else target.columns[target.pk].type,
                        foreign_key=f"{target.table}.{target.pk}" if p.role == "fk" and target is not e else None)
                    e.schemas[col] = p.schema
                    if p.role == "fk_list":
                        e.list_refs[col] = p.ref
            elif p.role in ("column", "min", "max") and p.column not in e.columns:
                t = _schema_type(p.schema)
                e.columns[p.column] = ColumnSpec(name=p.column, type=_COLTYPE.get(t, "text"),
                                                 policy="numeric" if t == "number" else "exact")
                e.schemas[p.column] = {k: v for k, v in p.schema.items() if k != "default"}
            if p.role in ("column", "min", "max", "fk", "fk_list"):
                e.param_cols.add(p.column)
        if pl.action == "status":
            e.status_targets.add(pl.status_to)
        if pl.action in ("get", "search") and isinstance(pl.tool.returns, dict):
            rprops = pl.tool.returns.get("properties")
            if pl.tool.returns.get("type") == "array" and isinstance(pl.tool.returns.get("items"), dict):
                rprops = pl.tool.returns["items"].get("properties")
            for rk, rs in (rprops or {}).items():
                col = _col(rk)
                if col not in e.columns and isinstance(rs, dict) and _id_entity(rk, rs) is None:
                    t = _schema_type(rs)
                    e.columns[col] = ColumnSpec(name=col, type=_COLTYPE.get(t, "text"))
                    e.schemas[col] = rs
        if pl.action == "search" and pl.verb in ("calculate", "calc", "compute", "estimate", "convert", "predict",
                                                 "forecast", "solve", "determine", "evaluate", "measure"):
            if "result" not in e.columns:
                e.columns["result"] = ColumnSpec(name="result", type="real", policy="numeric")
                e.schemas["result"] = {"type": "number"}
    for e in entities.values():
        if not any("name" in c for c in e.columns):
            e.columns["name"] = ColumnSpec(name="name", type="text")
        if e.status_targets and "status" not in e.columns:
            e.columns["status"] = ColumnSpec(name="status", type="text")
        writes = [pl for pl in plans if pl.entity == e.name and pl.kind == "write"]
        if any(pl.action == "create" for pl in writes) and "created_at" not in e.columns:
            e.columns["created_at"] = ColumnSpec(name="created_at", type="text")
        if any(pl.action in ("update", "status") for pl in writes) and "updated_at" not in e.columns:
            e.columns["updated_at"] = ColumnSpec(name="updated_at", type="text")
        if "status" in e.columns:
            enum = (e.schemas.get("status") or {}).get("enum")
            base = [v for v in enum if isinstance(v, str)] if isinstance(enum, list) and enum else []
            if "status" in e.param_cols and base:  # a parameter constrains the values
                e.statuses = sorted(base, key=lambda v: v in TERMINAL or v in e.status_targets)
            else:  # actionable states first, then the ones that make tools fail (invalid state)
                e.statuses = ["active", "pending", "active", "completed"] + sorted(
                    (set(base) | e.status_targets) - {"active", "pending", "completed"})
    return plans, entities


# --- seed rows ----------------------------------------------------------------------------------
def _pk_values(e: Entity, n: int, rng: random.Random) -> list[Any]:
    s = e.pk_schema or {}
    if isinstance(s.get("enum"), list) and s["enum"]:
        vals = list(dict.fromkeys(s["enum"]))
        return vals[: max(1, min(len(vals), n))]
    constrained = any(k in s for k in ("pattern", "format", "minimum", "maximum", "minLength", "maxLength"))
    if constrained:
        out: list[Any] = []
        for _ in range(n * 20):
            v = gen_value(s, e.pk, rng)
            if v not in out and is_valid(v, s):
                out.append(v)
            if len(out) == n:
                break
        if out:
            return out
    if e.pk_type == "integer":
        return list(range(1, n + 1))
    return [f"{e.prefix}{i}" for i in range(1, n + 1)]


def seed_rows(entities: dict[str, Entity], rng: random.Random, clock: str) -> dict[str, list[dict[str, Any]]]:
    pks = {name: _pk_values(e, rng.randint(4, 8), rng) for name, e in sorted(entities.items())}
    by_table = {e.table: e for e in entities.values()}
    rows: dict[str, list[dict[str, Any]]] = {}
    pool: dict[str, list[Any]] = {}  # column name -> values seeded so far, shared across tables
    for name, e in sorted(entities.items()):
        out = []
        used: dict[str, set[Any]] = {}  # values of this table, shared with the pool when it is done
        for i, pk in enumerate(pks[name]):
            row: dict[str, Any] = {}
            for col, cs in e.columns.items():
                if col == e.pk:
                    row[col] = pk
                elif cs.foreign_key:
                    ref = by_table[cs.foreign_key.split(".")[0]]
                    row[col] = rng.choice(pks[ref.name])
                elif col == "status" and e.statuses:
                    row[col] = e.statuses[i % len(e.statuses)] if i < len(e.statuses) else rng.choice(e.statuses)
                elif col in ("created_at", "updated_at") and col not in e.schemas:
                    row[col] = f"2024-0{rng.randint(1, 4)}-{rng.randint(10, 28)}T{rng.randint(8, 18):02d}:00:00"
                elif col in e.schemas:
                    s = e.schemas[col]
                    fk_ref = entities.get(e.list_refs.get(col, ""))
                    if fk_ref is not None:
                        row[col] = rng.sample(pks[fk_ref.name], k=min(2, len(pks[fk_ref.name])))
                    elif cs.type in ("text", "integer") and rng.random() < 0.8 and [
                            v for v in pool.get(col, ()) if v not in used.setdefault(col, set())]:
                        # the same field in another table: reuse its values (a watchlist holds known symbols)
                        v = rng.choice([v for v in pool[col] if v not in used[col]])
                        row[col] = v if is_valid(v, s) else gen_value(s, col, rng)
                    else:
                        row[col] = gen_value(s, col, rng)
                    if cs.type in ("text", "integer") and isinstance(row[col], (str, int)):
                        used.setdefault(col, set()).add(row[col])
                elif col == "name":
                    row[col] = gen_value({"type": "string"}, "title" if i % 2 else "name", rng)
                elif cs.type == "real":
                    row[col] = round(rng.uniform(1, 500), 2)
                else:
                    row[col] = gen_value({"type": "string"}, col, rng)
            out.append(row)
        rows[e.table] = out
        for col, vals in used.items():
            pool.setdefault(col, []).extend(v for v in sorted(vals, key=str) if v not in pool[col])
    return rows


# --- code generation ----------------------------------------------------------------------------
def _pyname(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name) and name not in _PY_RESERVED and not name.startswith("_")


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
    ref = (lambda p: p.name) if explicit else (lambda p: f"params.get({p.name!r})")
    fname = pl.name if _pyname(pl.name) and not keyword.iskeyword(pl.name) else "tool_" + _col(pl.name)
    # signature: required first, then optional with defaults
    if explicit:
        sig = ["db"]
        for p in [p for p in pl.params if p.required] + [p for p in pl.params if not p.required]:
            ann = _PYTYPE.get(_schema_type(p.schema), "str")
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
                L.append(f"        raise ToolError(f\"{what} {{{ref(pk)}}} does not belong to {p.name} {{{ref(p)}}}\")")
            return
        keys = fks + ([c for c in cols if _schema_type(c.schema) in ("string", "integer", "boolean")]
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
                L.append(f"        raise ToolError(f\"{what} {{{ref(pk)}}} not found for {p.name} {{{ref(p)}}}\")")
            L.append("    return row")
    elif pl.action == "search":
        check_refs()
        L.append(f"    rows = db.select({T}, order_by={e.pk!r})")
        for p in pl.params:
            t = _schema_type(p.schema)
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


# --- the synthesizer ----------------------------------------------------------------------------
def dedupe_tools(tools: list[Tool]) -> tuple[list[Tool], dict[str, str]]:
    """Keep the first tool of each name (tool code has one function per name); report the rest."""
    seen: set[str] = set()
    out, skipped = [], {}
    for t in tools:
        if t.name in seen:
            skipped[t.name] = "duplicate_name"
            continue
        seen.add(t.name)
        out.append(t)
    return out, skipped


def infer_edges(plans: list[Plan], given: list[dict[str, Any]] | None) -> list[Edge]:
    """Edges from discovery (kept), plus data-flow edges: a tool yielding entity X's id feeds a
    tool needing X's id."""
    names = {p.name for p in plans}
    out: dict[tuple[str, str, str], Edge] = {}
    for g in given or []:
        try:
            src, dst = g["src"], g["dst"]
        except (KeyError, TypeError):
            continue
        if src in names and dst in names and src != dst:
            kind = g.get("kind", "dataflow") if g.get("kind") in ("similar", "dataflow") else "dataflow"
            out[(src, dst, kind)] = Edge(src=src, dst=dst, kind=kind, weight=float(g.get("weight", 1.0)))
    for a in plans:
        if a.action not in ("get", "search", "create"):
            continue
        produced = {a.entity} | {p.ref for p in a.params if p.role in ("fk",) and a.action in ("get", "search")}
        for b in plans:
            if b is a:
                continue
            needs = {p.ref for p in b.params if p.role in ("pk", "pk_list", "fk", "fk_list")}
            if a.entity in needs or (produced & needs and a.action == "get"):
                out.setdefault((a.name, b.name, "dataflow"), Edge(src=a.name, dst=b.name, kind="dataflow", weight=1.0))
    return [out[k] for k in sorted(out)]


def synthesize_rules(domain_id: str, tools: list[Tool], name: str = "", given_edges: list[dict] | None = None,
                     seed: int = 0, clock: str = "2024-05-15T15:00:00") -> Synthesis:
    """The whole rule-based synthesis of one domain, as data and text (nothing is executed)."""
    tools, skipped = dedupe_tools(sorted(tools, key=lambda t: t.name))
    if not tools:
        raise ValueError(f"domain {domain_id}: no tools to synthesize")
    rng = random.Random(f"{domain_id}:{seed}")
    plans, entities = plan_tools(tools)
    tables = [TableSpec(name=e.table, columns=list(e.columns.values()), primary_key=[e.pk])
              for _, e in sorted(entities.items())]
    specs = [ToolSpec(name=pl.name, description=pl.tool.description, parameters=pl.tool.parameters,
                      returns=pl.tool.returns, kind=pl.kind, source_tool_id=pl.tool.id or None) for pl in plans]
    edges = infer_edges(plans, given_edges)
    ents = sorted({pl.entity for pl in plans})
    spec = DomainSpec(id=domain_id, name=name or "_".join(ents[:3]) or domain_id,
                      description=f"Rule-synthesized environment over {', '.join(e.table for _, e in sorted(entities.items()))}.",
                      tools=specs, tables=tables, edges=edges, synthesizer="rules", seed=seed, clock=clock,
                      report={"plans": {pl.name: {"kind": pl.kind, "kind_reason": pl.kind_reason, "action": pl.action,
                                                  "entity": pl.entity} for pl in plans}})
    rows = seed_rows(entities, rng, clock)
    code = HEADER.format(id=domain_id, name=spec.name.replace('"', "'")) + "".join(
        "\n\n" + render_tool(pl, entities) for pl in plans)
    from envs.store import render_models_py

    return Synthesis(spec=spec, models_py=render_models_py(spec), tools_py=code, rows=rows, skipped=skipped)
