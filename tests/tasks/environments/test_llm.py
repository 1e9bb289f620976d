"""LLM synthesizer: strict parsing, the static code check, the repair loop, fallback, and one real run.

Most tests use a *scripted* client (a list of canned reply texts): they are about our own loop
(parsing, feedback, round counting, fallback, report), not about a model's quality. Validation
always runs the generated code for real, in the sandboxed Environment; nothing generated is
imported or executed in the test process. The last test talks to the real local SmolLM2 server.
"""

from __future__ import annotations

import json

import pytest

from agentscaler.llm import ChatReply, LLMClient
from agentscaler.models import Tool
from agentscaler.workspace import Workspace
from envs.sandbox import unsafe_from_env
from envs.spec import ToolSpec
from tasks.environments.llm import synthesize_llm
from tasks.environments.llm_parse import StepError, extract_code, parse_rows, parse_tables, static_check
from tasks.environments.synthesis import SynthesisError
from tasks.environments.synthesize import synthesize_domain

UNSAFE = unsafe_from_env()


def T(name: str, props: dict, req: list[str], desc: str) -> Tool:
    return Tool(name=name, source_name=name, source="test", description=desc,
                parameters={"type": "object", "properties": props, "required": req}).with_id()


TOOLS = [
    T("get_user", {"user_id": {"type": "string"}}, ["user_id"], "Get a user's profile by id."),
    T("search_products", {"query": {"type": "string"}}, ["query"], "Search products by name."),
    T("place_order", {"user_id": {"type": "string"}, "product_id": {"type": "string"},
                      "quantity": {"type": "integer", "minimum": 1, "maximum": 3}},
      ["user_id", "product_id"], "Place an order of a product for a user."),
]
RECORD = {"domain": "dllmshop01", "tools": [t.id for t in TOOLS], "names": [t.name for t in TOOLS],
          "edges": [{"src": "search_products", "dst": "place_order", "kind": "dataflow", "weight": 1.0}]}
NAMES = [t.name for t in TOOLS]

TABLES = json.dumps({
    "tables": [
        {"name": "users", "primary_key": ["user_id"], "columns": [
            {"name": "user_id", "type": "text", "nullable": False}, {"name": "name", "type": "text"}]},
        {"name": "products", "primary_key": ["product_id"], "columns": [
            {"name": "product_id", "type": "text", "nullable": False}, {"name": "name", "type": "text"},
            {"name": "price", "type": "real"}]},
        {"name": "orders", "primary_key": ["order_id"], "columns": [
            {"name": "order_id", "type": "text", "nullable": False},
            {"name": "user_id", "type": "text", "foreign_key": "users.user_id"},
            {"name": "product_id", "type": "text", "foreign_key": "products.product_id"},
            {"name": "quantity", "type": "integer"}]}],
    "tools": [{"name": "get_user", "kind": "read"}, {"name": "search_products", "kind": "read"},
              {"name": "place_order", "kind": "write"}]})

GOOD_CODE = '''```python
from envs.toolkit import ToolError


def get_user(db, user_id):
    row = db.get("users", user_id=user_id)
    if row is None:
        raise ToolError(f"user {user_id} not found")
    return row


def search_products(db, query):
    return [p for p in db.select("products") if query.lower() in (p["name"] or "").lower()]


def place_order(db, user_id, product_id, quantity=1):
    if db.get("users", user_id=user_id) is None:
        raise ToolError(f"user {user_id} not found")
    if db.get("products", product_id=product_id) is None:
        raise ToolError(f"product {product_id} not found")
    return db.insert("orders", {"order_id": db.new_id("orders", "o"), "user_id": user_id,
                                "product_id": product_id, "quantity": quantity})
```'''
BUGGY_CODE = GOOD_CODE.replace('db.get("users", user_id=user_id)\n    if row', 'db.get("user", user_id=user_id)\n    if row')
ROWS = json.dumps({"rows": {
    "users": [{"user_id": "u1", "name": "Ada"}, {"user_id": "u2", "name": "Bo"}],
    "products": [{"product_id": "p1", "name": "Lamp", "price": 20.0}, {"product_id": "p2", "name": "Desk", "price": 90}],
    "orders": [{"order_id": "o1", "user_id": "u1", "product_id": "p1", "quantity": 1}]}})


