"""Tool vectors: the fast static embedding, the MiniLM embedding (loaded once) and the on-disk cache."""

from __future__ import annotations

import numpy as np
import pytest

from agentscaler.models import Tool
from tasks.discover.embed import (EmbeddingCache, FastEmbedder, description_text, embed_tools, get_embedder, model_dir,
                                  param_texts, split_name)


def tool(name: str, desc: str, params: dict | None = None, required: list[str] | None = None) -> Tool:
    props = {k: {"type": "string", "description": v} for k, v in (params or {}).items()}
    return Tool(name=name, source_name=name, source="test", description=desc,
                parameters={"type": "object", "properties": props, "required": required or list(props)}).with_id()


FLIGHT = tool("book_flight", "Book a flight reservation for a passenger.",
              {"flight_number": "The flight number such as HAT001", "cabin": "Cabin class: economy or business"})
FLIGHT2 = tool("cancel_flight_reservation", "Cancel a passenger's flight reservation.",
               {"reservation_id": "The flight reservation id", "reason": "Why the passenger cancels"})
FILES = tool("list_directory", "List the files in a directory of the file system.",
             {"path": "Directory path to list", "show_hidden": "Whether to show hidden files"})


def test_split_name_and_texts():
    assert split_name("getUserDetails") == "get user details"
    assert split_name("get_user-details") == "get user details"
    assert param_texts(FLIGHT)[0].startswith("flight number (string): The flight number")
    assert description_text(FILES).startswith("list directory: List the files")


def test_model_folder_is_found_offline():
    assert (model_dir() / "model.safetensors").exists()


def test_fast_vectors_are_unit_and_meaningful():
    vecs, stats = embed_tools([FLIGHT, FLIGHT2, FILES], "fast")
    assert vecs.shape == (3, get_embedder("fast").dim) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2] + 0.1  # two flight tools are closer than flight vs files
    assert stats["tools"] == 3 and stats["embedding"] == "fast"
    again, _ = embed_tools([FLIGHT, FLIGHT2, FILES], "fast")
    assert np.array_equal(vecs, again)  # deterministic


def test_fast_text_embedding_handles_empty_and_stopword_texts():
    emb = get_embedder("fast")
    assert isinstance(emb, FastEmbedder)
    out = emb.embed(["", "the of a", "flight reservation"])
    assert np.allclose(out[0], 0) and np.allclose(out[1], 0)  # nothing to embed: a zero vector, not NaN
    assert abs(np.linalg.norm(out[2]) - 1) < 1e-5


def test_bad_input_no_params_empty_corpus_one_tool():
    bare = Tool(name="ping", source_name="ping", source="test", description="Check that the service answers.",
                parameters={"type": "object", "properties": {}}).with_id()
    weird = Tool(name="x", source_name="x", source="test", description="", parameters={}).with_id()
    vecs, stats = embed_tools([bare, weird], "fast")
    assert stats["no_params"] == 2 and np.isfinite(vecs).all()
    assert abs(np.linalg.norm(vecs[0]) - 1) < 1e-5  # description alone still gives a vector
    empty, st = embed_tools([], "fast")
    assert empty.shape == (0, get_embedder("fast").dim) and st["tools"] == 0
    one, _ = embed_tools([FLIGHT], "fast")
    assert one.shape[0] == 1 and np.isfinite(one).all() and np.linalg.norm(one) > 0.99


def test_unknown_embedding_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown embedding 'bert'"):
        get_embedder("bert")


def test_cache_round_trip(tmp_path):
    cache = EmbeddingCache(tmp_path / "c.sqlite", dim=4)
    v = np.asarray([0.5, -0.25, 0.125, 1.0], np.float32)
    cache.put_many({"k1": v})
    got = cache.get_many(["k1", "missing"])
    assert list(got) == ["k1"] and np.allclose(got["k1"], v)
    cache.close()


@pytest.fixture(scope="module")
def minilm():
    return get_embedder("minilm")  # loads once for the module (a few seconds)


def test_minilm_embeds_and_caches_by_text(minilm, tmp_path):
    tools = [FLIGHT, FLIGHT2, FILES]
    vecs, stats = embed_tools(tools, "minilm", cache_dir=tmp_path)
    assert stats["embedded"] == stats["unique"] and stats["cached"] == 0
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2]
    again, stats2 = embed_tools(tools, "minilm", cache_dir=tmp_path)
    assert stats2["embedded"] == 0 and stats2["cached"] == stats["unique"]  # nothing re-embedded
    assert np.allclose(vecs, again, atol=2e-3)  # float16 storage
    new = tool("get_weather", "Current weather in a city.", {"city": "City name"})
    _, stats3 = embed_tools([*tools, new], "minilm", cache_dir=tmp_path)
    assert stats3["embedded"] == 2  # only the new tool's description and parameter
    assert (tmp_path / "embeddings-minilm.sqlite").exists()
