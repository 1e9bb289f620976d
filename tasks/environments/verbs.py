"""What a tool's verb means: read or write, which action, which state it moves a record to.

One table (`VERBS`) maps a verb to its action; `TRANSITIONS` gives each state-changing verb its
target state and the states it may start from (start/end, open/close, book/cancel,
borrow/return/renew, freeze/unfreeze, request/approve/reject, ...). `classify` reads a tool's verb
from its description first (the API's own words: "Stop an active parking session..."), then its
name, and falls back to the HTTP method, the output and the parameter shapes. The rules are kept
general (a verb table, not a list of tool names): tests/data/labelled_kinds.json holds 352 real
tools labelled by hand to measure them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from agentscaler.models import Tool
from agentscaler.naming import name_tokens, snake

# action of each verb: read | create | update | delete | transition | credit | debit | transfer | extend |
# refill | login | logout. Every action but read is a write.
_READ = """get fetch retrieve read list search find lookup look query show view display check describe count
calculate calc compute estimate convert validate verify is has can browse filter compare predict analyze analyse
recommend translate detect identify extract summarize parse evaluate measure locate explore discover suggest
inspect see generate download solve determine sort total monitor track ls pwd cat grep du diff wc tail head mean
median sum average forecast simulate plot geocode test score rank classify match quote provide obtain access scan
preview examine assess render fetch_all list_all retrieve_all gather investigate research review tell answer
lookup_all decode encode encrypt decrypt hash format tokenize summarise interpret draw multiply divide subtract
power factor round normalize transform compress combine concatenate split merge_sorted shuffle recognize
diagnose explain fit approximate integrate differentiate derive resolve_address ask prompt respond query_all
""".split()
_CREATE = """create add insert post new book reserve place make submit register send schedule upload write save log
record publish invite subscribe follow like share order buy purchase apply rent hire enroll join request store
import mkdir touch cp copy comment reply tweet retweet mention message report plan sign signup checkout donate
issue file claim upvote vote bookmark append clone build train design generate_new borrow adopt admit deploy
install contact notify alert remind initialize init initiate establish open start_new call dial""".split()
_UPDATE = """update set modify edit change rename move mv assign adjust patch replace upgrade downgrade reschedule mark
toggle configure put increase decrease rate reset exchange fill press release turn switch top sell trade attach
link connect disconnect select tune navigate play stream park drive apply_discount set_up manage convert_to
refuel recharge""".split()
_DELETE = """delete remove drop erase destroy purge clear rm rmdir unsubscribe unfollow unlike discard revoke uninstall
dismiss unregister unbook detach""".split()

# verb -> (target state, states it may start from). "active" is the state a new record starts in.
TRANSITIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "cancel": ("cancelled", ("active", "pending", "confirmed", "scheduled", "open")),
    "approve": ("approved", ("pending",)), "reject": ("rejected", ("pending",)),
    "decline": ("declined", ("pending",)), "deny": ("denied", ("pending",)), "accept": ("accepted", ("pending",)),
    "confirm": ("confirmed", ("pending",)),
    "activate": ("active", ("inactive", "pending", "suspended")), "deactivate": ("inactive", ("active",)),
    "enable": ("enabled", ("disabled",)), "disable": ("disabled", ("enabled", "active")),
    "close": ("closed", ("open", "active", "pending")), "reopen": ("open", ("closed", "resolved")),
    "resolve": ("resolved", ("open", "active", "pending", "escalated")),
    "escalate": ("escalated", ("open", "active", "pending")),
    "archive": ("archived", ("active", "open")), "restore": ("active", ("archived", "inactive")),
    "unarchive": ("active", ("archived",)),
    "complete": ("completed", ("active", "started")), "finish": ("completed", ("active", "started")),
    "lock": ("locked", ("unlocked", "active")), "unlock": ("unlocked", ("locked",)),
    "block": ("blocked", ("active",)), "unblock": ("active", ("blocked",)),
    "suspend": ("suspended", ("active",)), "resume": ("active", ("suspended", "paused")),
    "reactivate": ("active", ("suspended", "inactive")),
    "pause": ("paused", ("active",)), "start": ("active", ("scheduled", "pending", "stopped")),
    "launch": ("active", ("scheduled", "pending")), "begin": ("active", ("scheduled", "pending")),
    "stop": ("ended", ("active",)), "end": ("ended", ("active",)), "terminate": ("ended", ("active",)),
    "expire": ("expired", ("active",)),
    "refund": ("refunded", ("active", "completed", "delivered")),
    "return": ("returned", ("active", "delivered", "overdue")),
    "ship": ("shipped", ("active", "pending")), "deliver": ("delivered", ("shipped", "active")),
    "dispatch": ("dispatched", ("active", "pending")), "void": ("voided", ("active", "pending")),
    "freeze": ("frozen", ("active",)), "unfreeze": ("active", ("frozen",)),
    "mute": ("muted", ("active",)), "unmute": ("active", ("muted",)),
    "hold": ("on_hold", ("active", "pending")), "unhold": ("active", ("on_hold",)),
    "check_in": ("checked_in", ("active", "confirmed")), "checkin": ("checked_in", ("active", "confirmed")),
    "check_out": ("checked_out", ("checked_in",)),
    "publish": ("published", ("draft", "active")), "unpublish": ("draft", ("published",)),
    "discharge": ("discharged", ("active", "admitted")), "settle": ("settled", ("active", "pending")),
    "withdraw_application": ("withdrawn", ("pending",)),
}
TERMINAL = ("cancelled", "closed", "deleted", "archived", "rejected", "refunded", "voided", "expired", "ended",
            "completed", "returned", "denied", "declined", "withdrawn", "discharged")
# money in and out of a balance; a transfer does both; extend/renew push a due date or end time; refill
# spends one of a record's refills; login/logout open and close a session.
_SPECIAL = {
    "deposit": "credit", "fund": "credit", "top_up": "credit", "topup": "credit", "credit": "credit",
    "add_funds": "credit", "load": "credit", "reload": "credit",
    "withdraw": "debit", "pay": "debit", "charge": "debit", "debit": "debit", "spend": "debit", "redeem": "debit",
    "transfer": "transfer", "send_money": "transfer",
    "extend": "extend", "renew": "extend", "prolong": "extend",
    "refill": "refill",
    "login": "login", "log_in": "login", "signin": "login", "sign_in": "login", "authenticate": "login",
    "authorize": "login", "auth": "login",
    "logout": "logout", "log_out": "logout", "signout": "logout", "sign_out": "logout",
}
VERBS: dict[str, str] = {**{v: "read" for v in _READ}, **{v: "create" for v in _CREATE},
                         **{v: "update" for v in _UPDATE}, **{v: "delete" for v in _DELETE},
                         **{v: "transition" for v in TRANSITIONS}, **_SPECIAL}
WRITE_ACTIONS = frozenset(set(VERBS.values()) - {"read"})

# two-word verbs (check in, log out, top up, set up, sign up, look up, turn on)
_PHRASES = {("check", "in"): "check_in", ("check", "out"): "check_out", ("log", "in"): "log_in",
            ("log", "out"): "log_out", ("sign", "in"): "sign_in", ("sign", "out"): "sign_out",
            ("sign", "up"): "signup", ("top", "up"): "top_up", ("set", "up"): "set_up", ("look", "up"): "lookup",
            ("turn", "on"): "turn", ("turn", "off"): "turn", ("add", "funds"): "add_funds",
            ("send", "money"): "send_money", ("pick", "up"): "lookup"}
# verbs whose kind comes from their object ("performs a search" reads, "initiates a payment" writes)
_LIGHT = {"perform": "read", "execute": "read", "run": "read", "process": "read", "initiate": "create",
          "conduct": "read", "carry": "read", "trigger": "create", "invoke": "read", "handle": None,
          "manage": "update", "do": None, "facilitate": None, "enable": None, "allow": None, "help": None,
          "use": None, "attempt": None, "let": None}
_WRITE_NOUNS = {"payment", "transaction", "transfer", "purchase", "order", "booking", "reservation", "trade",
                "update", "deletion", "removal", "installation", "deployment", "refund", "cancellation",
                "registration", "playback", "connection", "backup", "upload", "migration", "sale", "withdrawal",
                "deposit", "job", "jobs", "command", "commands", "shutdown", "restart", "reboot", "write", "insert",
                "send", "post"}
_READ_NOUNS = {"search", "lookup", "query", "queries", "analysis", "calculation", "computation", "check", "scan",
               "test", "comparison", "estimation", "prediction", "simulation", "evaluation", "inspection",
               "review", "conversion", "sort", "translation", "validation", "verification", "addition",
               "subtraction", "multiplication", "division", "round", "lookups", "searches", "get", "read",
               "operation", "operations"}
_FILLER = {"this", "the", "function", "tool", "api", "endpoint", "method", "operation", "that", "which", "will",
           "can", "helps", "help", "to", "you", "used", "lets", "let", "allows", "allow", "users", "user", "us",
           "a", "an", "simple", "please", "it", "is", "for", "being", "in", "order", "and", "then", "also",
           "easily", "service", "utility", "wrapper", "we", "i", "our", "your", "their", "its", "be", "basic"}
_NOUN_NEXT = {"status", "details", "detail", "information", "info", "history", "list", "data", "id", "ids",
              "number", "summary", "of", "records", "record", "item", "items", "entries", "tracking", "book",
              "form", "sheet", "count", "type", "types"}
# verbs that are also common nouns: a lead word followed by one of _NOUN_NEXT is a noun ("Order status of")
NOUNLIKE = {"order", "book", "record", "report", "post", "comment", "message", "log", "file", "issue", "plan",
             "request", "claim", "vote", "share", "like", "reply", "sign", "check", "test", "rate", "match", "quote",
             "return", "track", "play", "list", "search", "query", "view", "display", "count", "score", "rank",
             "transfer", "design", "schedule", "deposit", "charge", "trade", "update", "review", "call", "contact",
             "alert", "forecast", "total", "sum", "average", "mean", "median", "estimate", "store", "upload",
             "download", "stream", "park", "hold", "release", "lock", "block", "pause", "stop", "start", "end",
             "close", "open", "refund", "ship", "export", "import", "fund", "load", "credit", "debit", "balance"}
# objects that make a create/update verb a computation ("Add two numbers", "Multiply the values")
_NUMBER_OBJECTS = {"numbers", "number", "two", "values", "value", "integers", "integer", "floats", "digits",
                   "vectors", "matrices", "matrix", "fractions", "sums", "operands"}
_HTTP_WRITE = re.compile(r"\b(POST|PUT|PATCH|DELETE)\b")
_HTTP_READ = re.compile(r"\bGET\b")
_PREFIX = re.compile(r"^.*?Tool description:\s*", re.S)
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")


def core_description(text: str | None) -> str:
    """The description without a corpus preamble ("This tool belongs to ... Tool description: ")."""
    return _PREFIX.sub("", text or "").strip()


def lemma(word: str) -> str:
    """retrieves -> retrieve, searches -> search, copies -> copy, booking -> book, stopped -> stop
    (the first form the verb table knows; the word itself otherwise)."""
    w = word.lower()
    if w in VERBS:
        return w
    forms = []
    if w.endswith("ies"):
        forms.append(w[:-3] + "y")
    if w.endswith("es"):
        forms.append(w[:-2])
    if w.endswith("s"):
        forms.append(w[:-1])
    if w.endswith("ing"):
        forms += [w[:-3], w[:-3] + "e", w[:-4]]
    if w.endswith("ed"):
        forms += [w[:-2], w[:-1], w[:-3]]
    return next((f for f in forms if f in VERBS or f in _LIGHT), w)


@dataclass(frozen=True)
class VerbReading:
    verb: str  # the verb as the table knows it ("" when none was found)
    action: str  # read | create | update | delete | transition | credit | debit | transfer | extend | refill | login | logout
    source: str  # description | name | light:<verb> | "" (none)


# nouns of actions, as the verb they name ("facilitates the purchase of tickets" purchases)
_NOUN_VERB = {"payment": "pay", "purchase": "purchase", "booking": "book", "reservation": "reserve",
              "order": "order", "trade": "trade", "transfer": "transfer", "refund": "refund", "cancellation": "cancel",
              "registration": "register", "deletion": "delete", "removal": "remove", "update": "update",
              "playback": "play", "connection": "connect", "upload": "upload", "withdrawal": "withdraw",
              "deposit": "deposit", "installation": "install", "deployment": "deploy", "backup": "save",
              "sale": "sell", "search": "search", "lookup": "lookup", "calculation": "calculate",
              "computation": "compute", "analysis": "analyze", "conversion": "convert", "translation": "translate"}


def _light(verb: str, rest: list[str]) -> tuple[str, str] | None:
    """(action, verb) of a light verb ("performs a search", "facilitates the purchase of") from the
    first known noun after it."""
    for w in rest[:5]:
        if w in _NOUN_VERB and _NOUN_VERB[w] in VERBS:
            return VERBS[_NOUN_VERB[w]], _NOUN_VERB[w]
        if w in _WRITE_NOUNS:
            return ("create" if w not in ("update", "write", "insert") else "update"), verb
        if w in _READ_NOUNS:
            return "read", verb
        if lemma(w) in VERBS and w not in _FILLER:  # "initiates playback" -> play
            return VERBS[lemma(w)], lemma(w)
    action = _LIGHT.get(verb)
    return (action, verb) if action else None


def description_verb(description: str | None) -> VerbReading:
    """The verb that leads the description's first sentence (fillers and adverbs skipped)."""
    text = core_description(description)
    first = re.split(r"(?<=[a-z0-9)])\.\s|\n", text, maxsplit=1)[0]
    words = [w.lower().strip("'-") for w in _WORD.findall(first)][:14]
    for i, w in enumerate(words[:8]):
        if w in _FILLER or w.endswith("ly") and len(w) > 4:
            continue
        nxt = words[i + 1] if i + 1 < len(words) else ""
        phrase = _PHRASES.get((lemma(w), nxt))
        if phrase:
            return VerbReading(phrase, VERBS.get(phrase, "read"), "description")
        v = lemma(w)
        if v in _LIGHT:
            found = _light(v, words[i + 1:])
            if found is None:
                continue
            return VerbReading(found[1], found[0], f"light:{v}")
        if v in VERBS:
            if i == 0 and w == v and v in NOUNLIKE and nxt in _NOUN_NEXT:  # "Order status of": a noun
                return VerbReading("", "", "")
            if v == "return":  # "Returns the top posts", "Return the current path": gives back (see read_verb)
                return VerbReading("return", "read", "description")
            if VERBS[v] in ("create", "update") and any(x in _NUMBER_OBJECTS for x in words[i + 1:i + 3]):
                return VerbReading(v, "read", "description")  # "Add two numbers": arithmetic, not a new record
            return VerbReading(v, VERBS[v], "description")
        if i >= 2:
            break
    return VerbReading("", "", "")


