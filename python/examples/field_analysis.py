"""Field analysis: how a document's title, summary and keywords relate, read in the
context of the document itself.

The document is prefilled once into a state; each field is embedded after a fork of it
(all fields in one batched pass) and the fields are compared by cosine similarity. The
same fields without the document show what the context changes.

    python python/examples/field_analysis.py --model M.gguf DOC.txt \
        "Title=A storm at sea" "Summary=A ship meets a storm" "Keywords=ship, storm"
"""

import argparse
from pathlib import Path

import numpy as np

import rwkv_studio


def show(title: str, fa: rwkv_studio.FieldAnalysis) -> None:
    print(f"\n{title}: {len(fa)} fields × {fa.dim}, {fa.timing['forward_ms']:.1f} ms forward")
    w = max(len(label) for label in fa.labels)
    print(" " * w, *(f"{label[:10]:>10}" for label in fa.labels))
    for label, row in zip(fa.labels, fa.similarity):
        print(f"{label:>{w}}", *(f"{v:>10.4f}" for v in row))


def main() -> None:
    ap = argparse.ArgumentParser(description="Field analysis of a document")
    ap.add_argument("doc", type=Path)
    ap.add_argument("fields", nargs="+", help="Label=text")
    ap.add_argument("--model", required=True)
    ap.add_argument("--save-state", type=Path, help="also save the document's state here")
    a = ap.parse_args()

    fields = dict(f.split("=", 1) for f in a.fields)
    model = rwkv_studio.Model(a.model)
    state = model.prefill(a.doc.read_text(encoding="utf-8"))
    print(f"{a.doc}: {state.tokens} tokens prefilled")
    if a.save_state:
        state.save(a.save_state)
        print(f"state saved to {a.save_state}")

    in_doc = model.fields(state, fields)
    alone = model.fields(None, fields)
    show("in the document's context", in_doc)
    show("without the document", alone)
    # Per field: how far the context moved its vector (cosine of the two).
    a_n = in_doc.vectors / in_doc.norms[:, None]
    b_n = alone.vectors / alone.norms[:, None]
    moved = np.sum(a_n * b_n, axis=1)
    print("\ncosine(in context, alone):", ", ".join(f"{l} {m:.4f}" for l, m in zip(in_doc.labels, moved)))


if __name__ == "__main__":
    main()
