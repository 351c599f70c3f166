"""Cache keys and `MemoryCache` (`workbench.llm.cache`), `DuckDBCache` (`workbench.store.model_cache`), and
the gateway's use of them."""

from __future__ import annotations

import asyncio
import json

import pytest
from llm_support import ENV_SECRET, MODEL, OPTION_SECRET, ask, bind

from workbench.llm import (
    CacheEntry,
    Gateway,
    MemoryCache,
    ProviderError,
    cache_key,
    key_material,
    split_options,
)
from workbench.store import DuckDBCache
from workbench.testing import Fault

pytest_plugins = ["llm_fixtures"]  # the gateway fixtures: litellm, server, gateway


def test_second_identical_call_is_a_cache_hit_without_requests(gateway, server):
    bound = bind(gateway, server)
    first = bound.complete(ask())
    second = bound.complete(ask())
    assert server.request_count == 1
    assert second.cache_hit and not first.cache_hit
    assert second.attempts == 0
    assert (second.text, second.input_tokens, second.output_tokens, second.cost_usd, second.finish_reason) == (
        first.text,
        first.input_tokens,
        first.output_tokens,
        first.cost_usd,
        first.finish_reason,
    )

    assert gateway.stats.cache_hits == 1 and gateway.stats.calls == 1


def test_parameters_are_in_the_key_transport_and_secrets_are_not(gateway, server):
    bind(gateway, server, temperature=0).complete(ask())
    bind(gateway, server, temperature=0.7).complete(ask())
    assert server.request_count == 2
    assert bind(gateway, server, temperature=0, timeout=17, api_key="sk-other-key").complete(ask()).cache_hit
    bind(gateway, server, temperature=0).complete(ask(), max_tokens=50)
    assert server.request_count == 3
    assert server.requests[-1]["max_tokens"] == 50


def test_errors_are_never_cached(gateway, server):
    bound = bind(gateway, server, num_retries=0)
    server.script(Fault.error(500))
    with pytest.raises(ProviderError):
        bound.complete(ask())
    result = bound.complete(ask())
    assert not result.cache_hit and server.request_count == 2
    assert bound.complete(ask()).cache_hit


def test_the_endpoint_is_part_of_the_key(gateway, server):
    """`openai/<name>` at two endpoints may be two models: each endpoint's answer is its own."""
    from workbench.testing import FakeOpenAI

    server.responder = lambda body: "answer from A"
    with FakeOpenAI(responder=lambda body: "answer from B") as other:
        at_a, at_b = bind(gateway, server), bind(gateway, other)
        assert at_a.complete(ask()).text == "answer from A"
        assert at_b.complete(ask()).text == "answer from B"
        assert at_b.cache_key(ask()) != at_a.cache_key(ask())
        assert [at_a.complete(ask()).text, at_b.complete(ask()).text] == ["answer from A", "answer from B"]
        assert bind(gateway, other, api_base=other.api_base + "/").complete(ask()).cache_hit
        assert server.request_count == other.request_count == 1


def test_the_endpoint_in_the_key_holds_no_credentials():
    material = key_material("m", ask(), {}, api_base="https://user:pw-SECRET@LLM.example.com:8443/v1/?key=SECRET#x")
    assert material["endpoint"] == "https://llm.example.com:8443/v1"
    assert "SECRET" not in json.dumps(material)
    assert "endpoint" not in key_material("m", ask(), {})  # the provider's default: keys as before
    assert cache_key("m", ask(), {}, api_base="http://a/v1") != cache_key("m", ask(), {}, api_base="http://b/v1")


def test_cache_false_bypasses_the_cache(gateway, server):
    bound = bind(gateway, server, cache=False)
    bound.complete(ask())
    assert not bound.complete(ask()).cache_hit
    assert server.request_count == 2


def test_duckdb_cache_serves_a_rerun_from_a_new_gateway(tmp_path, server):
    path = tmp_path / "wb.duckdb"
    with Gateway(DuckDBCache(path)) as first_gateway:
        bound = bind(first_gateway, server, temperature=0)
        first = [bound.complete(ask(f"question {i}")) for i in range(3)]
    requests = server.request_count
    with Gateway(DuckDBCache(path)) as second_gateway:
        bound = bind(second_gateway, server, temperature=0)
        again = [bound.complete(ask(f"question {i}")) for i in range(3)]
        batch = bound.complete_many([ask(f"question {i}") for i in range(3)])
        abatch = asyncio.run(bound.acomplete_many([ask(f"question {i}") for i in range(3)]))
    assert server.request_count == requests  # zero new model calls
    for old, new in zip(first, again, strict=False):
        assert new.cache_hit
        assert (new.text, new.input_tokens, new.output_tokens, new.finish_reason) == (
            old.text,
            old.input_tokens,
            old.output_tokens,
            old.finish_reason,
        )
    assert [c.text for c in batch] == [c.text for c in abatch] == [c.text for c in first]
    assert all(c.cache_hit for c in batch + abatch)


