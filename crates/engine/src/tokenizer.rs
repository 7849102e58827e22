//! The RWKV "World" tokenizer: greedy longest match over UTF-8 bytes.
//!
//! Same ids as BlinkDL's `TRIE_TOKENIZER` (rwkv pip package, `rwkv/rwkv_tokenizer.py`)
//! and llama.cpp's `llm_tokenizer_rwkv`: from each position, emit the longest vocabulary
//! entry that is a prefix of the remaining bytes, and move past it. Every single byte is a
//! token (ids 1..=256), so any byte string encodes and nothing is ever "unknown".
//!
//! Vocabulary: ids `1..=65529` from `rwkv_vocab_v20230424.txt` (bundled), id 0 =
//! end-of-text, which has no bytes: [`Tokenizer::encode`] never produces it and
//! [`Tokenizer::decode`] renders it as nothing (the reference raises `KeyError` on it;
//! llama.cpp renders control tokens as nothing too). A GGUF vocabulary
//! ([`Tokenizer::from_gguf`]) has 65 536 ids: its `[PAD…]` ids 65530..65535 likewise decode
//! to nothing and are never produced.
//!
//! Speed: the match runs on a double-array trie (one `u32` load and compare per input
//! byte, see `tokenizer/trie.rs`); `docs/tokenizer.md` has the numbers.

mod stream;
mod trie;
mod vocab;

use std::sync::{Arc, OnceLock};

pub use stream::StreamDecoder;

use crate::error::{EngineError, Result};
use crate::format::{MetaValue, ModelFile};
use trie::Trie;

/// The World vocabulary file as shipped in BlinkDL's `rwkv` package (sha256
/// `8324476023347dec2964625ccb2075c864d250a9c6d9a74f36daba628de8c008`, CRLF line ends).
pub const WORLD_VOCAB_FILE: &[u8] = include_bytes!("../assets/rwkv_vocab_v20230424.txt");

/// End-of-text id: never produced by encoding, decodes to no bytes; generation stops on it.
pub const END_OF_TEXT: u32 = 0;

/// GGUF token types (`llama_token_type` / gguf-py `TokenType`) the reader distinguishes.
const GGUF_TOKEN_NORMAL: i64 = 1;
const GGUF_TOKEN_USER_DEFINED: i64 = 4;

/// A World tokenizer: vocabulary plus match trie. Cloning is cheap (shared `Arc`).
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<Inner>,
}

struct Inner {
    trie: Trie,
    /// Every token's bytes, back to back; token `id` is `bytes[offsets[id]..offsets[id + 1]]`.
    bytes: Vec<u8>,
    /// `vocab_size + 1` offsets into `bytes`.
    offsets: Vec<u32>,
    /// Where the vocabulary came from (for messages).
    source: String,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("source", &self.inner.source)
            .field("vocab_size", &self.vocab_size())
            .field("trie_bytes", &self.inner.trie.size_bytes())
            .finish()
    }
}

