#!/usr/bin/env python3
"""Generates the World-tokenizer reference corpus used by crates/engine/tests/tokenizer.rs
and the benchmark (crates/engine/benches/tokenizer.rs).

Outputs, next to this script:
  tokenizer_corpus.jsonl.gz  one JSON object per line: {"kind", "text", "ids"}; about 1 MB
                             of mixed-language text (English, Chinese, Japanese, Russian,
                             Arabic, Korean and others, emoji, code, numbers, whitespace
                             runs, random vocabulary soup, random code points) with the ids
                             BlinkDL's TRIE_TOKENIZER gives each record.
  english_212.txt            an English document of exactly 212 tokens (benchmark input).

The reference is BlinkDL's `rwkv` pip package (0.8.32: `pip install --no-deps rwkv==0.8.32`;
torch is not needed, `rwkv_tokenizer.py` is loaded by path) with its own
rwkv_vocab_v20230424.txt. Deterministic: seeded RNG, text built from the fragments below
and from the vocabulary itself; rerunning gives the same bytes (gzip mtime fixed to 0).

Usage: python3 make_tokenizer_corpus.py
"""
import gzip
import importlib.util
import json
import os
import random
import unicodedata

import rwkv  # only to locate the package; its __init__ imports nothing heavy

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(rwkv.__file__)
TARGET_BYTES = 1_050_000
SEED = 20230424


