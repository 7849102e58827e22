"""The examples run and print what they promise."""

import subprocess
import sys
from pathlib import Path

from conftest import fixture

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(*args) -> str:
    return subprocess.run(
        [sys.executable, *map(str, args)], capture_output=True, text=True, check=True
    ).stdout


def test_embedding_search(tmp_path):
    (tmp_path / "sea.txt").write_text("The ship sailed into the storm.\n\nWaves broke on deck.")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "garden.md").write_text("Roses and tulips grow in the garden.")
    (tmp_path / "skip.bin").write_bytes(b"\x00\x01")
    out = run(EXAMPLES / "embedding_search.py", tmp_path, "a boat in bad weather",
              "--model", fixture("rwkv7-tiny-Q8_0.gguf"), "--chars", "20")
    lines = out.strip().splitlines()
    assert lines[0].startswith("3 chunks from 2 files")
    assert len(lines) == 4
    assert {l.split()[1] for l in lines[1:]} == {"sea.txt", "sub/garden.md"}


def test_field_analysis(tmp_path):
    doc = tmp_path / "doc.txt"
    doc.write_text("The ship left the harbour at dusk. By midnight the wind had turned.")
    st = tmp_path / "doc.rwkvstate"
    out = run(EXAMPLES / "field_analysis.py", doc, "Title=A storm at sea",
              "Summary=A ship meets a storm", "--model", fixture("rwkv7-tiny-Q8_0.gguf"),
              "--save-state", st)
    assert "in the document's context: 2 fields" in out
    assert "without the document: 2 fields" in out
    assert st.stat().st_size > 128
