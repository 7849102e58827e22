"""`rwkv serve` through the official `openai` Python package (pinned in requirements.txt):
chat (whole and streamed), completions, embeddings, logprobs, stop, seeds, and every error
status of docs/server.md. The server runs the bundled demo model on lavapipe."""

import json
import time
import urllib.error
import urllib.request

import numpy as np
import openai
import pytest

from conftest import load, DEMO
from server_support import Served

KEY = "test-key-123"


@pytest.fixture(scope="module")
def served():
    s = Served("--api-key", KEY, "--parallel", "8", "--max-tokens-cap", "512",
               "--max-prompt-tokens", "2000", "--max-body-bytes", "200000")
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served.base, api_key=KEY, max_retries=0, timeout=120)


def hi(text="Tell me about the sea."):
    return [{"role": "user", "content": text}]


def test_models_lists_the_served_model(client, served):
    ids = [m.id for m in client.models.list().data]
    assert ids == [served.model]
    assert client.models.retrieve(served.model).id == served.model


def test_chat_whole_and_streamed_agree(client, served):
    whole = client.chat.completions.create(
        model=served.model, messages=hi(), max_tokens=24, temperature=0)
    c = whole.choices[0]
    assert c.message.role == "assistant" and c.message.content
    assert c.finish_reason in ("stop", "length")
    u = whole.usage
    assert u.prompt_tokens > 0 and u.completion_tokens > 0
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    parts, finish, usage = [], None, None
    stream = client.chat.completions.create(
        model=served.model, messages=hi(), max_tokens=24, temperature=0, stream=True,
        stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            parts.append(ch.delta.content or "")
            finish = ch.finish_reason or finish
    assert "".join(parts) == c.message.content
    assert finish == c.finish_reason
    assert usage.completion_tokens == u.completion_tokens
    # The same prompt again: its state and logits came from the cache.
    assert usage.prompt_tokens_details.cached_tokens == u.prompt_tokens


def test_completions_continue_the_prompt_like_llama_cpp(client, served):
    # llama.cpp greedy-continues this prompt on the same file with " was gone."
    # (../shared/models/README.md).
    r = client.completions.create(
        model=served.model, prompt="It was a dark and stormy night, and the ship",
        max_tokens=3, temperature=0)
    assert r.choices[0].text == " was gone."
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 3


def test_embeddings_have_the_engines_shape_and_values(client, served):
    texts = ["The sea was calm.", "A letter came in the morning."]
    r = client.embeddings.create(model=served.model, input=texts)  # base64 by default
    got = np.array([d.embedding for d in r.data], dtype=np.float32)
    m = load(DEMO)
    want = np.asarray(m.embed(texts))
    assert got.shape == want.shape == (2, m.info["embd"])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    f = client.embeddings.create(model=served.model, input="x", encoding_format="float")
    assert len(f.data[0].embedding) == m.info["embd"]
    assert r.usage.prompt_tokens > 0


def test_logprobs_are_normalised_and_name_the_chosen_token(client, served):
    r = client.chat.completions.create(
        model=served.model, messages=hi(), max_tokens=6, temperature=0,
        logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for t in content:
        assert t.logprob <= 0
        assert len(t.top_logprobs) == 3
        # Greedy: the chosen token is the most likely one.
        assert t.top_logprobs[0].logprob == pytest.approx(t.logprob, abs=1e-6)
        assert bytes(t.bytes).decode("utf-8", "replace") == t.token
    text = "".join(t.token for t in content).strip()
    assert r.choices[0].message.content.startswith(text[:1])


def test_stop_strings_end_the_reply_before_them(client, served):
    base = client.completions.create(
        model=served.model, prompt="It was a dark and stormy night, and the ship",
        max_tokens=12, temperature=0).choices[0].text
    word = base.split()[1]
    r = client.completions.create(
        model=served.model, prompt="It was a dark and stormy night, and the ship",
        max_tokens=12, temperature=0, stop=[word])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == base[: base.index(word)]


def test_seed_makes_sampling_reproducible(client, served):
    def draw(seed):
        return client.chat.completions.create(
            model=served.model, messages=hi("Write about a horse."), max_tokens=20,
            temperature=1.0, top_p=0.9, seed=seed).choices[0].message.content
    a, b = draw(42), draw(42)
    assert a == b
    others = {draw(s) for s in (1, 2, 3)}
    assert len(others | {a}) > 1, "different seeds should not all give the same text"


def raw(served, path, body=None, key=KEY, method=None, timeout=300):
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    req = urllib.request.Request(served.url + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read() or b"{}")


def test_errors_have_openai_shape_and_status(client, served):
    chat = "/v1/chat/completions"
    ok = {"model": served.model, "messages": hi(), "max_tokens": 2}
    cases = [
        (b"{not json", 400, None),
        ({"messages": "hi"}, 400, "messages"),
        ({**ok, "temperature": 9}, 400, "temperature"),
        ({**ok, "top_p": -1}, 400, "top_p"),
        ({**ok, "max_tokens": 100000}, 400, "max_tokens"),
        ({**ok, "n": 3}, 400, "n"),
        ({**ok, "messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role"),
        ({**ok, "messages": hi("word " * 2500)}, 400, "messages"),
        ({**ok, "model": "gpt-4o"}, 404, "model"),
    ]
    for body, status, param in cases:
        code, _, j = raw(served, chat, body)
        assert code == status, (body, j)
        assert set(j["error"]) >= {"message", "type", "param", "code"}, j
        assert j["error"]["message"]
        if param:
            assert j["error"]["param"] == param, j
    # Missing and wrong key.
    for key in (None, "wrong"):
        code, _, j = raw(served, chat, ok, key=key)
        assert code == 401 and j["error"]["code"] == "invalid_api_key"
    # Over the body limit.
    code, _, j = raw(served, chat, {**ok, "pad": "x" * 300_000})
    assert code == 413 and j["error"]["type"] == "invalid_request_error"
    # The openai package raises its typed errors.
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=hi(), max_tokens=2)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=served.model, messages=hi(), max_tokens=0)
    bad = openai.OpenAI(base_url=served.base, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    # Unknown fields are ignored, as OpenAI does.
    code, _, j = raw(served, chat, {**ok, "some_future_field": {"a": 1}})
    assert code == 200, j
    code, _, j = raw(served, "/v1/nothing", ok)
    assert code == 404


def test_queue_full_is_429_with_retry_after():
    s = Served("--parallel", "1", "--max-queue", "1")
    try:
        import threading
        results = []

        def call():
            results.append(raw(s, "/v1/completions",
                               {"prompt": "Once", "max_tokens": 64, "ignore_eos": True,
                                "temperature": 0}, key=None))

        threads = [threading.Thread(target=call) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        codes = sorted(r[0] for r in results)
        assert 200 in codes and 429 in codes, codes
        for code, headers, j in results:
            if code == 429:
                assert headers.get("Retry-After") == "1" or headers.get("retry-after") == "1"
                assert j["error"]["type"] == "rate_limit_error"
    finally:
        assert s.stop() == 0


def test_health_needs_no_key_and_metrics_do(served):
    code, _, j = raw(served, "/health", key=None, method="GET")
    assert code == 200 and j == {"status": "ok"}
    code, _, j = raw(served, "/metrics", key=None, method="GET")
    assert code == 401 and j["error"]["code"] == "invalid_api_key"
    m = served.metrics(KEY)
    assert m['rwkv_requests_total{endpoint="/v1/chat/completions",status="200"}'] >= 1
    assert m["rwkv_prompt_tokens_total"] == m["rwkv_prefilled_tokens_total"] + m["rwkv_cached_tokens_total"]
    # The engine thread's time: busy ≥ its steps ≥ their forward passes; the conversation
    # cache's share (copies, spills, uploads) is within the busy time. The busy time is
    # counted at the end of each loop of the thread: read again until that loop is over.
    def settled(m):
        return m["rwkv_busy_seconds_total"] >= max(m["rwkv_step_seconds_sum"], m["rwkv_cache_seconds_total"])

    for _ in range(50):
        if settled(m):
            break
        time.sleep(0.1)
        m = served.metrics(KEY)
    assert settled(m), m
    assert m["rwkv_step_seconds_sum"] >= m["rwkv_forward_seconds_sum"] > 0
    assert m["rwkv_cache_seconds_total"] > 0
    # Every admitted request waited some time in the queue (counted once each).
    assert m["rwkv_queue_seconds_count"] >= m['rwkv_requests_total{endpoint="/v1/chat/completions",status="200"}']
    assert m["rwkv_queue_seconds_sum"] > 0
