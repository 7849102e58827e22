"""Logits, embeddings and the final state of the fixture models against the references of
BlinkDL's `rwkv` package (fp32 CPU), through the Python API.

Tolerances are those of the Rust peer tests (crates/engine/tests/peers.rs), for the same
reasons: the references are fp32 on the CPU, the engine fp32 on the GPU with other
summation orders; 45 tokens through 2-4 layers of a random model amplify rounding. Logits
2e-3 (the peers' own f16-vs-f32 spread is 4.7e-3), hidden states and states 1e-3. The
Python layer adds no arithmetic, so these must hold exactly as in Rust.
"""

import numpy as np
import pytest

from conftest import npy, reference

LOGIT_TOL = 2e-3
EMB_TOL = 1e-3

CASES = [
    # (model fixture, reference model, implementation, full .npy references exist)
    ("tiny", "tiny", "rwkv", True),
    ("tiny_q8", "tiny", "rwkv_deq_q8_0", True),
    ("small_q4", "small", "rwkv_deq_q4_k_m", False),
]


def check_top20(what, logits, top20, tol):
    """As peers.rs: top-1 equal at every position unless the reference's own top-2 gap
    is below `tol` (a near-tie), top-20 overlap >= 19, the reference's top-20 logits
    within `tol`."""
    assert logits.shape[0] == len(top20)
    for t, want in enumerate(top20):
        row = logits[t]
        ours = np.argsort(-row, kind="stable")[:20]
        ids = [int(i) for i, _ in want]
        if int(ours[0]) != ids[0]:
            gap = want[0][1] - want[1][1]
            assert gap < tol, f"{what}: position {t}: top-1 {ours[0]} vs {ids[0]}"
        overlap = len(set(ids) & set(int(i) for i in ours))
        assert overlap >= 19, f"{what}: position {t}: top-20 overlap {overlap}"
        for i, v in want:
            d = abs(float(row[i]) - v)
            assert d < tol, f"{what}: position {t}: logit of {i}: {row[i]} vs {v}"


@pytest.mark.parametrize("model_fixture,model,impl,full", CASES)
def test_logits_and_embeddings_match_the_rwkv_package(request, model_fixture, model, impl, full):
    m = request.getfixturevalue(model_fixture)
    ref = reference(model)
    tokens = ref["tokens"]
    # The reference text tokenizes to the reference ids.
    assert m.tokenize(ref["text"]) == tokens
    logits = m.logits(tokens)
    assert logits.dtype == np.float32
    assert logits.shape == (len(tokens), m.info["vocab"])
    check_top20(f"{model_fixture}/{impl}", logits, ref["top20"][impl], LOGIT_TOL)
    if not full:
        return
    last = npy(f"rwkv7-{model}.ref.{impl}.last_logits.f32.npy")
    d = np.abs(logits[-1] - last).max()
    assert d < LOGIT_TOL, f"last logits max |Δ| {d}"
    emb_ref = npy(f"rwkv7-{model}.ref.{impl}.embeddings.f32.npy")  # [45, C]
    emb = m.embed([ref["text"]])
    assert emb.dtype == np.float32 and emb.shape == (1, m.info["embd"])
    d = np.abs(emb[0] - emb_ref[-1]).max()
    assert d < EMB_TOL, f"last-token embedding max |Δ| {d}"
    # Mean pooling: the mean of the reference's per-position hidden states.
    mean = m.embed([ref["text"]], pooling="mean")
    d = np.abs(mean[0] - emb_ref.mean(axis=0)).max()
    assert d < EMB_TOL, f"mean-pooled embedding max |Δ| {d}"


@pytest.mark.parametrize("model_fixture,model", [("tiny", "tiny")])
def test_final_state_matches_the_rwkv_package(request, model_fixture, model):
    m = request.getfixturevalue(model_fixture)
    ref = reference(model)
    st = m.prefill(ref["text"])
    assert st.tokens == len(ref["tokens"])
    att, kv, ffn = st.to_numpy()
    for got, name in [(att, "att_x_prev"), (kv, "att_kv"), (ffn, "ffn_x_prev")]:
        want = npy(f"rwkv7-{model}.ref.rwkv.state_{name}.f32.npy")
        assert got.dtype == np.float32
        assert got.shape == want.shape, name
        d = np.abs(got - want).max()
        assert d < EMB_TOL, f"state {name} max |Δ| {d}"


def test_arrays_are_the_engines_buffers_not_copies(tiny):
    """numpy arrays wrap the Rust Vec (rust-numpy's PySliceContainer as base), not a
    copy numpy allocated itself."""
    for a in [tiny.logits([1, 2, 3]), tiny.embed(["a b c"]), *tiny.prefill("x").to_numpy()]:
        assert not a.flags.owndata
        assert type(a.base).__name__ == "PySliceContainer"
        assert a.flags.c_contiguous and a.flags.writeable
