"""States: fork, save/load, to_numpy, prefill after a state, logits after a state."""

import gc

import numpy as np

import rwkv_studio


def test_save_load_round_trip(tiny, tmp_path):
    st = tiny.prefill("The quick brown fox")
    p = tmp_path / "fox.rwkvstate"
    st.save(p)
    back = rwkv_studio.State.load(tiny, p)
    assert back.tokens == st.tokens == len(tiny.tokenize("The quick brown fox"))
    for a, b in zip(st.to_numpy(), back.to_numpy()):
        np.testing.assert_array_equal(a, b)


def test_shapes(tiny):
    i = tiny.info
    att, kv, ffn = tiny.prefill("Hi").to_numpy()
    L, C, H, N = i["layers"], i["embd"], i["heads"], i["head_size"]
    assert att.shape == (L, C) and ffn.shape == (L, C) and kv.shape == (L, H, N, N)
    z = tiny.prefill("")
    assert z.tokens == 0
    assert all(not a.any() for a in z.to_numpy()), "the zero state is zero"


def test_fork_is_independent(tiny):
    a = tiny.prefill("One two")
    b = a.fork()
    before = a.to_numpy()
    c = tiny.prefill(" three", state=b)
    for x, y in zip(before, a.to_numpy()):
        np.testing.assert_array_equal(x, y)  # the parent is untouched
    assert c.tokens == a.tokens + len(tiny.tokenize(" three"))
    assert any(not np.array_equal(x, y) for x, y in zip(before, c.to_numpy()))


def test_prefill_after_a_state_equals_prefill_of_the_whole(tiny):
    # Same tokens fed in two calls or one: equal up to f32 summation order (one pass of
    # 4 tokens vs passes of 2 + 2), far below the peer tolerance of 1e-3.
    whole = tiny.prefill("One two three four")
    assert tiny.tokenize("One two") + tiny.tokenize(" three four") == tiny.tokenize(
        "One two three four"
    )
    parts = tiny.prefill(" three four", state=tiny.prefill("One two"))
    for x, y in zip(whole.to_numpy(), parts.to_numpy()):
        np.testing.assert_allclose(x, y, atol=1e-4)


def test_logits_after_a_state(tiny):
    ids = tiny.tokenize("One two three four")
    head = tiny.detokenize(ids[:2])
    assert tiny.tokenize(head) == ids[:2]
    full = tiny.logits(ids)
    st = tiny.prefill(head)
    tail = tiny.logits(ids[2:], state=st)
    np.testing.assert_allclose(tail, full[2:], atol=1e-3)
    assert st.tokens == 2  # untouched by logits()


GREEDY = dict(temperature=0.0, presence_penalty=0.0, frequency_penalty=0.0)


def test_a_stream_keeps_its_state_alive_after_del(tiny):
    """Issue 33, item 4: `del state` while a stream waits to run on it must not free the
    slot under the stream (which then ran on a freed slot, or on whichever new state took
    it). Deterministic: a busy stream holds the engine, so the second stream's worker is
    still waiting when its `State` dies."""
    st = tiny.prefill("The quick brown fox")
    want = tiny.generate(" jumps over", 8, state=st.fork(), **GREEDY)
    busy = tiny.generate("Hello", 100_000, seed=1, stream=True)
    next(busy)  # its worker is inside the engine now, holding it
    stream = tiny.generate(" jumps over", 8, state=st, stream=True, **GREEDY)
    del st
    gc.collect()
    busy.cancel()
    list(busy)  # the engine is free: only the second stream's worker wants it
    assert "".join(stream) == want
    assert stream.stats["generated_tokens"] == 8
