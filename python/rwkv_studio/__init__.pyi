"""RWKV-7 on any GPU from Python: RWKV Studio's engine (wgpu), numpy in and out.

Errors raised by every call (the engine's message, naming the file, tensor or field):

- ``OSError`` (``FileNotFoundError``, ``PermissionError``): a file the OS refused.
- ``ValueError``: bad input — a malformed or foreign file, not an RWKV-7 model, a missing
  tensor or wrong shape, an unsupported encoding, a token id ≥ vocab, an empty prompt, a
  sampler option out of range, a state of another model, a feature not built yet.
- ``RuntimeError``: the device — no GPU adapter, a GPU error, a model too large for it.

Arrays are float32, C order, owned by numpy (handed over from Rust without a copy). The
GIL is released while the engine works; one model runs one job at a time (calls from
several threads wait their turn).
"""

import os
from typing import Any, Iterator, Mapping, NotRequired, Optional, Sequence, Tuple, TypedDict, Union

import numpy as np
import numpy.typing as npt

__version__: str
"""The package version: the workspace version, the same as `rwkv --version` and the app."""
__commit__: str
"""The commit the wheel was built from (12 hex digits), or ``unknown``."""

class AdapterInfo(TypedDict):
    index: int
    name: str
    backend: str
    device_type: str
    driver: str
    driver_info: str

class ModelInfo(TypedDict):
    path: str
    format: str
    layers: int
    embd: int
    heads: int
    head_size: int
    ffn: int
    vocab: int
    encodings: dict[str, int]
    """GPU encoding name (``"Q4_K"``, ``"F16"``, …) → number of tensors in it."""
    adapter: str
    """Name of the GPU adapter the model runs on."""
    backend: str
    gpu_weight_bytes: int
    load_ms: float
    fingerprint: str
    """sha256 of the config and tensor table (64 hex digits); states are tied to it."""

class GenerateStats(TypedDict):
    prompt_tokens: int
    generated_tokens: int
    ttft_ms: float
    prefill_ms: float
    decode_ms: float
    prefill_tok_s: float
    decode_tok_s: float
    stop: str
    """``"max_tokens"``, ``"stop_token"``, ``"stop_string"``, ``"cancelled"`` or ``"callback"``."""
    complete: NotRequired[bool]
    """With a constraint: whether the text completes it (``False``: ``max_tokens``, a stop
    string or a cancel cut it — the text is then not a valid match)."""
    constraint_compile_ms: NotRequired[float]
    constraint_mask_ms: NotRequired[float]
    """CPU time of the allowed-token masks (they run while the GPU computes)."""
    constraint_masks: NotRequired[int]

def adapters() -> list[AdapterInfo]:
    """Every GPU adapter wgpu sees (respecting ``WGPU_BACKEND``), in enumeration order.

    ``Model(path, adapter=i)`` picks one by its ``index`` (or a name substring).
    """