impl Tokenizer {
    /// The bundled World tokenizer (`rwkv_vocab_v20230424.txt`), built on first use
    /// (20–30 ms in release builds) and shared afterwards.
    ///
    /// Errors: [`EngineError::Tokenizer`] if the bundled file does not parse — impossible
    /// for the shipped file, which a test checks; kept as an error rather than a panic.
    pub fn world() -> Result<Tokenizer> {
        static WORLD: OnceLock<std::result::Result<Tokenizer, String>> = OnceLock::new();
        WORLD
            .get_or_init(|| {
                Tokenizer::from_world_vocab(WORLD_VOCAB_FILE, "rwkv_vocab_v20230424.txt (bundled)")
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(|what| EngineError::Tokenizer { what })
    }

    /// Builds a tokenizer from the text of a World vocab file (`<id> <literal> <length>` a
    /// line, ids 1, 2, 3, … in order; see BlinkDL's `rwkv_tokenizer.py`). `source` names
    /// the file in error messages.
    ///
    /// Errors: [`EngineError::Tokenizer`] naming the source and line of the first bad line
    /// (format, literal syntax, escape, length mismatch, id order), or a vocabulary that
    /// lacks one of the 256 single bytes.
    pub fn from_world_vocab(text: &[u8], source: &str) -> Result<Tokenizer> {
        let pieces = vocab::parse_world_vocab(text, source)
            .map_err(|what| EngineError::Tokenizer { what })?;
        Tokenizer::from_pieces(pieces, source)
    }

    /// Builds a tokenizer from the bytes of each id (`pieces[id]`). `pieces[0]` must be
    /// empty (end-of-text); other empty pieces are ids that decode to nothing and are never
    /// produced (padding, control tokens). If two ids share the same bytes, encoding yields
    /// the larger id, as BlinkDL's tokenizer does.
    ///
    /// Errors: [`EngineError::Tokenizer`] when there are more than 2^20 ids, a piece is
    /// longer than 4096 bytes, `pieces[0]` is not empty, or a single byte is missing.
    pub fn from_pieces(pieces: Vec<Vec<u8>>, source: &str) -> Result<Tokenizer> {
        let err = |what: String| EngineError::Tokenizer {
            what: format!("{source}: {what}"),
        };
        if pieces.len() > vocab::MAX_VOCAB {
            return Err(err(format!(
                "{} ids, limit {}",
                pieces.len(),
                vocab::MAX_VOCAB
            )));
        }
        if pieces.first().is_some_and(|p| !p.is_empty()) {
            return Err(err("id 0 is end-of-text and must have no bytes".into()));
        }
        let total: usize = pieces.iter().map(Vec::len).sum();
        let mut bytes = Vec::with_capacity(total);
        let mut offsets = Vec::with_capacity(pieces.len() + 1);
        let mut single = [false; 256];
        offsets.push(0u32);
        for (id, p) in pieces.iter().enumerate() {
            if p.len() > vocab::MAX_TOKEN_BYTES {
                return Err(err(format!(
                    "token {id} is {} bytes, limit {}",
                    p.len(),
                    vocab::MAX_TOKEN_BYTES
                )));
            }
            if let [b] = p.as_slice() {
                single[*b as usize] = true;
            }
            bytes.extend_from_slice(p);
            // total ≤ 2^20 × 4096 = 2^32 bytes would overflow u32 only at the very edge.
            let end =
                u32::try_from(bytes.len()).map_err(|_| err("vocabulary over 4 GiB".into()))?;
            offsets.push(end);
        }
        if let Some(missing) = single.iter().position(|&s| !s) {
            return Err(err(format!(
                "no token for the single byte 0x{missing:02x}: every byte must be a token so that any text can be encoded"
            )));
        }
        let keys: Vec<(&[u8], u32)> = pieces
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.is_empty())
            .map(|(id, p)| (p.as_slice(), id as u32))
            .collect();
        let trie = Trie::build(&keys).map_err(err)?;
        Ok(Tokenizer {
            inner: Arc::new(Inner {
                trie,
                bytes,
                offsets,
                source: source.to_string(),
            }),
        })
    }

    /// The vocabulary of a GGUF file (`tokenizer.ggml.tokens`, escaped as llama.cpp's
    /// converter writes it; `tokenizer.ggml.token_type` when present), or `None` when the
    /// file has no `tokenizer.ggml.tokens` (SafeTensors, `.pth`, a GGUF without vocabulary).
    ///
    /// Id 0 (`<s>`) is end-of-text. Tokens of type NORMAL (1) or USER_DEFINED (4) are
    /// unescaped into their bytes; other types (CONTROL, UNUSED `[PAD…]`, …) decode to
    /// nothing and are never produced.
    ///
    /// Errors: [`EngineError::Tokenizer`] naming the file and the key or token: a
    /// `tokenizer.ggml.model` other than `rwkv`, arrays of the wrong type or length, a token
    /// with a malformed escape, or a vocabulary the tokenizer cannot use (see
    /// [`Tokenizer::from_pieces`]).
    pub fn from_gguf(file: &ModelFile) -> Result<Option<Tokenizer>> {
        let path = file.path().display().to_string();
        let err = |what: String| EngineError::Tokenizer {
            what: format!("{path}: {what}"),
        };
        let Some(tokens) = file.meta("tokenizer.ggml.tokens") else {
            return Ok(None);
        };
        if let Some(model) = file.meta("tokenizer.ggml.model") {
            match model.as_str() {
                Some("rwkv") => {}
                Some(other) => {
                    return Err(err(format!(
                        "tokenizer.ggml.model is `{other}`, expected `rwkv` (the World tokenizer)"
                    )))
                }
                None => return Err(err("tokenizer.ggml.model is not a string".into())),
            }
        }
        let Some(tokens) = tokens.as_array() else {
            return Err(err("tokenizer.ggml.tokens is not an array".into()));
        };
        let Some(tokens) = tokens.as_strings() else {
            return Err(err(format!(
                "tokenizer.ggml.tokens is an array of {}, not of strings",
                tokens.elem_type_name()
            )));
        };
        if tokens.len() > vocab::MAX_VOCAB {
            return Err(err(format!(
                "tokenizer.ggml.tokens has {} entries, limit {}",
                tokens.len(),
                vocab::MAX_VOCAB
            )));
        }
        let types = match file.meta("tokenizer.ggml.token_type") {
            None => None,
            Some(MetaValue::Array(t)) if t.len() == tokens.len() => Some(t),
            Some(MetaValue::Array(t)) => {
                return Err(err(format!(
                    "tokenizer.ggml.token_type has {} entries, tokenizer.ggml.tokens {}",
                    t.len(),
                    tokens.len()
                )))
            }
            Some(_) => return Err(err("tokenizer.ggml.token_type is not an array".into())),
        };
        let mut pieces = Vec::with_capacity(tokens.len());
        for (id, text) in tokens.iter().enumerate() {
            let ty = match types {
                Some(types) => types.int_at(id).ok_or_else(|| {
                    err(format!("tokenizer.ggml.token_type[{id}] is not an integer"))
                })?,
                None => GGUF_TOKEN_NORMAL,
            };
            let is_text = id != END_OF_TEXT as usize
                && (ty == GGUF_TOKEN_NORMAL || ty == GGUF_TOKEN_USER_DEFINED);
            if !is_text {
                pieces.push(Vec::new());
                continue;
            }
            if text.len() > 4 * vocab::MAX_TOKEN_BYTES {
                return Err(err(format!(
                    "tokenizer.ggml.tokens[{id}] is {} bytes long",
                    text.len()
                )));
            }
            let piece = vocab::unescape_gguf_token(text).map_err(|e| {
                err(format!(
                    "tokenizer.ggml.tokens[{id}] `{}`: {e}",
                    text.escape_debug()
                ))
            })?;
            if piece.is_empty() {
                return Err(err(format!("tokenizer.ggml.tokens[{id}] is empty")));
            }
            pieces.push(piece);
        }
        Tokenizer::from_pieces(pieces, &format!("{path} (tokenizer.ggml.tokens)")).map(Some)
    }

    /// Number of ids, `0..vocab_size()` (65 530 for the bundled World vocabulary: id 0 plus
    /// 65 529 tokens; a GGUF's own count, 65 536 with padding, for [`Tokenizer::from_gguf`]).
    /// Whether `other` is this very tokenizer (a clone of it), not merely an equal one.
    pub fn ptr_eq(&self, other: &Tokenizer) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.offsets.len().saturating_sub(1)
    }