def load_reference():
    spec = importlib.util.spec_from_file_location("rwkv_tokenizer", os.path.join(PKG, "rwkv_tokenizer.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.TRIE_TOKENIZER(os.path.join(PKG, "rwkv_vocab_v20230424.txt"))


ENGLISH = """The quick brown fox jumps over the lazy dog. RWKV is an RNN with transformer-level
performance, and it can be trained in parallel like a GPT. Its state is a fixed-size matrix
per head, so memory does not grow with the context. In 1905, Albert Einstein published four
papers that changed physics forever. She said, "Don't worry; it'll be fine." It wasn't.
Prices rose 3.5% in Q3 (year-over-year), according to the report's authors. Mr. O'Neil's
dog-friendly café opened on 5th Avenue at 9:30 a.m. on Monday. What is 2+2? It equals 4!
The committee's recommendations — published yesterday — were "unusually blunt". Please
read the README.md before running `cargo test --release`. E-mail us at help@example.com or
visit https://example.org/docs?page=2&lang=en#install for details. Isn't it strange that
the well-known, long-established, state-of-the-art methods sometimes fail?  Two spaces
after a period used to be common.   Three, even. HTTP/1.1 200 OK. COVID-19, GPT-4, iPhone,
McDonald's, naïve, coöperate, résumé, jalapeño, Zürich, São Paulo, Ångström.
Once upon a time, in a kingdom by the sea, there lived a princess who loved to read. Every
evening she climbed the tallest tower of the castle and opened a book she had never seen
before. The stars came out one by one, and the waves kept time below.""".split("\n")

CHINESE = """你好，世界！我们今天来测试一下中文分词：北京是中国的首都。
人工智能正在改变我们的生活方式，从智能手机到自动驾驶汽车，无处不在。
春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。
据统计，2023年全国粮食总产量达到6.95亿吨，比上年增长1.3%。
“你吃饭了吗？”他笑着问道。“还没有呢，”她回答，“我们一起去吧。”
深度学习模型需要大量的数据和计算资源；循环神经网络（RNN）在长序列上更高效。
上海、广州、深圳和杭州是中国经济最发达的城市之一。
这个问题很复杂，需要从多个角度进行分析，包括技术、经济和社会因素。""".split("\n")

JAPANESE = """吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。
東京タワーは、東京都港区芝公園にある総合電波塔です。高さは333メートルです。
スペースXの巨大ロケット「スターシップ」が打ち上げられた。
ありがとうございます！またお会いしましょう。コーヒーを一杯ください。
日本語の文章には、ひらがな、カタカナ、漢字が混在しています。
ｶﾀｶﾅの半角文字や、ＡＢＣのような全角英字も使われることがある。""".split("\n")

RUSSIAN = """Привет, мир! Как у тебя дела? Всё хорошо, спасибо.
Москва — столица России, крупнейший по численности населения город страны.
Война и мир — роман-эпопея Льва Николаевича Толстого, описывающий русское общество.
В 2024 году объём торговли вырос на 12,5 %, сообщает агентство.
Съешь же ещё этих мягких французских булок, да выпей чаю.
Нейронные сети обучаются на больших объёмах данных с помощью градиентного спуска.""".split("\n")

ARABIC = """مرحبا بالعالم! كيف حالك اليوم؟
اللغة العربية هي إحدى اللغات السامية، ويتحدث بها أكثر من ٤٠٠ مليون شخص.
القاهرة هي عاصمة جمهورية مصر العربية وأكبر مدنها.
بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ
تعلّم الآلة هو فرع من فروع الذكاء الاصطناعي.""".split("\n")

OTHER = """안녕하세요, 세계! 오늘 날씨가 정말 좋네요.
Γειά σου Κόσμε! Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.
नमस्ते दुनिया! भारत एक विशाल देश है।
สวัสดีชาวโลก ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ
שלום עולם! ירושלים היא עיר עתיקה.
Xin chào thế giới! Tiếng Việt có nhiều dấu thanh.
Merhaba dünya! Türkçe'de ğ, ş, ı ve İ harfleri vardır.
Zażółć gęślą jaźń. Příliš žluťoučký kůň úpěl ďábelské ódy.""".split("\n")

EMOJI = ["😀", "😂", "🥲", "👍", "👍🏽", "👍🏿", "❤️", "❤", "🇯🇵", "🇺🇸", "🇨🇳", "👨‍👩‍👧‍👦",
         "🧑‍💻", "🏳️‍🌈", "✨", "🔥", "🚀", "🎉", "☕", "🐍", "🦀", "™", "©", "✅", "❌",
         "👩🏻‍🔬", "🤷‍♂️", "1️⃣", "#️⃣", "🫠", "🪿", "\U0001F9EC", "\u2764\ufe0f\u200d\U0001F525"]

CODE = [
    'fn main() {\n\tlet x = 42;\n\tif x > 0 {\n\t\tprintln!("{}", x);\r\n\t}\n}\n',
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n\nprint([fib(i) for i in range(10)])\n",
    "#include <stdio.h>\n\nint main(void) {\n    for (int i = 0; i < 10; ++i) {\n        printf(\"%d\\n\", i * i);\n    }\n    return 0;\n}\n",
    "const add = (a, b) => a + b;\nexport default function App() {\n  return <div className=\"app\">{add(1, 2)}</div>;\n}\n",
    "SELECT id, name, COUNT(*) AS n\nFROM users u\nJOIN orders o ON o.user_id = u.id\nWHERE u.created_at >= '2024-01-01'\nGROUP BY id, name\nHAVING n > 5;\n",
    '{\n  "name": "rwkv",\n  "version": "0.8.32",\n  "tags": ["rnn", "llm"],\n  "size": 1.5e9,\n  "ok": true,\n  "none": null\n}\n',
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>Test &amp; more</title></head>\n<body>\n  <p>Hello&nbsp;world</p>\n</body>\n</html>\n",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do\n  wc -l \"$f\" | awk '{print $1}'\ndone 2>&1 | tee log.txt\n",
    "impl<T: Clone + Send> Iterator for Chunks<'_, T> {\n    type Item = Vec<T>;\n    fn next(&mut self) -> Option<Self::Item> { self.inner.next().map(|c| c.to_vec()) }\n}\n",
    "    // TODO(perf): avoid the copy\n    let v: Vec<u8> = buf[..n].iter().copied().collect::<Vec<_>>();\n\t\t\t// tabs\n",
    "x = {'a': [1, 2, 3], \"b\": (4, 5), 'c': {6}}  # dict\nassert x['a'][-1] == 3, f\"{x!r}\"\n",
    "diff --git a/src/lib.rs b/src/lib.rs\n@@ -1,3 +1,4 @@\n-use std::io;\n+use std::io::{self, Read};\n+\n pub mod tokenizer;\n",
]

WS_UNITS = [" ", "  ", "\t", "\n", "\r\n", "\n\n", "\u00a0", "\u3000", "\u2002", "\u200b", " \n", "\t\n"]


def vocab_by_script(ref):
    """Vocabulary entries that are valid text, grouped by the script of their letters."""
    groups = {}
    for idx, b in ref.idx2token.items():
        try:
            s = b.decode("utf-8")
        except UnicodeDecodeError:
            continue
        names = {unicodedata.name(ch, "?").split(" ")[0] for ch in s if not ch.isascii()}
        key = "ascii" if not names else (names.pop() if len(names) == 1 else "mixed")
        groups.setdefault(key, []).append(s)
    for v in groups.values():
        v.sort()
    return groups


def gen_sentences(rng, lines):
    out = []
    for _ in range(rng.randint(1, 6)):
        line = rng.choice(lines)
        if rng.random() < 0.3:  # cut mid-line, to vary boundaries
            a = rng.randrange(len(line))
            line = line[a:a + rng.randint(5, 80)]
        out.append(line)
    return rng.choice([" ", "\n", "\n\n", ""]).join(out)


def gen_words(rng, words, joiner, n_lo=5, n_hi=60):
    return joiner.join(rng.choice(words) for _ in range(rng.randint(n_lo, n_hi)))


def gen_numbers(rng):
    parts = []
    for _ in range(rng.randint(3, 30)):
        k = rng.randrange(9)
        if k == 0:
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 30))))
        elif k == 1:
            parts.append(f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 8)}f}")
        elif k == 2:
            parts.append(f"{rng.randint(1900, 2099)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}")
        elif k == 3:
            parts.append(f"0x{rng.getrandbits(rng.choice([8, 16, 32, 64])):x}")
        elif k == 4:
            parts.append(f"+{rng.randint(1, 99)} {rng.randint(100, 999)}-{rng.randint(1000, 9999)}")
        elif k == 5:
            parts.append(f"{rng.randint(0, 100)}%")
        elif k == 6:
            parts.append(f"{rng.random():.3e}")
        elif k == 7:
            parts.append(f"{rng.randint(0, 999):,}".replace(",", rng.choice([",", ".", " ", "_"])) * rng.randint(1, 3))
        else:
            parts.append("".join(rng.choice("０１２３４５６７８９٠١٢٣٤٥٦٧٨٩") for _ in range(rng.randint(1, 8))))
    return rng.choice([" ", ", ", "\n", "\t", " | "]).join(parts)


