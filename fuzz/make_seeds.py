#!/usr/bin/env python3
"""Seed corpora for the fuzz targets (stdlib only): a complete mini RWKV-7 (2 layers, C=16, head size 8, vocab 8, FFN 32, ranks 4) as a GGUF with llama.cpp's names,
as SafeTensors with BlinkDL's names, and as a .pth (via tests/data/make_pth.py), so the
fuzzer starts from inputs that get through the readers *and* the mapping.

usage: fuzz/make_seeds.py   (writes fuzz/corpus/{gguf,safetensors_pth}/, gitignored, and the
                            committed seeds of the small readers and the server's requests,
                            fuzz/seeds/{state_file,npy,store,server_request}/)

Then (cargo install cargo-fuzz; RUSTC_BOOTSTRAP=1 lets stable rustc take -Zsanitizer):
  RUSTC_BOOTSTRAP=1 cargo fuzz run gguf -- -max_total_time=600
  RUSTC_BOOTSTRAP=1 cargo fuzz run safetensors_pth -- -max_total_time=600
"""
import json
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
L, C, N, V, F, R = 2, 16, 8, 8, 32, 4


def f16(n, seed):
    return struct.pack("<%de" % n, *[((i * 7 + seed) % 13 - 6) / 8 for i in range(n)])


def f32(n, seed):
    return struct.pack("<%df" % n, *[((i * 5 + seed) % 11 - 5) / 8 for i in range(n)])


def gguf():
    kv = [("general.architecture", 8, "rwkv7"), ("rwkv7.embedding_length", 4, C), ("rwkv7.block_count", 4, L),
          ("rwkv7.wkv.head_size", 4, N), ("rwkv7.feed_forward_length", 4, F),
          ("rwkv7.attention.decay_lora_rank", 4, R), ("rwkv7.attention.iclr_lora_rank", 4, R),
          ("rwkv7.attention.value_residual_mix_lora_rank", 4, R), ("rwkv7.attention.gate_lora_rank", 4, R)]
    t = [("token_embd.weight", [C, V], 1), ("token_embd_norm.weight", [C], 0), ("token_embd_norm.bias", [C], 0),
         ("output_norm.weight", [C], 0), ("output_norm.bias", [C], 0), ("output.weight", [C, V], 1)]
    for i in range(L):
        b = f"blk.{i}."
        t += [(b + n, [C], 0) for n in ("attn_norm.weight", "attn_norm.bias", "attn_norm_2.weight", "attn_norm_2.bias",
                                        "time_mix_w0.weight", "time_mix_a0.weight", "time_mix_v0.weight",
                                        "time_mix_k_k.weight", "time_mix_k_a.weight", "time_mix_r_k.weight",
                                        "time_mix_ln.weight", "time_mix_ln.bias", "channel_mix_lerp_k.weight")]
        t += [(b + "time_mix_lerp_fused.weight", [C, 1, 1, 6], 0)]
        for x in "wavg":
            t += [(b + f"time_mix_{x}1.weight", [C, R], 1), (b + f"time_mix_{x}2.weight", [R, C], 1)]
        t += [(b + f"time_mix_{m}.weight", [C, C], 1) for m in ("receptance", "key", "value", "output")]
        t += [(b + "channel_mix_key.weight", [C, F], 1), (b + "channel_mix_value.weight", [F, C], 1)]
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(t), len(kv)))
    for k, ty, v in kv:
        out += struct.pack("<Q", len(k)) + k.encode() + struct.pack("<I", ty)
        out += struct.pack("<Q", len(v)) + v.encode() if ty == 8 else struct.pack("<I", v)
    rel, blobs = 0, []
    for i, (name, ne, ty) in enumerate(t):
        n = 1
        for d in ne:
            n *= d
        data = f16(n, i) if ty == 1 else f32(n, i)
        out += struct.pack("<Q", len(name)) + name.encode() + struct.pack("<I", len(ne))
        out += struct.pack("<%dQ" % len(ne), *ne) + struct.pack("<IQ", ty, rel)
        blobs.append((rel, data))
        rel += (len(data) + 31) // 32 * 32
    out += b"\0" * (-len(out) % 32)
    base = len(out)
    for r, data in blobs:
        out += b"\0" * (base + r - len(out)) + data
    return bytes(out)


