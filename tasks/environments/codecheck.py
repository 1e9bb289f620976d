"""The static check of LLM-written tool code: what it may spell, import, name and reach, decided from
its source and AST (the code is never run here).

A first layer only: whatever passes still runs only in the sandbox worker.
"""

from __future__ import annotations

import io
import tokenize


def non_ascii_names(code: str) -> list[str]:
    """Identifiers spelled with anything but ASCII. The AST cannot show them (the parser folds
    identifiers, NFKC: `ｇｅｔ_ｕｓｅｒ` *is* `get_user`), so the tokens are read."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.NAME and not tok.string.isascii():
                out.append(f"line {tok.start[0]}: identifier {tok.string!r} is not ASCII (Python reads it as another "
                           "name); use ASCII names, and read such a parameter from **params")
    except (tokenize.TokenError, SyntaxError) as exc:
        out.append(f"cannot read the code's names: {exc}")
    return out
