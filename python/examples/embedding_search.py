"""Embedding search over a folder of text files.

Embeds every ``*.txt`` / ``*.md`` file under FOLDER (in chunks of about --chars
characters, all in batched passes), embeds the query the same way, and prints the
chunks closest to it by cosine similarity.

    python python/examples/embedding_search.py --model M.gguf FOLDER "what the query is about"
"""

import argparse
from pathlib import Path

import numpy as np

import rwkv_studio


def chunks(text: str, size: int):
    """Paragraph-aligned pieces of about `size` characters."""
    out, cur = [], ""
    for para in text.split("\n\n"):
        if cur and len(cur) + len(para) > size:
            out.append(cur)
            cur = ""
        cur = f"{cur}\n\n{para}" if cur else para
    if cur.strip():
        out.append(cur)
    return [c for c in out if c.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description="Embedding search over a folder of text files")
    ap.add_argument("folder", type=Path)
    ap.add_argument("query")
    ap.add_argument("--model", required=True)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--chars", type=int, default=1000)
    ap.add_argument("--pooling", choices=["last", "mean"], default="mean")
    a = ap.parse_args()

    model = rwkv_studio.Model(a.model)
    where, texts = [], []
    for p in sorted(a.folder.rglob("*")):
        if p.suffix in (".txt", ".md") and p.is_file():
            for i, c in enumerate(chunks(p.read_text(encoding="utf-8", errors="replace"), a.chars)):
                where.append((p.relative_to(a.folder), i))
                texts.append(c)
    if not texts:
        raise SystemExit(f"{a.folder}: no .txt or .md files")

    docs = model.embed(texts, pooling=a.pooling)  # [N, C] float32
    query = model.embed([a.query], pooling=a.pooling)[0]  # [C]
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    query /= np.linalg.norm(query)
    scores = docs @ query  # [N] cosine similarities
    print(f"{len(texts)} chunks from {len({w[0] for w in where})} files, dim {docs.shape[1]}")
    for i in np.argsort(-scores)[: a.top]:
        path, n = where[i]
        preview = " ".join(texts[i].split())[:70]
        print(f"{scores[i]:+.4f}  {path} #{n}  {preview}")


if __name__ == "__main__":
    main()
