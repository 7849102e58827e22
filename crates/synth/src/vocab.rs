//! The World vocabulary in the form llama.cpp's converter embeds it in a GGUF
//! (`tokenizer.ggml.tokens`, `tokenizer.ggml.token_type`). The token bytes come from the
//! engine's own bundled World tokenizer.

use rwkv_engine::{EngineError, Result, Tokenizer};

/// A token's bytes as llama.cpp's converter stores them in `tokenizer.ggml.tokens` for the
/// RWKV World vocabulary: Python's `repr(bytes)[2:-1]` (`_set_vocab_rwkv_world`), i.e.
/// `\\`, `\t`, `\n`, `\r`, `\xhh` for other bytes outside 0x20..0x7e, and the quote that
/// `repr` chose escaped (`'`, unless the token has `'` and no `"`, then `"`).
pub fn llama_escape_token(bytes: &[u8]) -> String {
    let has_single = bytes.contains(&b'\'');
    let has_double = bytes.contains(&b'"');
    let quote = if has_single && !has_double {
        b'"'
    } else {
        b'\''
    };
    let mut s = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => s.push_str("\\\\"),
            b'\t' => s.push_str("\\t"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            _ if b == quote => {
                s.push('\\');
                s.push(char::from(b));
            }
            0x20..=0x7e => s.push(char::from(b)),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s
}

/// llama.cpp token types (`llama_token_type` / gguf-py `TokenType`).
pub const TOKEN_TYPE_NORMAL: i32 = 1;
pub const TOKEN_TYPE_CONTROL: i32 = 3;
pub const TOKEN_TYPE_UNUSED: i32 = 5;

/// `tokenizer.ggml.tokens` and `tokenizer.ggml.token_type` for a World model of `vocab`
/// tokens exactly as `convert_hf_to_gguf.py` writes them: id 0 `<s>` (control), the
/// vocabulary file's tokens escaped by [`llama_escape_token`] (normal), then `[PAD{i}]`
/// (unused) up to `vocab`. A `vocab` below the file's 65530 entries truncates the list
/// (llama.cpp's converter would refuse; the synthetic models of tiny vocabularies need it).
///
/// Errors: [`EngineError::Tokenizer`] if the bundled vocabulary does not parse.
pub fn world_gguf_tokens(vocab: usize) -> Result<(Vec<String>, Vec<i32>)> {
    let world = Tokenizer::world()?;
    let mut tokens = vec!["<s>".to_string()];
    let mut types = vec![TOKEN_TYPE_CONTROL];
    for id in 1..world.vocab_size() as u32 {
        let bytes = world
            .token_bytes(id)
            .ok_or_else(|| EngineError::Tokenizer {
                what: format!("bundled World vocabulary: no token {id}"),
            })?;
        tokens.push(llama_escape_token(bytes));
        types.push(TOKEN_TYPE_NORMAL);
    }
    tokens.truncate(vocab);
    types.truncate(vocab);
    for i in tokens.len()..vocab {
        tokens.push(format!("[PAD{i}]"));
        types.push(TOKEN_TYPE_UNUSED);
    }
    Ok((tokens, types))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_matches_python_repr() {
        // Expected strings are what CPython prints for repr(b)[2:-1].
        assert_eq!(llama_escape_token(b"\x00"), r"\x00");
        assert_eq!(llama_escape_token(b"\n\n"), r"\n\n");
        assert_eq!(llama_escape_token(b"'"), "'");
        assert_eq!(llama_escape_token(b"\""), "\"");
        assert_eq!(llama_escape_token(b"'\""), r#"\'""#);
        assert_eq!(llama_escape_token(b"a\\"), r"a\\");
        assert_eq!(llama_escape_token("é".as_bytes()), r"\xc3\xa9");
        assert_eq!(llama_escape_token(b"\x7f~"), r"\x7f~");
    }

    #[test]
    fn world_tokens_have_llama_shape() -> Result<()> {
        let (tokens, types) = world_gguf_tokens(65536)?;
        assert_eq!(tokens.len(), 65536);
        assert_eq!(&tokens[..3], &["<s>", r"\x00", r"\x01"]);
        assert_eq!(tokens[65535], "[PAD65535]");
        assert_eq!(types[0], TOKEN_TYPE_CONTROL);
        assert_eq!(types[1], TOKEN_TYPE_NORMAL);
        assert_eq!(types[65535], TOKEN_TYPE_UNUSED);
        assert_eq!(types.iter().filter(|&&t| t == TOKEN_TYPE_UNUSED).count(), 6);
        assert!(tokens.iter().all(|t| t.is_ascii()));
        Ok(())
    }
}
