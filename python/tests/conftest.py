"""Shared fixtures of the Python package's tests: paths, models loaded once per session.

GPU tests run on whatever adapter wgpu finds; in CI that is Mesa's lavapipe
(``scripts/test.sh`` installs it and sets ``WGPU_BACKEND=vulkan``). No adapter is a loud
failure, never a skip.
"""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import rwkv_studio

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(os.environ.get("RWKV_FIXTURES", REPO.parent / "shared" / "fixtures"))
DEMO = REPO / "assets" / "models" / "rwkv7-demo-6x256-Q4_K_M.gguf"


def fixture(name: str) -> Path:
    p = FIXTURES / name
    if not p.exists():
        pytest.fail(f"{p}: missing fixture (the fixtures live in ../shared/fixtures)")
    return p


def npy(name: str) -> np.ndarray:
    return np.load(fixture(name))


def reference(model: str) -> dict:
    return json.loads(fixture(f"rwkv7-{model}.ref.json").read_text())


def rwkv_cli() -> Path:
    """The `rwkv` CLI built by `cargo test --workspace --release` (scripts/test.sh)."""
    cands = [os.environ.get("RWKV_CLI")]
    target = os.environ.get("CARGO_TARGET_DIR")
    if target:
        cands.append(str(Path(target) / "release" / "rwkv"))
    cands += [str(REPO / "target" / "release" / "rwkv"), shutil.which("rwkv")]
    for c in cands:
        if c and Path(c).is_file():
            return Path(c)
    pytest.fail(
        "the `rwkv` CLI is not built: run `cargo build --release -p rwkv-cli` "
        "(or set RWKV_CLI to its path)"
    )


_models: dict = {}


def load(path: Path) -> rwkv_studio.Model:
    """One Model per file for the whole session (loading compiles the pipelines)."""
    key = str(path)
    if key not in _models:
        try:
            _models[key] = rwkv_studio.Model(path)
        except RuntimeError as e:
            pytest.fail(
                f"{path}: {e}. GPU tests need an adapter: install Mesa's lavapipe "
                "(`apt-get install mesa-vulkan-drivers`) and set WGPU_BACKEND=vulkan"
            )
    return _models[key]


@pytest.fixture(scope="session")
def tiny() -> rwkv_studio.Model:
    return load(fixture("rwkv7-tiny.safetensors"))


@pytest.fixture(scope="session")
def tiny_q8() -> rwkv_studio.Model:
    return load(fixture("rwkv7-tiny-Q8_0.gguf"))


@pytest.fixture(scope="session")
def small_q4() -> rwkv_studio.Model:
    return load(fixture("rwkv7-small-Q4_K_M.gguf"))


@pytest.fixture(scope="session")
def demo() -> rwkv_studio.Model:
    return load(DEMO)