class ScriptedClient:
    """A scripted stand-in for LLMClient.chat: returns the given texts in order (the test is
    about our loop, not the model). Records every request's messages."""

    def __init__(self, replies: list[str]):
        self.replies = list(replies)
        self.requests: list[list[dict]] = []

    async def chat(self, messages, **kwargs) -> ChatReply:
        self.requests.append(messages)
        text = self.replies.pop(0) if self.replies else "I cannot help with that."
        return ChatReply(content=text, raw={}, usage={"prompt_tokens": 100, "completion_tokens": 10},
                         latency_s=0.0, finish_reason="stop")


def _specs(kinds: dict[str, str]) -> list[ToolSpec]:
    return [ToolSpec(name=t.name, description=t.description, parameters=t.parameters, kind=kinds[t.name])
            for t in TOOLS]


# --- strict parsing ------------------------------------------------------------------------------
def test_parsing_is_strict_and_keeps_the_raw_text():
    tables, kinds = parse_tables(TABLES, NAMES)
    assert [t.name for t in tables] == ["users", "products", "orders"] and kinds["place_order"] == "write"
    prose = "Sure! Here is the schema:\n" + TABLES
    with pytest.raises(StepError) as e:
        parse_tables(prose, NAMES)
    assert e.value.raw == prose and "not valid JSON" in str(e.value)
    bad_fk = TABLES.replace('"users.user_id"', '"people.id"')
    with pytest.raises(StepError, match="foreign key 'people.id' names no column"):
        parse_tables(bad_fk, NAMES)
    with pytest.raises(StepError, match="tools without a kind"):
        parse_tables(TABLES.replace('{"name": "get_user", "kind": "read"}, ', ""), NAMES)

    assert "def get_user" in extract_code(GOOD_CODE)
    with pytest.raises(StepError, match="text outside the code block"):
        extract_code("Here you go:\n" + GOOD_CODE)
    with pytest.raises(StepError, match="found 0"):
        extract_code("def get_user(db, user_id):\n    return 1\n")
    with pytest.raises(StepError, match="found 2"):
        extract_code(GOOD_CODE + "\n" + GOOD_CODE)

    rows = parse_rows(ROWS, tables)
    assert len(rows["products"]) == 2
    with pytest.raises(StepError, match=r"orders\[0\].user_id='u9' is not in users.user_id"):
        parse_rows(ROWS.replace('"user_id": "u1", "product_id"', '"user_id": "u9", "product_id"'), tables)
    with pytest.raises(StepError, match="does not match the schema"):
        parse_rows(ROWS.replace('"quantity": 1', '"quantity": "one"'), tables)


# --- static check: generated code is compiled and walked, never run here ---------------------------
@pytest.mark.parametrize("snippet, expected", [
    ("import os\n\ndef get_user(db, user_id):\n    return os.system('id')\n", "import os is not allowed"),
    ("def get_user(db, user_id):\n    return open('/etc/passwd').read()\n", "use of open is not allowed"),
    ("def get_user(db, user_id):\n    return ().__class__.__bases__[0].__subclasses__()\n", "dunder attribute"),
    ("def get_user(db, user_id):\n    return eval('1+1')\n", "use of eval is not allowed"),
    ("def get_user(db, user_id):\n    return db.conn.execute('ATTACH DATABASE x AS y')\n", ".conn is not allowed"),
    ("from subprocess import run\n\ndef get_user(db, user_id):\n    return 1\n", "from subprocess import"),
    ("def get_user(db, user_id:\n    return 1\n", "syntax error line 1"),
    ("def get_user(db, uid):\n    return 1\n", "parameters ['user_id'] not accepted"),
])
def test_static_check_rejects_hostile_or_wrong_code(snippet, expected):
    spec = _specs({"get_user": "read", "search_products": "read", "place_order": "write"})[:1]
    problems = static_check(snippet, spec)
    assert any(expected in p for p in problems), problems