def test_duckdb_cache_write_behind_is_visible_before_flush_and_stored_after(tmp_path):
    cache = DuckDBCache(tmp_path / "c.duckdb", flush_interval=60)
    entry = CacheEntry("text", 3, 4, None, "length", 0.5)
    cache.put("k1", "m", {"model": "m"}, entry)
    assert cache.get("k1") == entry
    assert cache.get_many(["k1", "nope"]) == {"k1": entry}
    assert cache.flush() == 1
    assert cache.get("k1") == entry and len(cache) == 1
    cache.put("k1", "m", {"model": "m"}, CacheEntry("other"))
    cache.close()
    reopened = DuckDBCache(tmp_path / "c.duckdb", write_behind=False)
    assert reopened.get("k1") == entry  # the first response stored under a key wins
    reopened.close()


def test_memory_cache_roundtrip():
    cache = MemoryCache()
    entry = CacheEntry("t", 1, 2, 0.5, "stop", 0.1)
    cache.put("k", "m", {"model": "m"}, entry)
    assert cache.get("k") == entry and cache.get("x") is None
    assert cache.get_many(["k", "x"]) == {"k": entry} and len(cache) == 1


@pytest.mark.parametrize("kind", ["memory", "duckdb"])
def test_a_request_given_as_its_canonical_json_is_stored_like_the_mapping(tmp_path, kind):
    from workbench.llm.cache import canonical_json

    material = key_material("m", ask("naïve question"), {"max_tokens": 5}, repeat=2)
    entry = CacheEntry("t", 1, 2, None, "stop", 0.1)
    stored = []
    for name, request in (("as-mapping", material), ("as-json", canonical_json(material))):
        if kind == "memory":
            memory = MemoryCache()
            memory.put(name, "m", request, entry)
            stored.append(memory.requests[name])
        else:
            cache = DuckDBCache(tmp_path / f"{name}.duckdb", write_behind=False)
            cache.put(name, "m", request, entry)
            cache.close()
            from workbench.store import db

            connection = db.connect(tmp_path / f"{name}.duckdb")
            stored.append(connection.execute("SELECT request FROM llm_cache").fetchall()[0][0])
            connection.close()
    assert stored[0] == stored[1]
    assert (json.loads(stored[0]) if kind == "duckdb" else stored[0]) == json.loads(canonical_json(material))


def test_the_stored_request_is_the_text_its_key_hashes(tmp_path, server, monkeypatch):
    import hashlib

    monkeypatch.setenv("OPENAI_API_KEY", ENV_SECRET)
    path = tmp_path / "hashes.duckdb"
    with Gateway(DuckDBCache(path), num_retries=0) as gw:
        gw.model(MODEL, {"api_base": server.api_base}).complete(ask("what does the key hash?"))
    from workbench.store import db

    connection = db.connect(path)
    [(key, request)] = connection.execute("SELECT key, request FROM llm_cache").fetchall()
    connection.close()
    assert hashlib.sha256(request.encode()).hexdigest() == key