class Model:
    """An RWKV-7 model (GGUF, SafeTensors or PyTorch ``.pth``) loaded onto a GPU."""

    def __init__(
        self,
        path: Union[str, os.PathLike[str]],
        *,
        adapter: Union[int, str, None] = None,
        chunk: int = 256,
        lora: Union[
            str,
            os.PathLike[str],
            tuple[Union[str, os.PathLike[str]], float],
            Sequence[Union[str, os.PathLike[str], tuple[Union[str, os.PathLike[str]], float]]],
            None,
        ] = None,
        init_state: Union[str, os.PathLike[str], None] = None,
    ) -> None:
        """Loads ``path`` onto a GPU.

        Args:
            path: the model file.
            adapter: GPU adapter: an index of :func:`adapters` or a case-insensitive name
                substring; ``None`` picks a discrete GPU first (``RWKV_ADAPTER`` overrides).
            chunk: most tokens per forward pass (prefill chunk, ≥ 1; clamped to what the
                device binds).
            lora: LoRA adapters applied to every pass, run time on the base as it is stored
                (Q4_K stays Q4_K): a file, a ``(file, scale)`` pair, or a list of them.
                RWKV-PEFT ``.pth`` / ``.safetensors`` or llama.cpp GGUF adapters. Each
                adapted matrix gets ``scale · B·A``; the scale defaults to alpha / rank
                when the file holds alpha, else 1 (docs/adapters.md).
            init_state: a state-tuned initial state (RWKV-PEFT ``time_state``, ``.pth`` /
                ``.safetensors``): every new sequence (``generate`` / ``logits`` /
                ``prefill`` / ``embed`` / ``fields`` without a state) starts from it.

        Raises:
            FileNotFoundError / OSError: the file cannot be read.
            ValueError: not a well-formed RWKV-7 model file (names the tensor), ``chunk``
                of 0, an adapter or initial-state file that is bad or not for this model
                (names the file and tensor), a non-finite scale.
            RuntimeError: no GPU adapter (on Linux without a GPU install Mesa's lavapipe,
                ``mesa-vulkan-drivers``), the adapter asked for does not exist, the model
                does not fit the device.
        """
    @property
    def info(self) -> ModelInfo:
        """What the model is: layers, embd, vocab, GPU encodings, adapter name, …"""
    def tokenize(self, text: str) -> list[int]:
        """The model's World token ids of ``text`` (``[]`` for ``""``)."""
    def detokenize(self, ids: Sequence[int]) -> str:
        """The text of ``ids``; bytes that are not valid UTF-8 become U+FFFD.

        Raises:
            ValueError: an id ≥ vocab (named with its position).
            OverflowError: a negative id.
        """
    def generate(
        self,
        prompt: str,
        max_tokens: int = 128,
        *,
        temperature: float = 1.0,
        top_p: float = 0.3,
        top_k: int = 0,
        presence_penalty: float = 0.5,
        frequency_penalty: float = 0.5,
        stop: Optional[Sequence[str]] = None,
        seed: Optional[int] = None,
        stream: bool = False,
        state: Optional[State] = None,
        json_schema: Union[None, str, Mapping[str, Any], bool] = None,
        grammar: Optional[str] = None,
        regex: Optional[str] = None,
    ) -> Union[str, TextStream]:
        """Continues ``prompt``: up to ``max_tokens`` tokens, sampled.

        Defaults are RWKV's usual ones (ChatRWKV): temperature 1, top-p 0.3, presence and
        frequency penalties 0.5. ``temperature=0`` is greedy (penalties still apply: pass
        ``presence_penalty=0, frequency_penalty=0`` for plain argmax, what
        ``rwkv generate --greedy`` does). Generation ends at the end-of-text token (id 0),
        at ``max_tokens`` or at a ``stop`` string (which is cut from the text).

        Args:
            stream: return a :class:`TextStream` yielding the text piece by piece (each
                valid UTF-8) instead of the whole text.
            seed: RNG seed (``None``: from the OS); same seed and options → same text.
            state: continue from this state and **advance it in place** (it ends holding
                the prompt and the generated text but the last token). ``None``: a fresh
                zero state. Use ``state.fork()`` to keep the original.
            json_schema: constrain the output to one JSON value valid against this JSON
                Schema (a dict or JSON text; docs/structured-output.md lists the keywords).
                Compact JSON (``", "`` and ``": "`` separators).
            grammar: constrain the output to this grammar: llama.cpp GBNF (``root ::=``)
                when the text holds ``::=``, else llguidance Lark (``start:``).
            regex: the whole output matches this regular expression (Rust syntax).
                At most one of the three; with one, read ``stats["complete"]`` of a
                stream to know that ``max_tokens`` did not cut the structure.

        Returns:
            The generated text (without the prompt), or a :class:`TextStream`.

        Raises:
            ValueError: an empty prompt, a sampler option out of range (named), a state
                of another model, a schema or grammar the engine cannot use (the message
                names the construct) — raised at the call, also with ``stream=True``.
            KeyboardInterrupt: Ctrl-C while waiting; generation is cancelled first and
                ``state`` keeps every token fed so far. (Python turns Ctrl-C into
                KeyboardInterrupt only where SIGINT is not ignored: a process started in
                the background by a non-interactive shell inherits it ignored.)
        """
    def cancel(self) -> int:
        """Stops every generation running on this model at its next token, from any
        thread (a stop button, a watchdog): a blocking :meth:`generate` returns the text
        so far, a stream ends with ``stats["stop"] == "cancelled"``; states keep what was
        fed. Returns how many generations were running."""
    def logits(
        self, ids: Sequence[int], *, state: Optional[State] = None
    ) -> npt.NDArray[np.float32]:
        """Next-token logits after each of ``ids``: shape ``[T, V]``, float32.

        ``logits[t]`` follows ``ids[0..=t]`` fed from the zero state, or from a fork of
        ``state`` (left untouched).

        Raises:
            ValueError: ``ids`` empty, an id ≥ vocab, a state of another model.
            MemoryError: more than 2 GiB of logits in one call (8,192 positions of a
                65,536-token vocabulary), refused before any work: ask in parts.
        """
    def embed(
        self,
        texts: Sequence[str],
        *,
        pooling: str = "last",
        state: Optional[State] = None,
    ) -> npt.NDArray[np.float32]:
        """Embeddings of ``texts``: shape ``[N, C]``, float32, row ``i`` for ``texts[i]``.

        The hidden state after ``ln_out`` (llama.cpp's ``t_embd``); the head never runs.
        All texts run in batched, chunked passes. ``pooling``: ``"last"`` (the last
        token's hidden state) or ``"mean"`` (the mean over the text's tokens). Each text
        starts from the zero state, or after ``state`` (a fork; ``state`` is untouched).

        Raises:
            ValueError: a text with no tokens (named by index), an unknown pooling, a
                state of another model.
            MemoryError: more than 2 GiB of output in one call (with ``"mean"``: every
                token's row), refused before any work.
        """
    def fields(
        self,
        doc: Union[str, State, None],
        fields: Union[Mapping[str, str], Sequence[Tuple[str, str]]],
        *,
        pooling: str = "last",
    ) -> FieldAnalysis:
        """Embeds labelled texts in one batched pass and compares them (cosine).

        Args:
            doc: each field is embedded after this document — a text (prefilled, then
                dropped) or a :class:`State` (forked, untouched) — or from the zero state
                when ``None``.
            fields: ``{label: text}`` (or ``(label, text)`` pairs), at most 1,024 fields
                of at most 4,096 tokens each.

        Raises:
            ValueError: no fields, too many, an empty label or text (named), a text over
                4,096 tokens, an empty ``doc`` text, an unknown pooling.
        """
    def prefill(self, text: str, state: Optional[State] = None) -> State:
        """A new :class:`State` holding ``text`` fed after ``state`` (a fork of it;
        ``state`` untouched) or after the zero state. ``""`` gives a copy of ``state`` (or
        the zero state). The head never runs.

        Raises:
            ValueError: a state of another model.
        """

