"""Multi-turn chats through the API (issue 28, item 3): each turn feeds only its new
message — the conversation's state comes from the cache — also with 32 conversations
interleaved on 4 running slots and the cache's GPU share so small that states spill to
host memory, and when the client edits its last message or regenerates a reply."""

import threading

import openai
import pytest

from server_support import Served

TURNS = 10


def turn(c, model, history, text, max_tokens=6):
    msgs = history + [{"role": "user", "content": text}]
    r = c.chat.completions.create(model=model, messages=msgs, max_tokens=max_tokens,
                                  temperature=0)
    reply = r.choices[0].message.content
    return msgs + [{"role": "assistant", "content": reply}], r.usage


def check_chat(c, model, tag, turns=TURNS, max_tokens=6):
    """A `turns`-turn chat with replies of `max_tokens`; every later turn's cached prefix is
    the whole previous turn but its last generated token (sampled, never fed). Returns the
    usages."""
    history, usages = [], []
    for k in range(turns):
        history, u = turn(c, model, history, f"{tag}: message number {k}, about the sea.",
                          max_tokens)
        if usages:
            p = usages[-1]
            assert u.prompt_tokens_details.cached_tokens == p.prompt_tokens + p.completion_tokens - 1, (
                tag, k, u, p)
        usages.append(u)
    return history, usages


def test_ten_turns_feed_only_the_new_message():
    s = Served("--parallel", "4")
    try:
        c = openai.OpenAI(base_url=s.base, api_key="-", max_retries=0, timeout=300)
        history, usages = check_chat(c, s.model, "solo")
        last, prev = usages[-1], usages[-2]
        new_message = last.prompt_tokens - prev.prompt_tokens - prev.completion_tokens
        assert last.prompt_tokens - last.prompt_tokens_details.cached_tokens == new_message + 1
        assert last.prompt_tokens_details.cached_tokens >= sum(
            u.completion_tokens for u in usages[:-1])

        # Regenerate the last reply: the whole prompt (state and logits) is cached.
        msgs = history[:-1]
        r = c.chat.completions.create(model=s.model, messages=msgs, max_tokens=6, temperature=0)
        assert r.usage.prompt_tokens_details.cached_tokens == r.usage.prompt_tokens
        assert r.choices[0].message.content == history[-1]["content"]

        # Edit the last user message: everything before it is reused.
        edited = history[:-2] + [{"role": "user", "content": "Something else entirely."}]
        r = c.chat.completions.create(model=s.model, messages=edited, max_tokens=6, temperature=0)
        assert r.usage.prompt_tokens_details.cached_tokens == prev.prompt_tokens + prev.completion_tokens - 1
    finally:
        assert s.stop() == 0, "".join(s.log)


# The suite's heaviest test: 320 turns, each a prefill and a decode step. On lavapipe
# (the CI's CPU Vulkan, 2 cores) a step of four sequences with their logits costs ≈ 0.4–0.7
# s, most of it the demo model's 65,536-row head, so replies are 2 tokens (every turn still
# feeds its reply's first token back through the cache) and the budget is 600 s.
@pytest.mark.timeout(600)
def test_32_conversations_interleaved_on_4_slots_keep_their_states():
    # 2 MiB of GPU cache: a few demo-model states; the rest live in host memory.
    s = Served("--parallel", "4", "--ctx-cache-gpu-mib", "2")
    try:
        errors = []

        def run(i):
            c = openai.OpenAI(base_url=s.base, api_key="-", max_retries=0, timeout=600)
            try:
                check_chat(c, s.model, f"conversation {i}", max_tokens=2)
            except Exception as e:  # noqa: BLE001 — reported below
                errors.append(f"{i}: {e!r}")

        threads = [threading.Thread(target=run, args=(i,)) for i in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(900)
        assert not errors, errors[:3]
        m = s.metrics()
        assert m["rwkv_cache_hits_total"] >= 32 * (TURNS - 1)
        assert m["rwkv_cache_spills"] > 0, "the GPU share should have overflowed to host memory"
        assert m["rwkv_cache_host_entries"] > 0
    finally:
        assert s.stop() == 0, "".join(s.log)
