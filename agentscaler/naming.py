"""Naming rules shared by discovery, synthesis and argument grounding: one copy of each.

Discovery and synthesis must agree on what a name means (`orders` and `order_id` name one
entity), so the rules live here and nowhere else: snake_case, singular and plural, the role
prefixes of id parameters (`source_account_id` is an `account`), the parameter names that are
search queries, the column a parameter refers to (`max_price` -> `price`), and which names
generated code may spell as identifiers (ASCII ones only: Python folds the others, NFKC).
"""

from __future__ import annotations

import keyword
import re
import unicodedata
from functools import lru_cache

ROLE_PREFIXES = ("source_", "target_", "from_", "to_", "destination_", "origin_", "parent_", "new_", "old_",
                 "sender_", "receiver_", "primary_", "src_", "dst_", "other_", "dest_", "original_", "recipient_")
QUERY_NAMES = frozenset({"query", "q", "keyword", "keywords", "search", "search_term", "search_query", "term",
                         "search_text", "searchterm", "search_string", "query_string"})
RANGE_PREFIXES = ("min_", "max_", "minimum_", "maximum_", "start_", "end_", "from_", "to_")
RANGE_SUFFIXES = ("_min", "_max", "_from", "_to", "_start", "_end")

_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_NON_WORD = re.compile(r"[^a-z0-9]+")
_ASCII_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@lru_cache(maxsize=1 << 16)  # the same names recur in every call of every walk
def snake(name: str) -> str:
    """camelCase / kebab / dotted names -> snake_case, lower ("" when nothing is left). Other
    scripts' compatibility forms fold first (fullwidth `ｕｓｅｒＩｄ` -> `user_id`)."""
    name = str(name)
    if not name.isascii():
        name = unicodedata.normalize("NFKC", name)
    return _NON_WORD.sub("_", _CAMEL.sub(r"\1_\2", name).lower()).strip("_")


def ascii_identifier(name: object) -> bool:
    """May generated code spell `name` as an identifier? Only an ASCII identifier that is not a
    keyword: Python folds every other identifier (NFKC), so in code a fullwidth `ｄｂ` *is* `db`
    and a name with a look-alike letter is a different one. Other names are used as strings."""
    return isinstance(name, str) and _ASCII_IDENT.fullmatch(name) is not None and not keyword.iskeyword(name)


def singular(word: str) -> str:
    """orders -> order, categories -> category, boxes -> box; status, address, bus stay as they are."""
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "xes", "ches", "shes", "uses")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")) and len(word) > 3:
        return word[:-1]
    return word


# mass nouns: one table of weather, not of weathers
UNCOUNTABLE = frozenset({"weather", "information", "data", "equipment", "news", "music", "software", "inventory",
                         "furniture", "feedback", "traffic", "advice", "research", "evidence", "knowledge", "money",
                         "mail", "luggage", "baggage", "staff", "metadata", "media", "content", "storage", "memory",
                         "analytics", "insurance", "parking", "health", "nutrition", "weight", "mileage"})


def plural(word: str) -> str:
    """order -> orders, category -> categories, box -> boxes; weather, news stay as they are."""
    if word in UNCOUNTABLE or word.split("_")[-1] in UNCOUNTABLE:
        return word
    if word.endswith("y") and len(word) > 1 and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    if word.endswith(("s", "x", "ch", "sh")):
        return word + "es"
    return word + "s"


def column_key(param: str) -> str:
    """The column a parameter name refers to: userId -> user_id, max_price -> price, order_ids -> order_id."""
    s = snake(param)
    for p in RANGE_PREFIXES:
        if s.startswith(p) and len(s) > len(p):
            return s[len(p):]
    for p in RANGE_SUFFIXES:
        if s.endswith(p) and len(s) > len(p):
            return s[: -len(p)]
    if s.endswith("_ids"):
        return s[:-1]
    return s


def strip_role(name: str) -> str:
    """source_account -> account: the entity behind a role-prefixed name (unchanged without a prefix)."""
    for rp in ROLE_PREFIXES:
        if name.startswith(rp) and len(name) > len(rp):
            return name[len(rp):]
    return name


