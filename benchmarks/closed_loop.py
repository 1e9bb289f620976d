"""Closed loop on CPU: SmolLM2-135M pass^k on held-out scenarios before and after stage-1 SFT.

Builds a small workspace (default: the real BFCL corpus, a few small domains), evaluates the base
model (llama.cpp) on held-out scenarios, trains stage 1 on verified train-domain trajectories
(gold-replayed ones, labelled as such; optionally the base model's own verified rollouts), and
evaluates the checkpoint (agentscaler.hf_server) on the same scenarios with the same k.
Writes <ws>/reports/closed_loop.{md,json} and prints the markdown. See flows/closed_loop.py.

    .venv/bin/python benchmarks/closed_loop.py --workspace /tmp/cl [--k 2] [--heldout-scenarios 4] [--train-steps 30]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    from agentscaler.workspace import Workspace
    from flows.closed_loop import ClosedLoopConfig, closed_loop

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", required=True)
    ap.add_argument("--corpus", nargs="*", default=None, help="corpus names or paths (default: bfcl)")
    ap.add_argument("--k", type=int, default=None)
    ap.add_argument("--heldout-scenarios", type=int, default=None)
    ap.add_argument("--train-domains", type=int, default=None)
    ap.add_argument("--heldout-domains", type=int, default=None)
    ap.add_argument("--train-steps", type=int, default=None)
    ap.add_argument("--learning-rate", type=float, default=None)
    ap.add_argument("--collect-scenarios", type=int, default=None)
    ap.add_argument("--temperature", type=float, default=None)
    ap.add_argument("--threads", type=int, default=None, dest="torch_threads")
    a = vars(ap.parse_args())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ws = Workspace(a.pop("workspace"))
    cfg = ClosedLoopConfig(**{k: v for k, v in a.items() if v is not None})
    out = closed_loop(ws, cfg)
    print((ws.reports_dir / "closed_loop.md").read_text())
    print("JSON " + json.dumps({k: out[k] for k in ("baseline", "trained", "phases_s")}, default=str))


if __name__ == "__main__":
    main()
