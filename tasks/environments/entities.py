"""Entities of a domain: one per real-world noun, shared by every tool that talks about it.

A tool's own noun comes from its words (the object of its verb in the description and in the
name, dedupe tags and namespaces dropped), its id parameters (`cancel_booking(booking_id)` acts
on a booking) and its output (`book_tickets` returning `booking_id` creates a booking). Across
the domain, nouns are then unified (`resolve`):
- the same word, singular or plural, is one entity;
- a compound and its head are one entity (`parking_session` and `session`), and a modifier that
  names another entity is a relation, not part of the name (`user_order` is an `order` of a `user`);
- synonyms (agentscaler.naming.SYNONYMS: booking / ticket / reservation, member / customer / user)
  are one entity unless each of them is read by tools of its own (a support ticket and a flight
  booking in one domain stay apart);
- the name kept is the one the tools' id parameters use (`booking` when tools take `booking_id`),
  else the most used one. Names are nouns: never verbs, dedupe tags or bare numbers.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from agentscaler.naming import id_noun, name_tokens, singular, synonyms
from tasks.environments.verbs import core_description, lemma

STOP = {"by", "for", "of", "the", "a", "an", "to", "from", "in", "on", "with", "all", "details", "detail", "info",
        "information", "data", "list", "id", "ids", "new", "my", "current", "existing", "specific", "given",
        "single", "multiple", "api", "using", "via", "and", "or", "into", "at", "per", "json", "based", "if",
        "exists", "available", "most", "top", "latest", "recent", "random", "one", "each", "any", "detailed",
        "specified", "selected", "particular", "certain", "several", "various", "some", "active", "open",
        "entire", "full", "complete", "basic", "simple", "custom", "nearby", "nearest", "closest", "best",
        "local", "online", "public", "private", "whole", "user's", "your", "their", "its", "this", "that",
        "these", "those", "two", "three", "list_of", "set", "number", "amount", "total", "about", "impl",
        "service", "manager", "handler", "helper", "util", "utils", "test", "default", "v", "request", "response",
        "endpoint", "operation", "action", "function", "tool", "method", "system", "paid", "provided", "get",
        "requests", "http", "https", "url_"}
GENERIC = {"record", "result", "entry", "item_data", "value", "values", "stat", "statistic", "summary", "report",
           "query", "search", "thing", "object", "content", "response"}
# attributes of a record, not records of their own (get_order_status reads an order)
ATTRS = {"price", "status", "balance", "name", "email", "address", "profile", "summary", "total", "rating",
         "score", "location", "phone", "description", "availability", "value", "password", "settings", "history",
         "count", "state", "level", "title", "type", "detail", "info", "stock", "cost", "fee", "rate", "time",
         "date", "duration", "capacity", "size", "quantity", "usage", "stats"}
# verbs that are never nouns of an API (a leftover verb word is dropped from a noun phrase)
PURE_VERBS = {"get", "fetch", "retrieve", "find", "lookup", "create", "add", "update", "delete", "remove", "set",
              "make", "do", "perform", "execute", "run", "show", "view", "display", "calculate", "compute",
              "estimate", "convert", "modify", "edit", "change", "cancel", "stop", "end", "start", "extend",
              "renew", "book", "buy", "purchase", "send", "put", "post_", "list", "search", "locate", "generate",
              "provide", "return", "obtain", "determine", "identify", "analyze", "analyse", "predict", "validate",
              "verify", "check", "is", "has", "can", "enable", "disable", "toggle"}
PREPS = {"by", "for", "of", "from", "in", "on", "with", "to", "at", "into", "between", "within", "based", "using",
         "via", "and", "or", "that", "which", "including", "given", "per", "across", "against", "about", "under",
         "over", "near", "around", "after", "before", "during", "if", "when", "where", "whose", "as", "than",
         "such", "while", "so", "both", "either"}
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")


def _clean(words: list[str]) -> list[str]:
    """Nouns of a phrase: cut at the first preposition, no stop words, verbs or numbers, singular."""
    out: list[str] = []
    for w in words:
        w = w.lower().strip("-")
        if w in PREPS and out:
            break
        if w.endswith("'s") or w.endswith("s'"):  # "the pharmacy's medications": the owner, not the noun
            continue
        if not w or w in STOP or w in PREPS or w.isdigit() or len(w) < 2:
            continue
        s = singular(w)
        if s in STOP:
            continue
        out.append(s)
    return out


def _trim(nouns: list[str]) -> str:
    """The last two nouns as a name; a trailing attribute is dropped when a noun precedes it."""
    nouns = [n for n in nouns if n not in PURE_VERBS] or nouns
    while len(nouns) > 1 and nouns[-1] in ATTRS:
        nouns = nouns[:-1]
    return "_".join(nouns[-2:])


def name_phrase(name: str, verb: str) -> str:
    """The noun of a tool name: the words after its verb (`verb`: the name's own), up to a
    preposition (before the verb when nothing follows it: todo_delete). Tags, namespaces and stop
    words are dropped."""
    words = list(name_tokens(name))
    idx = next((i for i, w in enumerate(words) if verb and (w == verb or lemma(w) == verb or
                                                            "_".join(words[i:i + 2]) == verb)), -1)
    rest = words[idx + 1 + verb.count("_"):] if idx >= 0 else words
    nouns = _clean(rest)
    if not nouns and idx > 0:
        nouns = _clean(words[:idx])
    return _trim(nouns)


def description_phrase(description: str | None, verb: str) -> str:
    """The object of the description's lead verb ("Stop an active parking session" -> parking_session)."""
    first = re.split(r"(?<=[a-z0-9)])\.\s|\n", core_description(description), maxsplit=1)[0]
    words = [w.lower() for w in _WORD.findall(first)][:24]
    idx = next((i for i, w in enumerate(words[:9]) if verb and lemma(w) == verb.split("_")[0]), -1)
    if idx < 0:
        return ""
    rest = words[idx + 1 + verb.count("_"):]
    if rest and rest[0] in ("for", "to", "up", "out", "in"):  # "Search for lawsuits", "Look up a user"
        rest = rest[1:]
    for lead in ("list", "details", "information", "info", "data", "number", "set", "history", "status",
                 "summary", "count", "amount", "total"):  # "a list of stock symbols" -> stock symbols
        for j, w in enumerate(rest[:4]):
            if w == lead and j + 1 < len(rest) and rest[j + 1] == "of":
                if lead in ATTRS or lead in ("list", "details", "information", "info", "data", "set"):
                    rest = rest[j + 2:]
                break
    return _trim(_clean(rest))


def output_noun(returns: dict[str, Any] | None, params: set[str]) -> str:
    """The entity an output names as its own: a `<noun>_id` property the parameters do not hold."""
    if not isinstance(returns, dict):
        return ""
    props = returns.get("properties")
    if returns.get("type") == "array" and isinstance(returns.get("items"), dict):
        props = returns["items"].get("properties")
    if not isinstance(props, dict):
        return ""
    ids = [id_noun(k) for k in props if id_noun(k) and k not in params]
    return ids[0] if len(ids) == 1 else ""


def head(name: str) -> str:
    return name.split("_")[-1]


class Unifier:
    """Union-find over entity names, with the canonical name of each group (module docstring)."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.uses: Counter = Counter()  # name -> tools whose own entity it is
        self.id_uses: Counter = Counter()  # name -> id parameters naming it
        self.creators: set[str] = set()  # names some tool creates
        self.listed: set[str] = set()  # names some tool searches or lists

    def add(self, name: str, *, own: bool = False, id_param: bool = False, created: bool = False,
            listed: bool = False) -> None:
        if not name:
            return
        self.parent.setdefault(name, name)
        self.uses[name] += own
        self.id_uses[name] += id_param
        if created:
            self.creators.add(name)
        if listed:
            self.listed.add(name)

    def find(self, name: str) -> str:
        root = name
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while self.parent.get(name, name) != root:
            self.parent[name], name = root, self.parent[name]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def resolve(self) -> dict[str, str]:
        """name -> canonical entity name of its group."""
        names = sorted(self.parent)
        words = {n: n.split("_") for n in names}
        # a modifier naming another entity is a relation: user_order -> order (when order or user is known)
        singles = {n for n in names if "_" not in n}
        for n in names:
            ws = words[n]
            if len(ws) > 1 and ws[0] in singles and ws[0] != ws[-1] and (ws[-1] in singles or ws[-1] not in ATTRS):
                self.add(ws[-1])
                self.union(n, ws[-1])
        names = sorted(self.parent)
        words = {n: n.split("_") for n in names}
        # a compound and its head (or a compound containing another's words, same head): one entity
        by_head: dict[str, list[str]] = {}
        for n in names:
            by_head.setdefault(words[n][-1], []).append(n)
        for h, group in by_head.items():
            for a in group:
                for b in group:
                    if a < b and (set(words[a]) <= set(words[b]) or set(words[b]) <= set(words[a])):
                        self.union(a, b)
        # synonyms: merged unless both sides are read on their own (a support ticket and a flight booking)
        roots = sorted({self.find(n) for n in names})
        members: dict[str, list[str]] = {}
        for n in names:
            members.setdefault(self.find(n), []).append(n)

        def standalone(r: str) -> bool:
            return any(m in self.listed for m in members[r])

        for a in roots:
            for b in roots:
                if a < b and self.find(a) != self.find(b) and any(synonyms(x, y) for x in members[a]
                                                                   for y in members[b]):
                    if not (standalone(a) and standalone(b)):
                        self.union(a, b)
        groups: dict[str, list[str]] = {}
        for n in names:
            groups.setdefault(self.find(n), []).append(n)
        out: dict[str, str] = {}
        for root, ms in groups.items():
            # the id parameters' word first (tools take booking_id: a booking), then the most used, then short
            best = max(ms, key=lambda m: (self.id_uses[m], "_" not in m and self.id_uses[m] > 0, self.uses[m],
                                          -len(m), m))
            for m in ms:
                out[m] = best
        return out