# --- words of a tool name -------------------------------------------------------------------------
# ingest makes colliding names unique with `_<6, 8, 10 or 16 hex>` (tasks.corpus.ingest): a tag, never a word.
_TAG = re.compile(r"^(?:[0-9a-f]{6}|[0-9a-f]{8}|[0-9a-f]{10}|[0-9a-f]{16})$")
_HEX_WORDS = frozenset({"decade", "facade", "accede", "efface", "deface", "beaded", "bedded", "beefed", "dabbed",
                        "deeded", "acceded", "defaced", "effaced", "defaced"})
_VERSION = re.compile(r"^v\d+$")


def is_tag(token: str) -> bool:
    """A dedupe tag (`90611a`, `aaeaef`) or hash suffix, not a word of the name."""
    return bool(_TAG.match(token)) and (any(c.isdigit() for c in token) or token not in _HEX_WORDS)


def strip_tag(name: str) -> str:
    """weather_forecast_90611a -> weather_forecast: the name without ingest's dedupe tag."""
    parts = str(name).split("_")
    while len(parts) > 1 and is_tag(parts[-1].lower()):
        parts.pop()
    return "_".join(parts)


@lru_cache(maxsize=1 << 16)
def name_tokens(name: str) -> tuple[str, ...]:
    """The words of a tool or parameter name: snake_case tokens without dedupe tags, version
    tokens (v2) and bare numbers (Movies_3_FindMovies -> movies, find, movies)."""
    return tuple(t for t in snake(strip_tag(name)).split("_")
                 if t and not is_tag(t) and not t.isdigit() and not _VERSION.match(t))


# --- ids ------------------------------------------------------------------------------------------
ID_SUFFIXES = ("_id", "_ids", "_uuid", "_uid")


def is_id_name(name: str) -> bool:
    """userId, order_id, vec_id, item_ids, id: a parameter or field that names an entity by its id."""
    s = snake(name)
    return s in ("id", "ids", "uuid") or (s.endswith(ID_SUFFIXES) and s not in ID_SUFFIXES)


def id_noun(name: str) -> str:
    """The entity an id names: source_account_id -> account, userIds -> user, id -> ''."""
    s = snake(name)
    for suf in ID_SUFFIXES:
        if s.endswith(suf) and len(s) > len(suf):
            return singular(strip_role(s[: -len(suf)]))
    return ""


# --- one entity, several words ---------------------------------------------------------------------
# Words that name one real-world thing inside a domain (a cinema's booking is its ticket and its
# reservation; a gym's member is its customer). Synthesis merges two of them when both occur in
# one domain, unless each is read by tools of its own (tasks.environments.entities).
SYNONYMS: tuple[frozenset[str], ...] = (
    frozenset({"booking", "reservation", "ticket", "appointment"}),
    frozenset({"user", "customer", "member", "client", "patron", "subscriber", "account_holder"}),
    frozenset({"order", "purchase"}),
    frozenset({"product", "item", "article"}),
    frozenset({"movie", "film"}),
    frozenset({"song", "track"}),
    frozenset({"medicine", "medication", "drug"}),
    frozenset({"car", "vehicle"}),
    frozenset({"house", "home", "property"}),
    frozenset({"doctor", "physician", "vet", "veterinarian"}),
    frozenset({"pet", "animal"}),
    frozenset({"loan", "borrowing", "checkout"}),
    frozenset({"show", "showtime", "screening", "showing"}),
)


# words that always name another entity: a login is a session
CANONICAL = {"login": "session", "logon": "session", "authentication": "session", "auth": "session",
             "signin": "session", "sign_in": "session", "login_status": "session"}


def synonyms(a: str, b: str) -> bool:
    """Whether two singular nouns (or their last words) name one thing by the SYNONYMS table."""
    ha, hb = a.split("_")[-1], b.split("_")[-1]
    return a != b and any((a in g or ha in g) and (b in g or hb in g) for g in SYNONYMS)