def safetensors():
    t = [("emb.weight", [V, C]), ("blocks.0.ln0.weight", [C]), ("blocks.0.ln0.bias", [C]),
         ("ln_out.weight", [C]), ("ln_out.bias", [C]), ("head.weight", [V, C])]
    for i in range(L):
        b = f"blocks.{i}."
        t += [(b + n, [C]) for n in ("ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "att.ln_x.weight", "att.ln_x.bias")]
        t += [(b + "att." + n, [1, 1, C]) for n in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g", "w0", "a0", "v0", "k_k", "k_a")]
        t += [(b + "att.r_k", [C // N, N]), (b + "ffn.x_k", [1, 1, C])]
        for x in "wavg":
            t += [(b + f"att.{x}1", [C, R]), (b + f"att.{x}2", [R, C])]
        t += [(b + f"att.{m}.weight", [C, C]) for m in ("receptance", "key", "value", "output")]
        t += [(b + "ffn.key.weight", [F, C]), (b + "ffn.value.weight", [C, F])]
    header, data, off = {"__metadata__": {"format": "pt"}}, bytearray(), 0
    for i, (name, shape) in enumerate(t):
        n = 1
        for d in shape:
            n *= d
        blob = f16(n, i)
        header[name] = {"dtype": "F16", "shape": shape, "data_offsets": [off, off + len(blob)]}
        data += blob
        off += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + bytes(data)


def state_file(n_layer, n_embd, n_head, head_size, tokens, seed):
    """A valid .rwkvstate (docs/state-format.md): 128-byte header, then f32 values."""
    import hashlib
    n = n_layer * (2 * n_embd + n_head * head_size * head_size)
    data = f32(n, seed)
    h = bytearray(128)
    h[0:8] = b"RWKVSTAT"
    struct.pack_into("<II", h, 8, 1, 128)
    h[16:48] = bytes(range(seed, seed + 32))
    struct.pack_into("<IIIIIIQQ", h, 48, 1, n_layer, n_embd, n_head, head_size, 0, tokens, n)
    h[88:120] = hashlib.sha256(data).digest()
    return bytes(h) + data


def npy(shape, major=1):
    """A little-endian f32 C-order .npy (NumPy format.py), version `major`."""
    dims = "(%d,)" % shape[0] if len(shape) == 1 else "(" + ", ".join(str(d) for d in shape) + ")"
    head = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % dims
    pre = 10 if major == 1 else 12
    head += " " * (-(pre + len(head) + 1) % 64) + "\n"
    n = 1
    for d in shape:
        n *= d
    size = struct.pack("<H", len(head)) if major == 1 else struct.pack("<I", len(head))
    return b"\x93NUMPY" + bytes([major, 0]) + size + head.encode() + f32(n, len(shape))


STEM = "00000000000000010000"  # the id the `store` target checks names against


def store_seeds():
    """App store files (src-tauri/src/store/), each behind the target's kind byte."""
    settings = {"max_tokens": 200, "sampler": {"temperature": 1.0, "top_p": 0.85, "top_k": 0,
                                               "stop_strings": ["\n\n"], "seed": 7}}
    stats = {"prompt_tokens": 12, "generated_tokens": 5, "ttft_ms": 3.5, "prefill_ms": 2.25,
             "decode_ms": 10.0, "prefill_tok_s": 5333.3, "decode_tok_s": 500.0, "stop": "stop_string",
             "resumed": True}
    msgs = [{"id": "00000000000000020000", "role": "user", "text": "Hello \u00e9\u4e16", "created_ms": 1},
            {"id": "00000000000000030000", "role": "assistant", "text": " Hi.", "stats": stats,
             "model": "rwkv7-demo-6x256-Q4_K_M.gguf", "created_ms": 2}]
    chat = {"id": STEM, "title": "Hello", "created_ms": 1, "updated_ms": 2, "settings": settings,
            "document": {"id": "00000000000000040000", "name": "letter"}, "messages": msgs}
    empty = dict(chat, document=None, messages=[])
    doc = {"id": STEM, "name": "letter", "chars": 9, "tokens": 3, "prefill_ms": 1.5, "tok_s": 2000.0,
           "model": "m.gguf", "created_ms": 5, "preview": "A letter."}
    runs = [os.path.join(HERE, "..", "benchmarks", "runs", f)
            for f in sorted(os.listdir(os.path.join(HERE, "..", "benchmarks", "runs")))]
    history = []
    for r in runs:
        with open(r) as fh:
            v = json.load(fh)
        if isinstance(v, dict) and "figures" in v:
            history.append(v)
            break
    out = {"chat": b"\0" + json.dumps(chat, indent=2).encode(),
           "chat-empty": b"\0" + json.dumps(empty).encode(),
           "document": b"\1" + json.dumps(doc, indent=2).encode(),
           "history-empty": b"\2[]"}
    if history:
        out["history"] = b"\2" + json.dumps(history).encode()
    return out


def server_request_seeds():
    """Request bodies for the server's checks (crates/server/src/request.rs): valid ones for
    each endpoint, one that all three accept, and near-valid ones each refused for one
    reason. The target runs every input through chat, completions and embeddings."""
    user = {"role": "user", "content": "Hi there"}
    chat_full = {
        "model": "rwkv",
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "developer", "content": "Answer in English.\n\n\nPlease."},
                     {"role": "user", "content": [{"type": "text", "text": "Hello \u00e9\u4e16"},
                                                  {"type": "text"}]},
                     {"role": "assistant", "content": "Hello!"},
                     {"role": "tool", "name": "search", "content": "no results"},
                     {"role": "assistant", "content": None},
                     {"role": "user", "content": "And now?\r\n"}],
        "temperature": 0.7, "top_p": 0.9, "max_tokens": 50, "max_completion_tokens": 40,
        "stop": ["END", "\nUser:", ""], "seed": -3, "presence_penalty": 0.5, "frequency_penalty": -0.5,
        "n": 1, "top_k": 20, "min_p": 0.05, "penalty_decay": 0.996, "repetition_penalty": 1.1,
        "logprobs": True, "top_logprobs": 3, "response_format": {"type": "text"}, "tools": [],
        "stream": True, "stream_options": {"include_usage": True}, "user": "someone",
    }
    completion = {"model": "", "prompt": "Once upon a time", "max_tokens": 8, "echo": True, "logprobs": 2,
                  "stop": "\n", "stream": False, "temperature": 0, "top_p": 0, "suffix": ""}
    seeds = {
        "chat-full": chat_full,
        "chat-min": {"messages": [user]},
        "chat-parts-image": {"messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": "x"}}]}]},
        "chat-tools": {"messages": [user], "tools": [{"type": "function", "function": {"name": "f"}}]},
        "chat-json-format": {"messages": [user], "response_format": {"type": "json_object"}},
        "chat-top-logprobs-alone": {"messages": [user], "top_logprobs": 2},
        "chat-top-logprobs-21": {"messages": [user], "logprobs": True, "top_logprobs": 21},
        "chat-max-tokens-0": {"messages": [user], "max_tokens": 0},
        "chat-max-tokens-huge": {"messages": [user], "max_completion_tokens": 18446744073709551615},
        "chat-stops-5": {"messages": [user], "stop": ["a", "b", "c", "d", "e"]},
        "chat-stop-long": {"messages": [user], "stop": "x" * 300},
        "chat-unknown-role": {"messages": [{"role": "wizard", "content": "hi"}]},
        "chat-other-model": {"model": "gpt-4o", "messages": [user]},
        "chat-empty": {"messages": []},
        "chat-n-2": {"messages": [user], "n": 2},
        "chat-temperature-3": {"messages": [user], "temperature": 3},
        "completion-text": completion,
        "completion-tokens": {"prompt": [510, 11, 33, 65529], "max_tokens": 4, "logprobs": 5},
        "completion-token-lists": {"prompt": [[510, 11]], "stream": True,
                                   "stream_options": {"include_usage": False}},
        "completion-texts": {"prompt": ["Hello"], "n": 1, "seed": 1},
        "completion-several": {"prompt": ["a", "b"]},
        "completion-big-token": {"prompt": [65536, 70000]},
        "completion-empty": {"prompt": ""},
        "completion-suffix": {"prompt": "def f():", "suffix": "return 1"},
        "completion-logprobs-6": {"prompt": "a", "logprobs": 6},
        "embedding-text": {"model": "rwkv", "input": "The food was delicious.", "encoding_format": "float"},
        "embedding-texts-base64": {"input": ["one", "two", "three"], "encoding_format": "base64",
                                   "dimensions": 256},
        "embedding-tokens": {"input": [1, 2, 3]},
        "embedding-token-lists": {"input": [[1, 2], [3], [65535]]},
        "embedding-empty": {"input": []},
        "embedding-empty-input": {"input": [[1], []]},
        "embedding-bad-format": {"input": "x", "encoding_format": "int8"},
        "embedding-dimensions-7": {"input": "x", "dimensions": 7},
        # Accepted by all three: chat reads `messages`, completions `prompt`, embeddings `input`.
        "all-three": {"messages": [user], "prompt": "Hi", "input": "Hi", "max_tokens": 3},
    }
    out = {}
    for i, (name, body) in enumerate(seeds.items()):
        # Some compact, some indented: both shapes of JSON clients send.
        out[name] = json.dumps(body, indent=2 if i % 3 == 0 else None, ensure_ascii=i % 2 == 0).encode()
    out["truncated"] = json.dumps(chat_full).encode()[:200]
    out["not-json"] = b"messages=hi"
    return out


