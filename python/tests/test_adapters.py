"""`Model(lora=..., init_state=...)`: the test adapters of tests/fixtures/adapters on the
tiny fixture model against BlinkDL's `rwkv` package on the merged weights (`W + s·B·A`)
and started from the same initial state (references made by make_adapters.py), with the
tolerances of the Rust peer tests (test_peers.py says why); the .pth holds no alpha, so
it takes the scale explicitly; bad files raise ValueError naming the file."""

import json
from pathlib import Path

import numpy as np
import pytest

import rwkv_studio
from conftest import REPO, fixture
from test_peers import LOGIT_TOL, check_top20

ADAPTERS = REPO / "tests" / "fixtures" / "adapters"


def refs() -> dict:
    return json.loads((ADAPTERS / "rwkv7-tiny.adapters.ref.json").read_text())


def test_lora_and_init_state_match_the_rwkv_package():
    ref = refs()
    base = fixture("rwkv7-tiny.safetensors")
    tokens = ref["tokens"]
    lora_st = ADAPTERS / "rwkv7-tiny.lora.safetensors"
    lora_pth = ADAPTERS / "rwkv7-tiny.lora.pth"
    state = ADAPTERS / "rwkv7-tiny.state.safetensors"
    cases = [
        ("lora (alpha from the file)", dict(lora=lora_st), "lora"),
        ("lora (.pth, scale given)", dict(lora=[(lora_pth, float(ref["scale"]))]), "lora"),
        ("init_state", dict(init_state=state), "state"),
        ("both", dict(lora=lora_st, init_state=state), "lora_state"),
    ]
    for what, kw, impl in cases:
        m = rwkv_studio.Model(base, **kw)
        logits = m.logits(tokens)
        check_top20(what, logits, ref["top20"][impl], LOGIT_TOL)
        # A State made by prefill starts from the initial state too: its logits after
        # the first 44 tokens, for the last one, are the reference's last position.
        st = m.prefill(m.detokenize(tokens[:-1]))
        if m.tokenize(m.detokenize(tokens[:-1])) == tokens[:-1]:
            last = m.logits(tokens[-1:], state=st)
            check_top20(what + " via prefill", last, ref["top20"][impl][-1:], LOGIT_TOL)


def test_bad_adapter_files_are_value_errors(tmp_path):
    base = fixture("rwkv7-tiny.safetensors")
    with pytest.raises(ValueError, match="rwkv7-tiny.safetensors"):
        rwkv_studio.Model(base, lora=base)
    with pytest.raises(ValueError, match="rwkv7-tiny.lora.safetensors"):
        rwkv_studio.Model(base, init_state=ADAPTERS / "rwkv7-tiny.lora.safetensors")
    with pytest.raises(ValueError, match="scale"):
        rwkv_studio.Model(base, lora=[(ADAPTERS / "rwkv7-tiny.lora.pth", float("nan"))])
    with pytest.raises(ValueError, match="lora"):
        rwkv_studio.Model(base, lora=[3])
    small = ADAPTERS / "rwkv7-small.lora.safetensors"
    with pytest.raises(ValueError, match="rwkv7-small.lora.safetensors"):
        rwkv_studio.Model(base, lora=small)
