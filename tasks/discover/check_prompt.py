"""Prompt of the LLM dependency check (tasks/discover/check.py)."""

SYSTEM = """You check the tool dependency graph of an API domain. A dependency src -> dst is real
when an output of src is a natural input of dst in one user task (e.g. search_products returns a
product_id that place_order needs), not merely when the two tools look alike. A tool does not
belong to the domain when it serves an unrelated purpose. Reply with one JSON object only."""

USER = """Domain tools (name: description; parameters):
{tools}

Candidate edges (index. src -> dst [kind]: why it was proposed):
{edges}

For every candidate edge say whether it is a real dependency, and list the tools that do not
belong to this domain, each with a short reason. Reply with one JSON object only:
{{"edges": [{{"index": 0, "real": true, "reason": "..."}}], "drop": [{{"name": "...", "reason": "..."}}]}}"""
