#!/usr/bin/env python3
"""Load generator for OpenAI-compatible servers (ours: `rwkv serve`; llama.cpp's
`llama-server`), standard library only so it runs on a bare GPU machine.

  python3 scripts/serve_bench.py streams --url http://127.0.0.1:8080 --streams 1,8,32,128
  python3 scripts/serve_bench.py turns   --url http://127.0.0.1:8080 [--conversations 32]

`streams`: N clients at once, each one streamed /v1/completions request (greedy,
`ignore_eos`, MAX_TOKENS tokens after a PROMPT_WORDS-word prompt): aggregate decode tok/s
(Σ tokens after each stream's first / the time from the first first-token to the last
end) and TTFT p50 / p99 (ms, from the request to the first streamed text); the clients run
on PROCS processes (threads of one process share Python's lock and fell behind the stream).
`turns`: a 10-turn chat (~115 new tokens a turn) through /v1/chat/completions: TTFT of
turn 1 and turn 10 alone, turn 10 with CONVERSATIONS chats interleaved, and turn 10
after the client edits its last message. Prints one JSON object per figure.
"""

import argparse
import http.client
import json
import multiprocessing
import statistics
import sys
import threading
import time
import urllib.parse

WORDS = ("the sea was calm and the ship moved slowly past the old harbour while the captain "
         "watched the grey clouds gather over the distant hills and thought of home").split()


def text(n_words, seed=0):
    return " ".join(WORDS[(seed * 7 + i) % len(WORDS)] for i in range(n_words))


