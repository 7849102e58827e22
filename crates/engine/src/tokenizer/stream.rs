//! Incremental detokenization for streaming generation.

use super::Tokenizer;
use crate::error::Result;

/// Turns token ids, pushed one at a time, into text as soon as it is valid UTF-8.
///
/// A World token can end in the middle of a character (Chinese and emoji are often split
/// over 2–4 byte tokens), so the bytes of an incomplete UTF-8 sequence at the end are held
/// back until the next token completes them. Bytes that can never become valid (a stray
/// continuation byte, an over-long form) are replaced by U+FFFD at once. Concatenating every
/// [`push`](Self::push) and the final [`flush`](Self::flush) gives exactly
/// `String::from_utf8_lossy(&tokenizer.decode(ids)?)`, however the ids were split.
#[derive(Debug, Clone)]
pub struct StreamDecoder {
    tokenizer: Tokenizer,
    /// Undelivered bytes: at most an incomplete UTF-8 sequence (≤ 3 bytes) between calls.
    pending: Vec<u8>,
    /// Text returned by the last call.
    text: String,
}

impl StreamDecoder {
    pub(crate) fn new(tokenizer: Tokenizer) -> Self {
        StreamDecoder {
            tokenizer,
            pending: Vec::with_capacity(256),
            text: String::with_capacity(256),
        }
    }

    /// Adds token `id` and returns the text it completes (possibly empty: a token that
    /// only starts a character, or end-of-text id 0).
    ///
    /// Errors: [`EngineError::InvalidInput`](crate::EngineError::InvalidInput) when `id` is not in
    /// the vocabulary (naming the id); the decoder is then unchanged.
    pub fn push(&mut self, id: u32) -> Result<&str> {
        self.push_all(std::slice::from_ref(&id))
    }

    /// Adds several token ids at once; same as pushing them one by one and concatenating
    /// the texts.
    ///
    /// Errors: as [`push`](Self::push); on error nothing of `ids` is taken.
    pub fn push_all(&mut self, ids: &[u32]) -> Result<&str> {
        self.text.clear();
        self.tokenizer.decode_into(ids, &mut self.pending)?;
        let mut start = 0;
        loop {
            let rest = self.pending.get(start..).unwrap_or_default();
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    self.text.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    if let Ok(s) = std::str::from_utf8(rest.get(..valid).unwrap_or_default()) {
                        self.text.push_str(s);
                    }
                    match e.error_len() {
                        // Invalid for good: one U+FFFD per maximal invalid subsequence,
                        // the same rule as `String::from_utf8_lossy`.
                        Some(bad) => {
                            self.text.push(char::REPLACEMENT_CHARACTER);
                            start += valid + bad;
                        }
                        // An incomplete sequence at the end: hold it back.
                        None => {
                            start += valid;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start.min(self.pending.len()));
        Ok(&self.text)
    }

    /// Ends the stream: returns the held-back bytes as text, an incomplete sequence
    /// replaced by U+FFFD, and leaves the decoder empty and ready for reuse.
    pub fn flush(&mut self) -> &str {
        self.text.clear();
        self.text.push_str(&String::from_utf8_lossy(&self.pending));
        self.pending.clear();
        &self.text
    }

    /// Bytes currently held back (an incomplete UTF-8 sequence, 0–3 bytes).
    pub fn pending_bytes(&self) -> &[u8] {
        &self.pending
    }
}