def gen_whitespace(rng):
    out = []
    for _ in range(rng.randint(1, 12)):
        if rng.random() < 0.3:
            out.append(" " * rng.randint(1, 300))
        elif rng.random() < 0.2:
            out.append(rng.choice("#-=*_~.") * rng.randint(2, 200))
        else:
            out.append("".join(rng.choice(WS_UNITS) for _ in range(rng.randint(1, 20))))
        out.append(rng.choice(["word", "x", "", "。", "end", "\u00e9"]))
    return "".join(out)


def gen_emoji(rng):
    return "".join(rng.choice(EMOJI) + rng.choice(["", "", " ", "\u200d", "\ufe0f", "!"]) for _ in range(rng.randint(1, 40)))


def gen_code(rng):
    snippet = rng.choice(CODE)
    if rng.random() < 0.5:
        snippet = snippet.replace("    ", rng.choice(["  ", "\t", "        "]))
    return snippet * rng.randint(1, 3)


def gen_random_codepoints(rng):
    blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF), (0x900, 0x97F),
              (0xE00, 0xE7F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x2000, 0x2BFF),
              (0x1F300, 0x1FAFF), (0x10000, 0x1007F), (0xE000, 0xE0FF), (0xFFF0, 0xFFFD)]
    out = []
    for _ in range(rng.randint(1, 80)):
        lo, hi = rng.choice(blocks)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def gen_chat(rng):
    turns = []
    for _ in range(rng.randint(1, 4)):
        q = gen_sentences(rng, rng.choice([ENGLISH, CHINESE, RUSSIAN]))
        a = gen_sentences(rng, rng.choice([ENGLISH, CHINESE, JAPANESE]))
        turns.append(f"User: {q.strip()}\n\nAssistant: {a.strip()}\n\n")
    return "".join(turns) + rng.choice(["User:", "Assistant:", ""])


