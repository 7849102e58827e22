"""Engine errors arrive as the right Python exceptions, with the engine's message."""

import pytest

import rwkv_studio
from conftest import fixture


def test_missing_file_is_file_not_found(tmp_path):
    p = tmp_path / "nope.gguf"
    with pytest.raises(FileNotFoundError) as e:
        rwkv_studio.Model(p)
    assert "nope.gguf" in str(e.value)


def test_malformed_model_is_value_error(tmp_path):
    p = tmp_path / "broken.gguf"
    p.write_bytes(b"GGUF" + b"\xff" * 60)
    with pytest.raises(ValueError) as e:
        rwkv_studio.Model(p)
    assert "broken.gguf" in str(e.value)


def test_unknown_adapter_is_runtime_error():
    with pytest.raises(RuntimeError):
        rwkv_studio.Model(fixture("rwkv7-tiny-Q8_0.gguf"), adapter="no such GPU 1234")


def test_bad_inputs_are_value_errors(tiny):
    vocab = tiny.info["vocab"]
    with pytest.raises(ValueError, match=str(vocab)):
        tiny.logits([1, vocab])
    with pytest.raises(ValueError):
        tiny.logits([])
    with pytest.raises(ValueError, match="out of range"):
        tiny.detokenize([vocab + 5])
    with pytest.raises(OverflowError):
        tiny.detokenize([-1])
    with pytest.raises(ValueError, match="empty"):
        tiny.generate("", 4)
    with pytest.raises(ValueError, match="temperature"):
        tiny.generate("Hi", 4, temperature=-1.0)
    with pytest.raises(ValueError, match="top_p"):
        tiny.generate("Hi", 4, top_p=2.0, stream=True)  # raised at the call
    with pytest.raises(ValueError, match="input 1"):
        tiny.embed(["a", ""])
    with pytest.raises(ValueError, match="pooling"):
        tiny.embed(["a"], pooling="max")
    with pytest.raises(ValueError, match="no fields"):
        tiny.fields(None, {})
    with pytest.raises(ValueError, match="empty text"):
        tiny.fields(None, {"Title": "  "})


def test_too_large_outputs_are_memory_errors(tiny):
    """A result larger than one call may return (2 GiB) is refused before any work, as a
    MemoryError naming the sizes (issue 33): a million positions of logits would be
    256 GiB; before the check it aborted the interpreter."""
    with pytest.raises(MemoryError, match="2147483648"):
        tiny.logits([1] * 1_000_000)
    # The model still answers, and the same call on fewer positions works.
    assert tiny.logits([1, 2]).shape == (2, tiny.info["vocab"])


def test_state_errors(tiny, tiny_q8, tmp_path):
    st = tiny.prefill("Hello")
    with pytest.raises(ValueError, match="another Model"):
        tiny_q8.logits([1], state=st)
    with pytest.raises(FileNotFoundError):
        rwkv_studio.State.load(tiny, tmp_path / "missing.rwkvstate")
    junk = tmp_path / "junk.rwkvstate"
    junk.write_bytes(b"not a state" * 20)
    with pytest.raises(ValueError, match="RWKVSTAT"):
        rwkv_studio.State.load(tiny, junk)
    # A state saved by one model does not load into another.
    p = tmp_path / "tiny.rwkvstate"
    st.save(p)
    with pytest.raises(ValueError, match="another model"):
        rwkv_studio.State.load(tiny_q8, p)
    # A flipped data byte is caught by the checksum.
    b = bytearray(p.read_bytes())
    b[200] ^= 1
    p.write_bytes(bytes(b))
    with pytest.raises(ValueError, match="checksum"):
        rwkv_studio.State.load(tiny, p)
    with pytest.raises(OSError):
        st.save(tmp_path / "no-such-dir" / "s.rwkvstate")
