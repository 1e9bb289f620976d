"""Prompts of the LLM synthesizer (tasks/environments/llm.py): plan -> schema -> tool code -> seed rows, plus repair.

The plan is the rules' entity and verb contract (tasks.environments.contract): the entities to
make tables of and what each tool must do; the schema reply is checked against it.

Written for a capable model served by vLLM (JSON replies are constrained by a JSON Schema; code
comes back in one fenced block). Placeholders use str.format: doubled braces are literal.
"""

SYSTEM = """You build executable, verifiable tool environments backed by a SQLite database.
A domain is a set of API tools. You design ONE shared database schema for all of them, write
a Python implementation of every tool on top of that database, and seed it with realistic rows.
Follow the requested output format exactly: no prose around a JSON reply, and code only inside
one ```python fenced block."""

TABLES = """Domain: {name}
Tools (name, description, JSON-Schema parameters):
{tools}

The plan (one table per real-world noun; keep these table names and keys, add the columns the
tools read and write):
{entities}

Design the database schema shared by these tools and classify each tool.
- tables: the plan's tables (plural nouns, never verbs or codes), plus any others you need;
  snake_case names; columns typed as one of integer | real | text | boolean | json (json holds
  lists and objects); every table has a primary key (list of its column names); foreign_key is
  "table.column" or null, and only where a record belongs to another (an order to its user).
- Ids that tools receive or return (user_id, order_id, ...) are primary keys or foreign keys:
  the id a creating tool returns is the key every other tool takes for that entity.
- tools: every tool above exactly once, with kind "read" (only queries the state) or "write"
  (inserts, updates or deletes rows); the plan's kinds below follow the tools' verbs:
{kinds}
Reply with one JSON object only, shaped like this example (for other tools):
{{"tables": [{{"name": "users", "primary_key": ["user_id"], "columns": [
  {{"name": "user_id", "type": "text", "nullable": false, "foreign_key": null}},
  {{"name": "email", "type": "text", "nullable": true, "foreign_key": null}}]}},
 {{"name": "orders", "primary_key": ["order_id"], "columns": [
  {{"name": "order_id", "type": "text", "nullable": false, "foreign_key": null}},
  {{"name": "user_id", "type": "text", "nullable": false, "foreign_key": "users.user_id"}},
  {{"name": "items", "type": "json", "nullable": true, "foreign_key": null}}]}}],
 "tools": [{{"name": "get_user_details", "kind": "read"}}, {{"name": "cancel_order", "kind": "write"}}]}}"""

CODE = """Domain: {name}
Database schema (table: columns, primary key):
{schema}

Tools to implement (name, kind, parameters):
{tools}

What each tool must do (its action, the state moves it may make, what it takes or gives back):
{semantics}

Write tools.py following this contract exactly:
- `from envs.toolkit import ToolError` is the only import you need; you may also import
  {allowed}. Nothing else: no os, sys, subprocess, open(), eval, exec, network or files.
- One module-level function per tool, named exactly as the tool. First parameter is `db`,
  then the tool's parameters as keyword arguments; optional parameters have defaults (None).
  A tool whose name is not a Python identifier is written as `def _tool_1(db, ...)` followed by
  `globals()["the-tool-name"] = _tool_1`.
- `db` methods: get(table, **key) -> dict|None; select(table, where=None, order_by=None,
  limit=None) -> list[dict]; insert(table, row) -> dict; update(table, key, values) -> int;
  delete(table, key) -> int; query(sql, params=()) -> list[dict]; execute(sql, params=()) -> int;
  new_id(table, prefix) -> str; now() -> str. json columns are dicts/lists in Python.
- Raise ToolError("...") for the errors a real API gives: not found, wrong state (say which
  state it is in and which it must be in), not enough of a quantity or balance, invalid value.
  Return JSON-serializable values. A read tool never changes the database; a write tool changes
  it, and some read tool must show the change (return the changed record). Reads return the
  matching records (a search filters by the arguments given; an omitted optional filter matches
  everything). Computed fields (fees, totals, due dates) come from db.now(), never the real clock.
Example:
```python
from envs.toolkit import ToolError

def get_user_details(db, user_id):
    row = db.get("users", user_id=user_id)
    if row is None:
        raise ToolError(f"user {{user_id}} not found")
    return row
```
Reply with the complete tools.py in one ```python fenced block and nothing else."""

ROWS = """Domain: {name}
Database schema (table: columns, primary key, foreign keys):
{schema}

Write seed rows for every table: {n_rows} realistic, varied rows per table, ids consistent
across foreign keys (a foreign key value must exist in the referenced table), values of the
column's type (json columns hold lists or objects). Most records in a state the tools can act
on (e.g. active), some in others (e.g. cancelled), so both successes and wrong-state errors
occur; quantities and balances mostly positive, one at zero. Reply with one JSON object only:
{{"rows": {{"<table>": [{{"<column>": value}}]}}}}"""

REPAIR = """Your previous reply has problems:
{errors}
Reply again with the corrected, complete {what} in the same format as before (nothing else)."""