def main():
    ref = load_reference()
    rng = random.Random(SEED)
    groups = vocab_by_script(ref)
    all_text_tokens = sorted(s for v in groups.values() for s in v)
    kinds = {
        "english": lambda: gen_sentences(rng, ENGLISH),
        "english_words": lambda: gen_words(rng, groups["ascii"], "", 20, 120),
        "chinese": lambda: gen_sentences(rng, CHINESE) if rng.random() < 0.5 else gen_words(rng, groups["CJK"], rng.choice(["", "，", "。"])),
        "japanese": lambda: gen_sentences(rng, JAPANESE) if rng.random() < 0.5 else gen_words(rng, groups["HIRAGANA"] + groups["KATAKANA"] + groups["CJK"], ""),
        "russian": lambda: gen_sentences(rng, RUSSIAN) if rng.random() < 0.5 else gen_words(rng, groups["CYRILLIC"], rng.choice([" ", ""])),
        "arabic": lambda: gen_sentences(rng, ARABIC) if rng.random() < 0.5 else gen_words(rng, groups["ARABIC"], rng.choice([" ", ""])),
        "other_scripts": lambda: gen_sentences(rng, OTHER) if rng.random() < 0.5 else gen_words(rng, groups["HANGUL"] + groups["GREEK"] + groups["THAI"] + groups["DEVANAGARI"] + groups["HEBREW"], ""),
        "emoji": lambda: gen_emoji(rng),
        "code": lambda: gen_code(rng),
        "numbers": lambda: gen_numbers(rng),
        "whitespace": lambda: gen_whitespace(rng),
        "chat": lambda: gen_chat(rng),
        "vocab_soup": lambda: gen_words(rng, all_text_tokens, "", 5, 80),
        "random_codepoints": lambda: gen_random_codepoints(rng),
    }
    names = sorted(kinds)
    records, total = [], 0
    while total < TARGET_BYTES:
        kind = rng.choice(names)
        text = kinds[kind]()
        # Occasionally glue two kinds together: script changes inside one record.
        if rng.random() < 0.15:
            text += rng.choice(["", " ", "\n"]) + kinds[rng.choice(names)]()
        if not text:
            continue
        ids = ref.encode(text)
        assert ref.decodeBytes(ids) == text.encode("utf-8")
        records.append({"kind": kind, "text": text, "ids": ids})
        total += len(text.encode("utf-8"))

    path = os.path.join(HERE, "tokenizer_corpus.jsonl.gz")
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
        for r in records:
            gz.write((json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8"))
    n_tok = sum(len(r["ids"]) for r in records)
    print(f"{path}: {len(records)} records, {total} bytes, {n_tok} tokens, {os.path.getsize(path)} bytes gzipped")

    # The 212-token English benchmark document: English lines in order until 212 tokens,
    # cut at a token boundary.
    doc = "\n".join(ENGLISH) + "\n"
    ids = ref.encode(doc)[:212]
    text = ref.decodeBytes(ids).decode("utf-8")
    assert ref.encode(text) == ids and len(ids) == 212, len(ref.encode(text))
    with open(os.path.join(HERE, "english_212.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(text)
    print(f"english_212.txt: {len(text.encode('utf-8'))} bytes, {len(ids)} tokens")


if __name__ == "__main__":
    main()
