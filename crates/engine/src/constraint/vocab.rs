//! The World vocabulary as llguidance sees it: a [`toktrie::TokTrie`] over every token's
//! bytes, end-of-text = token 0, and the [`ParserFactory`] that compiles grammars against
//! it (built once per vocabulary: ≈ 0.1–0.3 s, then shared by every constraint).

use std::sync::{Arc, Mutex};

use llguidance::api::ParserLimits;
use llguidance::ParserFactory;
use toktrie::{InferenceCapabilities, TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::error::{EngineError, Result};
use crate::tokenizer::{Tokenizer, END_OF_TEXT};

/// toktrie marks tokens whose bytes start with 0xFF as "special" (named tokens such as
/// `<|endoftext|>`). 0xFF never occurs in UTF-8 text, so the World tokens that start with
/// it (the single byte 0xFF, id 256) are given no bytes here: a grammar never allows them.
const SPECIAL_MARKER: u8 = TokTrie::SPECIAL_TOKEN_MARKER;

/// Compilers kept by [`ConstraintCompiler::shared`] (one per loaded model, usually).
pub const CACHED_COMPILERS: usize = 4;

/// llguidance's view of the World tokenizer: greedy longest match on the same trie
/// (what our tokenizer does, see `tokenizer.rs`).
struct WorldEnv {
    trie: TokTrie,
}

impl TokenizerEnv for WorldEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }

    /// Our tokenizer picks the larger id when two ids share bytes, which the trie may
    /// not: never let llguidance force tokens on the assumption that they are canonical.
    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

/// Compiles constraints for one vocabulary. Cheap to share (`Arc`); `Send + Sync`.
pub struct ConstraintCompiler {
    pub(super) factory: ParserFactory,
    /// Logit rows per token (`[vocab]`), the model's vocabulary size (≥ the tokenizer's).
    pub(super) vocab: usize,
}

impl std::fmt::Debug for ConstraintCompiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConstraintCompiler")
            .field("vocab", &self.vocab)
            .finish()
    }
}

impl ConstraintCompiler {
    /// Builds the token trie of `tok` padded to `vocab` ids (the model's logit count;
    /// ids past the tokenizer's have no bytes and are never allowed), EOS = token 0.
    ///
    /// Errors: [`EngineError::Constraint`] when `vocab` is smaller than the tokenizer's
    /// vocabulary or llguidance rejects the vocabulary.
    pub fn new(tok: &Tokenizer, vocab: usize) -> Result<Arc<Self>> {
        let n = tok.vocab_size();
        if vocab < n || vocab == 0 || u32::try_from(vocab).is_err() {
            return Err(EngineError::constraint(
                "vocabulary",
                format!("model vocabulary {vocab} is smaller than the tokenizer's {n}"),
            ));
        }
        let words: Vec<Vec<u8>> = (0..vocab as u32)
            .map(|id| match tok.token_bytes(id) {
                Some(b) if b.first() != Some(&SPECIAL_MARKER) => b.to_vec(),
                _ => Vec::new(),
            })
            .collect();
        let info = TokRxInfo::new(vocab as u32, END_OF_TEXT);
        // `TokTrie::from` asserts on its input; ours is well formed by construction
        // (one entry per id, lengths ≤ 4096), and a panic is turned into an error anyway.
        let trie = std::panic::catch_unwind(|| TokTrie::from(&info, &words)).map_err(|_| {
            EngineError::constraint("vocabulary", "toktrie rejected the vocabulary")
        })?;
        let env: TokEnv = Arc::new(WorldEnv { trie });
        let mut factory = ParserFactory::new(
            &env,
            InferenceCapabilities::default(),
            &llguidance::earley::SlicedBiasComputer::general_slices(),
        )
        .map_err(|e| EngineError::constraint("vocabulary", e.to_string()))?;
        factory.quiet();
        *factory.limits_mut() = limits();
        Ok(Arc::new(ConstraintCompiler { factory, vocab }))
    }

    /// [`Self::new`], built once per tokenizer and vocabulary size in this process (the
    /// last [`CACHED_COMPILERS`] kept) and shared afterwards.
    ///
    /// Errors: as [`Self::new`].
    pub fn shared(tok: &Tokenizer, vocab: usize) -> Result<Arc<Self>> {
        type Entry = (Tokenizer, usize, Arc<ConstraintCompiler>);
        static CACHE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
        if let Ok(c) = CACHE.lock() {
            if let Some((_, _, comp)) = c.iter().find(|(t, v, _)| t.ptr_eq(tok) && *v == vocab) {
                return Ok(comp.clone());
            }
        }
        // Built outside the lock (it takes a while); two racing builders both succeed.
        let comp = Self::new(tok, vocab)?;
        if let Ok(mut c) = CACHE.lock() {
            if c.len() >= CACHED_COMPILERS {
                c.remove(0);
            }
            c.push((tok.clone(), vocab, comp.clone()));
        }
        Ok(comp)
    }

    /// The model vocabulary size the masks cover.
    pub fn vocab(&self) -> usize {
        self.vocab
    }
}

/// llguidance's defaults, with error messages that do not echo the whole grammar and
/// the tokens so far (they go to HTTP clients and terminals).
fn limits() -> ParserLimits {
    ParserLimits {
        verbose_errors: false,
        ..ParserLimits::default()
    }
}