def stream(url, path, body, key=None):
    """POSTs a streamed request; returns (ttft_s, end_s, n_tokens, text) from the start."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=3600)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    t0 = time.perf_counter()
    conn.request("POST", path, json.dumps({**body, "stream": True,
                                           "stream_options": {"include_usage": True}}), headers)
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"{path}: HTTP {r.status}: {r.read()[:300]!r}")
    ttft, n, usage, out = None, 0, None, []
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        j = json.loads(data)
        if j.get("error"):
            raise RuntimeError(f"{path}: error in the stream: {j['error']}")
        if j.get("usage"):
            usage = j["usage"]
        for c in j.get("choices", []):
            piece = c.get("text") or (c.get("delta") or {}).get("content") or ""
            if piece:
                out.append(piece)
                n += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
    end = time.perf_counter() - t0
    conn.close()
    if usage and usage.get("completion_tokens"):
        n = usage["completion_tokens"]
    return (ttft if ttft is not None else end), end, n, "".join(out), usage


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def _stream_group(a, ids, barrier, out):
    """Runs streams `ids` on threads of this process (after `barrier`), putting (i, result or
    error) on `out`. perf_counter is CLOCK_MONOTONIC: comparable across processes."""
    def one(i):
        body = {"model": a.model, "prompt": text(a.prompt_words, i), "max_tokens": a.max_tokens,
                "temperature": 0, "ignore_eos": True}
        barrier.wait()
        t = time.perf_counter()
        try:
            ttft, end, k, _, _ = stream(a.url, "/v1/completions", body, a.key)
            out.put((i, (t + ttft, t + end, k, ttft)))
        except Exception as e:  # noqa: BLE001
            out.put((i, repr(e)))

    th = [threading.Thread(target=one, args=(i,)) for i in ids]
    for t in th:
        t.start()
    for t in th:
        t.join()


def streams(a):
    # The clients spread over processes (threads of one Python process share its lock, and at
    # thousands of streamed tokens a second that lock, not the server, set the pace).
    ctx = multiprocessing.get_context("fork")
    for n in [int(x) for x in a.streams.split(",")]:
        procs = max(1, min(a.procs, n))
        barrier, out = ctx.Barrier(n), ctx.Queue()
        groups = [list(range(p, n, procs)) for p in range(procs)]
        ps = [ctx.Process(target=_stream_group, args=(a, g, barrier, out)) for g in groups]
        for p in ps:
            p.start()
        res, errs = [None] * n, []
        for _ in range(n):
            i, r = out.get()
            if isinstance(r, str):
                errs.append(r)
            else:
                res[i] = r
        for p in ps:
            p.join()
        if errs:
            print(json.dumps({"streams": n, "errors": errs[:3]}), flush=True)
            continue
        first = min(r[0] for r in res)
        last = max(r[1] for r in res)
        toks = sum(r[2] - 1 for r in res)
        ttfts = [r[3] * 1e3 for r in res]
        print(json.dumps({
            "figure": "streams", "streams": n, "max_tokens": a.max_tokens, "client_procs": procs,
            "agg_decode_tok_s": round(toks / max(last - first, 1e-9), 1),
            "agg_total_tok_s": round(sum(r[2] for r in res) / (last - min(r[0] - r[3] for r in res)), 1),
            "ttft_p50_ms": round(pct(ttfts, 50), 1), "ttft_p99_ms": round(pct(ttfts, 99), 1),
            "tokens": sum(r[2] for r in res),
        }), flush=True)


def chat_turns(a, tag, turns, record, edit=False):
    msgs = []
    for k in range(turns):
        msgs.append({"role": "user", "content": f"{tag} turn {k}: " + text(a.turn_words, k)})
        body = {"model": a.model, "messages": msgs, "max_tokens": a.reply_tokens,
                "temperature": 0}
        ttft, _, _, reply, usage = stream(a.url, "/v1/chat/completions", body, a.key)
        record(k, ttft, usage)
        msgs.append({"role": "assistant", "content": reply.strip()})
    if edit:
        msgs[-2] = {"role": "user", "content": f"{tag} edited: " + text(a.turn_words, 99)}
        body = {"model": a.model, "messages": msgs[:-1], "max_tokens": a.reply_tokens,
                "temperature": 0}
        ttft, _, _, _, usage = stream(a.url, "/v1/chat/completions", body, a.key)
        record("edit", ttft, usage)


def turns(a):
    alone = {}
    chat_turns(a, "alone", 10, lambda k, t, u: alone.__setitem__(k, (t, u)), edit=True)
    cached = lambda u: (u or {}).get("prompt_tokens_details", {}).get("cached_tokens")
    print(json.dumps({
        "figure": "turns_alone",
        "turn1_ttft_ms": round(alone[0][0] * 1e3, 1),
        "turn10_ttft_ms": round(alone[9][0] * 1e3, 1),
        "edit_ttft_ms": round(alone["edit"][0] * 1e3, 1),
        "turn10_prompt_tokens": (alone[9][1] or {}).get("prompt_tokens"),
        "turn10_cached_tokens": cached(alone[9][1]),
    }), flush=True)
    t10, t1 = [], []

    def run(i):
        def rec(k, t, u):
            if k == 0:
                t1.append(t)
            if k == 9:
                t10.append(t)
        chat_turns(a, f"conv{i}", 10, rec)

    th = [threading.Thread(target=run, args=(i,)) for i in range(a.conversations)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    print(json.dumps({
        "figure": "turns_interleaved", "conversations": a.conversations,
        "turn1_ttft_p50_ms": round(statistics.median(t1) * 1e3, 1),
        "turn10_ttft_p50_ms": round(statistics.median(t10) * 1e3, 1),
        "turn10_ttft_p99_ms": round(pct(t10, 99) * 1e3, 1),
    }), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["streams", "turns"])
    p.add_argument("--url", required=True)
    p.add_argument("--model", default="")
    p.add_argument("--key", default=None)
    p.add_argument("--streams", default="1,8,32,128")
    p.add_argument("--procs", type=int, default=16,
                   help="client processes the streams spread over (each runs its share on threads)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--prompt-words", type=int, default=32)
    p.add_argument("--conversations", type=int, default=32)
    p.add_argument("--turn-words", type=int, default=90, help="~115 tokens a user turn")
    p.add_argument("--reply-tokens", type=int, default=16)
    a = p.parse_args()
    {"streams": streams, "turns": turns}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
