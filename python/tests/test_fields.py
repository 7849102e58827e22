"""Field analysis and embeddings: vectors as the embedding call gives them, similarity as
numpy computes it, in the document's context when given one."""

import numpy as np

FIELDS = {
    "Title": "A storm at sea",
    "Summary": "A ship is caught in a storm at night.",
    "Keywords": "ship, storm, night, sea",
}


def cosine(v):
    n = v / np.linalg.norm(v, axis=1, keepdims=True)
    return n @ n.T


def test_fields_without_document(tiny):
    fa = tiny.fields(None, FIELDS)
    assert fa.labels == list(FIELDS)
    assert len(fa) == 3 and fa.dim == tiny.info["embd"] and not fa.with_document
    assert fa.vectors.shape == (3, fa.dim) and fa.vectors.dtype == np.float32
    assert fa.similarity.shape == (3, 3) and fa.similarity.dtype == np.float32
    assert fa.tokens == [len(tiny.tokenize(t)) for t in FIELDS.values()]
    emb = tiny.embed(list(FIELDS.values()))
    np.testing.assert_allclose(fa.vectors, emb, atol=1e-5)
    np.testing.assert_allclose(fa.norms, np.linalg.norm(emb, axis=1), rtol=1e-5)
    np.testing.assert_allclose(fa.similarity, cosine(emb.astype(np.float64)), atol=1e-5)


def test_fields_after_a_document(tiny):
    doc = "The ship left the harbour at dusk. By midnight the wind had turned."
    fa = tiny.fields(doc, list(FIELDS.items()))
    assert fa.with_document
    st = tiny.prefill(doc)
    np.testing.assert_allclose(
        fa.vectors, tiny.embed(list(FIELDS.values()), state=st), atol=1e-5
    )
    by_state = tiny.fields(st, FIELDS)
    np.testing.assert_allclose(by_state.vectors, fa.vectors, atol=1e-5)
    # In context the vectors are not those of the fields alone.
    assert not np.allclose(fa.vectors, tiny.embed(list(FIELDS.values())), atol=1e-3)


def test_embed_batch_equals_one_by_one(tiny):
    texts = ["short", "a somewhat longer text about ships", "x" * 50, "日本語のテキスト"]
    batch = tiny.embed(texts)
    for i, t in enumerate(texts):
        np.testing.assert_allclose(batch[i], tiny.embed([t])[0], atol=1e-4)
    assert tiny.embed([]).shape == (0, tiny.info["embd"])