def _name_segments(name: str) -> list[list[str]]:
    """Name words per `_` segment, leading class-like segments (CookieHeaderTest_create,
    Movies_3_FindMovies, EventSettingsApi_...) dropped when a later segment holds a verb."""
    segs = [s for s in str(name).split("_") if s]
    out = [list(name_tokens(s)) for s in segs]
    out = [s for s in out if s]
    return out


def name_verb(name: str) -> VerbReading:
    """The first verb among the name's words, after leading class-like segments."""
    segs = _name_segments(name)
    flat = [w for s in segs for w in s]
    # a leading CamelCase class segment (two or more words, none a verb in first place) is a namespace
    start = 0
    raw = [s for s in str(name).split("_") if s]
    if len(raw) > 1 and raw[0][:1].isupper() and any(c.isupper() for c in raw[0][1:]):
        start = len(name_tokens(raw[0]))
    for i, w in enumerate(flat[start:] + flat[:start]):
        nxt = (flat[start:] + flat[:start])[i + 1] if i + 1 < len(flat) else ""
        phrase = _PHRASES.get((w, nxt))
        if phrase:
            return VerbReading(phrase, VERBS.get(phrase, "read"), "name")
        if w in VERBS and w not in ("api", "new", "data"):  # names use base forms: `releases` is a noun
            return VerbReading(w, VERBS[w], "name")
    return VerbReading("", "", "")