def small_seeds():
    seeds = {
        # A flag byte first (bit 0: the target fixes the checksum up), then the file.
        "state_file": {"l1-c8-h1-n8": b"\0" + state_file(1, 8, 1, 8, 3, 1),
                       "l2-c16-h2-n8": b"\1" + state_file(2, 16, 2, 8, 0, 2)},
        "npy": {"v1-3x4": npy([3, 4]), "v1-5": npy([5]), "v1-scalar": npy([]),
                "v2-2x2x2": npy([2, 2, 2], major=2)},
        "store": store_seeds(),
        "server_request": server_request_seeds(),
    }
    for target, files in seeds.items():
        d = os.path.join(HERE, "seeds", target)
        os.makedirs(d, exist_ok=True)
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as fh:
                fh.write(data)
            print(os.path.join(d, name), len(data))


def main():
    small_seeds()
    gdir = os.path.join(HERE, "corpus", "gguf")
    sdir = os.path.join(HERE, "corpus", "safetensors_pth")
    os.makedirs(gdir, exist_ok=True)
    os.makedirs(sdir, exist_ok=True)
    with open(os.path.join(gdir, "mini-rwkv7.gguf"), "wb") as fh:
        fh.write(gguf())
    st = os.path.join(sdir, "mini-rwkv7.safetensors")
    with open(st, "wb") as fh:
        fh.write(safetensors())
    make_pth = os.path.join(HERE, "..", "crates", "engine", "tests", "data", "make_pth.py")
    for dt in ("bf16", "f32"):
        subprocess.run([sys.executable, make_pth, st, os.path.join(sdir, f"mini-rwkv7-{dt}.pth"), "--dtype", dt],
                       check=True)
    for d in (gdir, sdir):
        for f in sorted(os.listdir(d)):
            print(os.path.join(d, f), os.path.getsize(os.path.join(d, f)))


if __name__ == "__main__":
    main()
