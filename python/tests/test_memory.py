"""`embed` of 1,000 texts does not grow the process's memory per call: the arrays handed
to numpy are freed with them, and the engine keeps no per-call buffers.

RSS is read after glibc's `malloc_trim(0)` has returned free heap pages to the system, so
it measures live memory rather than the allocator's slack (without the trim, results kept
alive were absorbed by free heap and barely showed). The texts are short (2-4 tokens) to
keep the test quick on lavapipe. A leak of just the results (1,000 × C float32 per call,
0.5 MiB on the tiny model) over 5 calls would add 2.5 MiB; the bound is 1 MiB."""

import ctypes
import gc
import os

TEXTS = [f"item {i}" for i in range(1000)]
CALLS = 5
BOUND = 1024 * 1024
LIBC = ctypes.CDLL("libc.so.6")


def rss() -> int:
    gc.collect()
    LIBC.malloc_trim(0)
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def test_embed_1000_texts_does_not_grow_rss(tiny):
    for _ in range(2):  # warm up: pipelines, state slots, allocator pools
        e = tiny.embed(TEXTS)
    assert e.shape == (1000, tiny.info["embd"])
    del e
    before = rss()
    after = []
    for _ in range(CALLS):
        e = tiny.embed(TEXTS)
        del e
        after.append(rss() - before)
    grown = after[-1]
    print("RSS growth after each call, KiB:", [a // 1024 for a in after])
    assert grown < BOUND, f"RSS grew by {grown / 1048576:.2f} MiB over {CALLS} calls: {after}"


def test_a_kept_result_is_visible_to_this_test(tiny):
    """The measurement can fail: keeping the results does grow RSS by about their size."""
    tiny.embed(TEXTS)
    before = rss()
    kept = [tiny.embed(TEXTS) for _ in range(3)]
    grown = rss() - before
    size = sum(k.nbytes for k in kept)
    assert grown > 0.8 * size, f"kept {size} bytes, RSS grew by {grown}"
