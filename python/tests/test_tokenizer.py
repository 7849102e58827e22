"""Tokenizer ids against the references of BlinkDL's TRIE_TOKENIZER (and llama.cpp),
tricky strings included: Chinese, emoji, code with tabs and newlines, the chat template."""

import json

import pytest

from conftest import fixture

CASES = json.loads(fixture("tokenizer_ref.json").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_ids_equal_the_reference(tiny_q8, case):
    # The Q8_0 GGUF carries llama.cpp's copy of the World vocabulary.
    assert tiny_q8.tokenize(case["text"]) == case["ids"]
    assert tiny_q8.detokenize(case["ids"]) == case["text"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_bundled_vocabulary_gives_the_same_ids(tiny, case):
    # The SafeTensors model has no vocabulary: the engine's bundled World one.
    assert tiny.tokenize(case["text"]) == case["ids"]


def test_empty_and_partial_utf8(tiny):
    assert tiny.tokenize("") == []
    assert tiny.detokenize([]) == ""
    ids = tiny.tokenize("🦢")
    if len(ids) > 1:  # a character split over tokens decodes lossily on its own
        assert "\ufffd" in tiny.detokenize(ids[:1])
    assert tiny.detokenize(ids) == "🦢"
