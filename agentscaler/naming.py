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


def plural(word: str) -> str:
    """order -> orders, category -> categories, box -> boxes."""
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
