"""Rule-based planning of a domain: each tool's kind (read/write), action and entity; the entities'
tables, keys and columns (inferred from the parameter schemas, ids and foreign keys).

Deterministic, data only: the plan drives the seed rows (tasks.environments.seed) and the tool
code (tasks.environments.render).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agentscaler.models import Tool
from agentscaler.naming import QUERY_NAMES, column_key, plural, singular, snake, strip_role
from envs.spec import ColumnSpec

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
    body = [p for p in required if isinstance(props.get(p), dict) and schema_type(props[p]) == "object"]
    if body and len(body) == len(required):
        return "write", "shape"
    return "read", "default"


def _id_entity(pname: str, schema: dict[str, Any]) -> str | None:
    """Entity an id-like parameter refers to ('' = the tool's own entity), None if not an id."""
    s = snake(pname)
    t = schema_type(schema)
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
                scalar = [e for p, e in ids if e and schema_type(p.schema) != "array"]
                in_phrase = [e for e in scalar if e in phrase] or [e for e in id_ents if e in phrase]
                if in_phrase:
                    entity = in_phrase[-1]
                elif id_ents:
                    entity = id_ents[-1] if action != "update" else id_ents[0]
                else:
                    entity = "_".join(core[-2:]) or "record"
        entity = column_name(entity)[:40]
        if kind == "read" and any(e in (entity, "") for _, e in ids if e is not None):
            action = "get" if any(e in (entity, "") and schema_type(p.schema) != "array" for p, e in ids
                                  if e is not None) else "search"
        for p, e in ids:
            if e is None:
                continue
            own = e in (entity, "")
            arr = schema_type(p.schema) == "array"
            p.ref = entity if own else e
            if own and not (action == "create" and arr):
                p.role = "pk_list" if arr else "pk"
            else:
                p.role = "fk_list" if arr else "fk"
            p.column = column_name(p.name)
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
            p.column = (column_name(column_key(p.name)) if p.role in ("min", "max") else
                        "" if p.role in ("query", "control", "limit", "offset") else column_name(p.name))
        plans.append(Plan(tool=tool, name=tool.name, kind=kind, action=action, verb=verb, entity=entity,
                          params=params, status_to=STATUS_VERBS.get(verb, ""), kind_reason=why))

    # entities: every tool's own entity, and every entity an id points to
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
            if p.role in ("pk", "pk_list", "fk", "fk_list"):
                target = ent(p.ref)
                sch = p.schema.get("items", {}) if p.role.endswith("_list") else p.schema
                if isinstance(sch, dict) and schema_type(sch) == "integer" and target.pk_type != "integer":
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
                t = schema_type(p.schema)
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
                col = column_name(rk)
                if col not in e.columns and isinstance(rs, dict) and _id_entity(rk, rs) is None:
                    t = schema_type(rs)
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
        if "status" in e.columns and e.columns["status"].type == "text":  # a numeric status is a plain column
            enum = (e.schemas.get("status") or {}).get("enum")
            base = [v for v in enum if isinstance(v, str)] if isinstance(enum, list) and enum else []
            if "status" in e.param_cols and base:  # a parameter constrains the values
                e.statuses = sorted(base, key=lambda v: v in TERMINAL or v in e.status_targets)
            else:  # actionable states first, then the ones that make tools fail (invalid state)
                e.statuses = ["active", "pending", "active", "completed"] + sorted(
                    (set(base) | e.status_targets) - {"active", "pending", "completed"})
    return plans, entities