def _output_says_write(returns: dict[str, Any] | None) -> bool:
    """An output made only of operation results (status/success/created id) and no data."""
    if not isinstance(returns, dict):
        return False
    props = returns.get("properties")
    if not isinstance(props, dict) or not props:
        return False
    keys = {snake(k) for k in props}
    flags = {k for k in keys if k.endswith(("_status", "status", "success", "created", "deleted", "updated"))
             or k.startswith(("new_", "added", "deleted", "removed"))}
    return bool(flags) and len(flags) == len(keys) and not any("login" in k for k in keys)


def read_verb(tool: Tool) -> VerbReading:
    """The tool's verb: the description's lead verb, else the name's, else none."""
    d = description_verb(tool.description)
    n = name_verb(tool.name)
    if d.verb == "return" and n.verb == "return":  # return_book: "Return a borrowed book" is a return
        return n
    if d.verb:
        # a specific name verb refines a generic description verb of the same kind ("Sets ..." + cancel_x)
        if n.verb and n.action != "read" and d.action not in ("read",) and n.action != d.action and \
                d.action in ("update", "create") and n.action in ("transition", "credit", "debit", "transfer",
                                                                  "extend", "refill", "login", "logout", "delete"):
            return n
        return d
    return n


def classify(tool: Tool) -> tuple[str, str]:
    """(kind, reason): the corpus's kind, else the HTTP method, else the verb (description first,
    then the name), else the output and parameter shapes, else read ("default": counted as no verb)."""
    if tool.kind in ("read", "write"):
        return tool.kind, "corpus"
    text = f"{core_description(tool.description)} {tool.source_name}"
    if _HTTP_WRITE.search(text):
        return "write", "http"
    if _HTTP_READ.search(text):
        return "read", "http"
    v = read_verb(tool)
    if v.verb:
        return ("read" if v.action == "read" else "write"), ("name" if v.source == "name" else "description")
    if _output_says_write(tool.returns):
        return "write", "output"
    props = tool.parameters.get("properties") or {}
    required = set(tool.parameters.get("required") or [])
    body = [p for p in required if isinstance(props.get(p), dict) and props[p].get("type") == "object"]
    if body and len(body) == len(required):
        return "write", "shape"
    return "read", "default"