def test_static_check_accepts_contract_code_and_globals_alias():
    kinds = {"get_user": "read", "search_products": "read", "place_order": "write"}
    assert static_check(extract_code(GOOD_CODE), _specs(kinds)) == []
    odd = ToolSpec(name="get-time", description="x", parameters={"type": "object", "properties": {}}, kind="read")
    code = 'import datetime\n\ndef _tool_1(db):\n    return db.now()\n\nglobals()["get-time"] = _tool_1\n'
    assert static_check(code, [odd]) == []
    assert any("globals" in p for p in static_check("def f(db):\n    return globals()\n", []))


def test_generated_code_uses_only_ascii_identifiers():
    """Issue 22 class 8: Python folds identifiers (NFKC), so `ｇｅｔ_ｕｓｅｒ = ...` in generated code
    rebinds the tool `get_user` while reading as another name; a table named "users\\n" passed
    the identifier check (`$` matches before a final newline)."""
    kinds = {"get_user": "read", "search_products": "read", "place_order": "write"}
    code = extract_code(GOOD_CODE) + "\n\nｇｅｔ_ｕｓｅｒ = lambda db, user_id: {'user_id': 'forged'}\n"
    assert any("ASCII" in p for p in static_check(code, _specs(kinds)))
    odd = ToolSpec(name="note", description="x", kind="read",
                   parameters={"type": "object", "properties": {"ｔｉｔｌｅ": {"type": "string"}}})
    assert static_check("def note(db, **params):\n    return params.get('ｔｉｔｌｅ')\n", [odd]) == []
    for bad in ('"users\\n"', '"ｕｓｅｒｓ"'):
        with pytest.raises(StepError, match="identifier"):
            parse_tables(TABLES.replace('"users"', bad, 1), NAMES)


# --- the loop (scripted replies; validation runs for real in the sandbox) ---------------------------
def test_buggy_code_is_repaired_in_round_two():
    client = ScriptedClient([TABLES, BUGGY_CODE, ROWS, GOOD_CODE])
    syn = synthesize_llm("dllmshop01", TOOLS, record=RECORD, client=client, unsafe=UNSAFE)
    rep = syn.spec.report["synth_llm"]
    assert syn.spec.synthesizer == "llm" and rep["status"] == "ok" and rep["rounds"] == 2
    assert rep["llm_calls"] == 4 and rep["prompt_tokens"] == 400 and rep["completion_tokens"] == 40
    assert syn.spec.report["fallback"] is None
    assert rep["errors"][0]["step"] == "validate" and "get_user" in rep["errors"][0]["error"]
    assert "unknown table 'user'" in rep["errors"][0]["error"]
    # the repair request carried the previous code and the sandbox's error message
    repair = client.requests[3]
    assert repair[2]["role"] == "assistant" and 'db.get("user"' in repair[2]["content"]
    assert "unknown table 'user'" in repair[3]["content"]
    assert rep["last_validation"]["executes"] == 3 and rep["last_validation"]["writes_change_state"] == 1
    assert syn.tools_py == extract_code(GOOD_CODE) and syn.rows["users"][0]["user_id"] == "u1"
    assert [(e.src, e.dst) for e in syn.spec.edges] == [("search_products", "place_order")]