    /// Where the vocabulary came from ("rwkv_vocab_v20230424.txt (bundled)", a GGUF path…).
    pub fn source(&self) -> &str {
        &self.inner.source
    }

    /// The bytes of token `id` (empty for end-of-text and padding ids), or `None` when
    /// `id >= vocab_size()`.
    #[inline]
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        let id = id as usize;
        let start = *self.inner.offsets.get(id)? as usize;
        let end = *self.inner.offsets.get(id + 1)? as usize;
        self.inner.bytes.get(start..end)
    }

    /// Token ids of `text` (its UTF-8 bytes).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.encode_bytes(text.as_bytes())
    }

    /// Token ids of arbitrary bytes (valid UTF-8 or not: every byte is a token).
    pub fn encode_bytes(&self, bytes: &[u8]) -> Vec<u32> {
        // World tokens average ≈ 3.5 bytes of English, ≈ 2.5 of CJK: len/2 rarely regrows.
        let mut out = Vec::with_capacity(bytes.len() / 2 + 8);
        self.encode_into(bytes, &mut out);
        out
    }

    /// Appends the token ids of `bytes` to `out`: no allocation beyond `out`'s growth, so
    /// a reused `out` makes encoding allocation-free.
    pub fn encode_into(&self, bytes: &[u8], out: &mut Vec<u32>) {
        self.inner.trie.encode_into(bytes, out);
    }

    /// The longest token that is a prefix of `bytes`: `(id, length in bytes)`; `None` only
    /// for empty `bytes`. One step of the greedy encoding.
    pub fn longest_prefix(&self, bytes: &[u8]) -> Option<(u32, usize)> {
        self.inner.trie.longest_prefix(bytes)
    }

    /// The bytes of `ids`, concatenated. Not necessarily UTF-8: a token may hold part of a
    /// character (use `String::from_utf8_lossy`, or [`StreamDecoder`] while generating).
    ///
    /// Errors: [`EngineError::InvalidInput`] naming the first id `>= vocab_size()` and its
    /// position.
    pub fn decode(&self, ids: &[u32]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        self.decode_into(ids, &mut out)?;
        Ok(out)
    }

    /// Appends the bytes of `ids` to `out`. On error `out` is left as it was.
    ///
    /// Errors: as [`Tokenizer::decode`].
    pub fn decode_into(&self, ids: &[u32], out: &mut Vec<u8>) -> Result<()> {
        let before = out.len();
        for (pos, &id) in ids.iter().enumerate() {
            match self.token_bytes(id) {
                Some(b) => out.extend_from_slice(b),
                None => {
                    out.truncate(before);
                    return Err(EngineError::invalid(format!(
                        "token id {id} (at position {pos}) is out of range: the vocabulary ({}) has ids 0..{}",
                        self.inner.source,
                        self.vocab_size()
                    )));
                }
            }
        }
        Ok(())
    }

    /// A decoder for streaming generation: push ids, get text as soon as it is valid UTF-8.
    pub fn stream_decoder(&self) -> StreamDecoder {
        StreamDecoder::new(self.clone())
    }
}

#[cfg(test)]
mod tests;