def test_api_keys_never_reach_the_database_file(tmp_path, server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", ENV_SECRET)
    path = tmp_path / "secrets.duckdb"
    with Gateway(DuckDBCache(path), num_retries=0) as gw:
        from_env = gw.model(MODEL, {"api_base": server.api_base})
        from_option = gw.model(
            MODEL,
            {"api_base": server.api_base, "api_key": OPTION_SECRET, "extra_headers": {"X-Api-Key": OPTION_SECRET}},
        )
        from_env.complete(ask("MARKER-from-env positive control"))
        from_option.complete(ask("MARKER-from-option positive control"))
        server.script(Fault.error(500))
        with pytest.raises(ProviderError):
            from_option.complete(ask("a failing call"))
    assert server.headers[0]["Authorization"] == f"Bearer {ENV_SECRET}"
    assert server.headers[1]["Authorization"] == f"Bearer {OPTION_SECRET}"
    files = list(tmp_path.iterdir())
    data = b"".join(f.read_bytes() for f in files)
    assert b"MARKER-from-env" in data and b"MARKER-from-option" in data  # the grep can see stored text
    assert b"SECRET" not in data
    from workbench.store import db

    connection = db.connect(path)
    requests = [json.loads(row[0]) for row in connection.execute("SELECT request FROM llm_cache").fetchall()]
    connection.close()
    assert len(requests) == 2  # the failed call was not stored
    assert all(set(r) == {"v", "model", "endpoint", "messages", "params", "repeat"} for r in requests)
    assert {r["endpoint"] for r in requests} == {server.api_base}
    assert not any("api_key" in json.dumps(r) or "extra_headers" in json.dumps(r) for r in requests)


def test_key_material_has_no_secrets_or_transport():
    options = {
        "temperature": 0,
        "api_key": "sk-abc-123456",
        "timeout": 3,
        "api_base": "http://x",
        "aws_secret_access_key": "abc",
        "max_tokens": 10,
        "concurrency": 4,
        "repeat": 1,
    }
    params, transport, own = split_options(options)
    assert params == {"temperature": 0, "max_tokens": 10}
    assert set(transport) == {"api_key", "timeout", "api_base", "aws_secret_access_key"}
    assert own == {"concurrency": 4, "repeat": 1}
    material = key_material("m", ask(), {**params, "api_key": "sk-abc-123456"}, repeat=1)
    assert "sk-abc" not in json.dumps(material)
    assert cache_key("m", ask(), params, 1) != cache_key("m", ask(), params, 0)


@pytest.mark.slow  # thousands of lookups from many threads
def test_duckdb_concurrent_lookups_share_queries_and_stay_correct(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    cache = DuckDBCache(tmp_path / "reads.duckdb", write_behind=False)
    for i in range(100):
        cache.put(f"k{i}", "m", {"i": i}, CacheEntry(f"text {i}", i, i + 1))
    with ThreadPoolExecutor(16) as pool:
        found = list(pool.map(cache.get, [f"k{i % 120}" for i in range(480)]))
    for i, entry in enumerate(found):
        if i % 120 < 100:
            assert entry is not None and entry.text == f"text {i % 120}" and entry.output_tokens == i % 120 + 1
        else:
            assert entry is None
    cache.close()


def test_a_preloaded_cache_answers_as_the_database_would_without_a_query(tmp_path, monkeypatch):
    path = tmp_path / "preloaded.duckdb"
    setup = DuckDBCache(path, write_behind=False)
    setup.put("stored", "m", {"n": 1}, CacheEntry("stored answer", 3, 4, 0.5, "stop", 0.25))
    setup.put("refused", "m", {"n": 2}, CacheEntry("", 1, 0))  # unusable: a later answer replaces it
    setup.close()

    plain, preloaded = DuckDBCache(path), DuckDBCache(path)
    assert preloaded.preload() == 2
    queries = []
    original = DuckDBCache._select
    monkeypatch.setattr(DuckDBCache, "_select", lambda self, keys: queries.append(self) or original(self, keys))
    puts = [
        ("stored", CacheEntry("a second answer"), False),  # the first usable answer wins
        ("refused", CacheEntry("a usable answer"), False),
        ("new", CacheEntry("new answer", 1, 2), False),
        ("new", CacheEntry("newer answer"), False),
        ("stored", CacheEntry("forced answer"), True),
    ]
    for key, entry, replace in puts:
        for cache in (plain, preloaded):
            cache.put(key, "m", {"key": key}, entry, replace=replace)
        plain.flush()
        for probe in ("stored", "refused", "new", "absent"):
            assert preloaded.get(probe) == plain.get(probe), (key, probe)
    keys = ["stored", "refused", "new", "absent"]
    assert preloaded.get_many(keys) == plain.get_many(keys)
    assert all(cache is plain for cache in queries) and queries
    for cache in (plain, preloaded):
        cache.close()


def test_a_cache_too_large_to_hold_is_not_preloaded_and_keeps_querying(tmp_path, monkeypatch):
    cache = DuckDBCache(tmp_path / "large.duckdb", write_behind=False)
    cache.put("k", "m", {"n": 1}, CacheEntry("x" * 50))
    queries = []
    select = DuckDBCache._select
    monkeypatch.setattr(DuckDBCache, "_select", lambda self, keys: queries.append(keys) or select(self, keys))
    monkeypatch.setattr(DuckDBCache, "PRELOAD_MAX_CHARS", 49)
    assert cache.preload() == 0
    assert cache.get("k") == CacheEntry("x" * 50) and queries == [["k"]]
    monkeypatch.setattr(DuckDBCache, "PRELOAD_MAX_CHARS", 50)
    assert cache.preload() == 1
    assert cache.get("k") == CacheEntry("x" * 50) and queries == [["k"]]
    cache.close()