def test_always_bad_replies_fall_back_to_rules_with_the_reason():
    client = ScriptedClient(["not json at all"] * 3)
    syn = synthesize_llm("dllmshop01", TOOLS, record=RECORD, client=client, unsafe=UNSAFE,
                         config={"max_rounds": 3})
    rep = syn.spec.report["synth_llm"]
    assert syn.spec.synthesizer == "rules" and syn.spec.report["fallback"] == "rules"
    assert rep["status"] == "failed" and rep["rounds"] == 3 and len(rep["errors"]) == 3
    assert all(e["step"] == "tables" and e["raw"] == "not json at all" for e in rep["errors"])
    assert "no valid environment after 3 rounds" in syn.spec.report["fallback_reason"]
    assert "not valid JSON" in syn.spec.report["fallback_reason"]


def test_hostile_code_is_rejected_before_the_sandbox_and_the_domain_fails():
    hostile = "```python\nimport os\n\ndef get_user(db, user_id):\n    return os.system('cat /etc/passwd')\n```"
    client = ScriptedClient([TABLES, hostile, hostile])
    with pytest.raises(SynthesisError, match="import os is not allowed") as e:
        synthesize_llm("dllmshop01", TOOLS, record=RECORD, client=client, unsafe=UNSAFE,
                       config={"max_rounds": 2, "fallback": "fail"})
    assert e.value.report["rounds"] == 2 and e.value.report["llm_calls"] == 3  # rows never asked


def test_code_that_passes_the_ast_check_is_contained_by_the_sandbox():
    """ATTACH of a host file is refused by the sandboxed DB guard: the tool fails, the domain falls back."""
    sneaky = GOOD_CODE.replace('return [p for p in db.select("products")',
                               'db.execute("ATTACH DATABASE \'/etc/passwd\' AS x")\n    return [p for p in db.select("products")')
    client = ScriptedClient([TABLES, sneaky, ROWS])
    syn = synthesize_llm("dllmshop01", TOOLS, record=RECORD, client=client, unsafe=UNSAFE, config={"max_rounds": 1})
    rep = syn.spec.report["synth_llm"]
    assert syn.spec.report["fallback"] == "rules"
    assert rep["last_validation"]["failures"] == {"tool_error": 1}
    assert "search_products" in rep["errors"][0]["error"]


def test_synthesize_domain_writes_the_llm_environment(tmp_path):
    ws = Workspace(tmp_path / "ws")
    client = ScriptedClient([TABLES, GOOD_CODE, ROWS])
    spec = synthesize_domain(ws, RECORD, TOOLS, synth="llm", unsafe=UNSAFE, synth_options={"client": client})
    d = ws.domain_dir("dllmshop01")
    assert spec.synthesizer == "llm" and spec.report["executes"] == 3
    assert (d / "tools.py").read_text() == extract_code(GOOD_CODE) and (d / "seed.sqlite").exists()
    assert spec.report["synth_llm"]["rounds"] == 1


# --- the real local model ---------------------------------------------------------------------------
@pytest.mark.llm
def test_real_smollm2_run_completes_with_success_or_recorded_fallback(local_llm):
    """SmolLM2-135M mostly fails this job; the path must still end cleanly with a recorded outcome."""
    import asyncio

    client = LLMClient(local_llm, timeout=120)
    try:
        syn = synthesize_llm("dllmshop01", TOOLS[:2], record=RECORD, client=client, unsafe=UNSAFE,
                             config={"max_rounds": 1, "max_tokens_tables": 32, "max_tokens_code": 32,
                                     "max_tokens_rows": 32})
    finally:
        asyncio.run(client.aclose())
    rep = syn.spec.report["synth_llm"]
    assert rep["llm_calls"] >= 1 and rep["completion_tokens"] > 0 and rep["rounds"] == 1
    if syn.spec.synthesizer == "llm":
        assert rep["status"] == "ok" and syn.spec.report["fallback"] is None
    else:
        assert rep["status"] == "failed" and syn.spec.report["fallback"] == "rules"
        assert rep["errors"] and rep["errors"][0]["error"] and syn.spec.report["fallback_reason"]
