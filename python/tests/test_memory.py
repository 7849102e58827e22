"""`embed` of 1,000 texts does not grow the process's memory per call: the arrays handed
to numpy are freed with them, and the engine keeps no per-call buffers.

A leak of just the results (1,000 × C float32 per call, 0.5 MiB on the tiny model) over
20 calls would add 10 MiB; the bound is 3 MiB, for allocator noise."""

import gc

TEXTS = [f"Document {i}: notes on item {i * 7 % 101}, filed under {i % 13}." for i in range(1000)]
CALLS = 20
BOUND = 3 * 1024 * 1024


def rss() -> int:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    import os

    return pages * os.sysconf("SC_PAGE_SIZE")


def test_embed_1000_texts_does_not_grow_rss(tiny):
    for _ in range(3):  # warm up: pipelines, state slots, allocator pools
        e = tiny.embed(TEXTS)
    assert e.shape == (1000, tiny.info["embd"])
    del e
    gc.collect()
    before = rss()
    for _ in range(CALLS):
        e = tiny.embed(TEXTS)
        del e
    gc.collect()
    grown = rss() - before
    assert grown < BOUND, f"RSS grew by {grown / 1048576:.1f} MiB over {CALLS} calls"