class State:
    """A sequence's recurrent state on its model's GPU: per layer
    ``[att_shift C | wkv H×N×N | ffn_shift C]`` float32. Freed when garbage-collected and
    no generation (a stream started on it) runs on it any more."""

    @property
    def tokens(self) -> int:
        """Tokens fed since the zero state (recorded by :meth:`save`; 0 = unknown)."""
    def fork(self) -> State:
        """A copy, made on the GPU; this state is untouched."""
    def to_numpy(
        self,
    ) -> Tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """The state as three float32 arrays, the layout of the reference fixtures:
        ``att_x_prev [L, C]`` (time-mix token shift), ``att_kv [L, H, N, N]`` (WKV state,
        ``S[h][i][j]`` pairing value ``i`` with key ``j``), ``ffn_x_prev [L, C]``
        (channel-mix token shift)."""
    def save(self, path: Union[str, os.PathLike[str]]) -> None:
        """Writes the state as a ``.rwkvstate`` file (``docs/state-format.md``):
        header with the model's fingerprint and layout, then the f32 values.

        Raises:
            OSError: the file cannot be written.
        """
    @staticmethod
    def load(model: Model, path: Union[str, os.PathLike[str]]) -> State:
        """Loads a ``.rwkvstate`` file made by ``model`` into a new state.

        Raises:
            FileNotFoundError / OSError: the file cannot be read.
            ValueError: not a state file, another format version, truncated or corrupt
                (checksum), or made by another model (fingerprint) — named in the message.
        """

class TextStream(Iterator[str]):
    """The text of one generation, piece by piece (``Model.generate(stream=True)``).

    Iterating waits with the GIL released; Ctrl-C cancels the generation (the state keeps
    what was fed) and raises ``KeyboardInterrupt``. Dropping the stream stops it.
    """

    def __iter__(self) -> TextStream: ...
    def __next__(self) -> str: ...
    def cancel(self) -> None:
        """Stops the generation at the next token; iteration then ends."""
    @property
    def stats(self) -> Optional[GenerateStats]:
        """Token counts, timings and why it stopped; ``None`` until the stream ended."""

class FieldAnalysis:
    """Result of :meth:`Model.fields`."""

    labels: list[str]
    """The labels, in the order given."""
    tokens: list[int]
    """Tokens of each field's text."""
    vectors: npt.NDArray[np.float32]
    """``[F, C]`` float32 embeddings, row ``i`` for ``labels[i]``."""
    norms: npt.NDArray[np.float32]
    """``[F]`` float32 Euclidean norms of the rows of ``vectors``."""
    similarity: npt.NDArray[np.float32]
    """``[F, F]`` float32 cosine similarities (symmetric, 1 on the diagonal)."""
    dim: int
    """C."""
    with_document: bool
    pooling: str
    model: str
    """The model's fingerprint."""
    timing: dict[str, float]
    """``total_ms``, ``tokenize_ms``, ``forward_ms``, ``similarity_ms``."""
    def __len__(self) -> int: ...
