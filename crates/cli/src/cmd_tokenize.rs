//! `rwkv tokenize` and `rwkv detokenize`: text ↔ World token ids.
//!
//! Vocabulary: the model's own when `--model` names a GGUF that carries one
//! (`tokenizer.ggml.tokens`), else the bundled World vocabulary (`rwkv_vocab_v20230424.txt`),
//! which is what SafeTensors and `.pth` models use.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rwkv_engine::{ModelFile, Tokenizer};

/// The tokenizer for `model`, or the bundled one. Says on stderr which one it uses when
/// a model was given but has no vocabulary of its own.
fn load_tokenizer(model: Option<&Path>) -> Result<Tokenizer> {
    if let Some(path) = model {
        let file =
            ModelFile::open(path).with_context(|| format!("opening model {}", path.display()))?;
        if let Some(t) = Tokenizer::from_gguf(&file)? {
            return Ok(t);
        }
        eprintln!(
            "note: {} ({}) has no vocabulary of its own; using the bundled World vocabulary",
            path.display(),
            file.format().name()
        );
    }
    Ok(Tokenizer::world()?)
}

/// A token's bytes for display: valid UTF-8 as text with `\n`, `\t`, `\"`, `\\` and
/// invisible characters escaped (Rust's `escape_debug`), other bytes as `\xHH`.
pub fn escape_piece(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    for chunk in bytes.utf8_chunks() {
        out.extend(chunk.valid().chars().flat_map(char::escape_debug));
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

pub mod tokenize {
    use super::*;

    /// Turn text into token ids (and show each token's bytes).
    #[derive(clap::Args, Debug)]
    pub struct Args {
        /// Model whose vocabulary to use (GGUF with `tokenizer.ggml.tokens`); other models
        /// and no model use the bundled World vocabulary.
        #[arg(long, value_name = "M")]
        pub model: Option<PathBuf>,
        /// Read the text from this file (`-` = standard input) instead of TEXT; its bytes
        /// are encoded as they are (UTF-8 or not).
        #[arg(long, value_name = "F", conflicts_with = "text")]
        pub file: Option<PathBuf>,
        /// Print one JSON object: {"tokenizer", "count", "bytes", "ids", "pieces"}.
        #[arg(long)]
        pub json: bool,
        /// The text to encode.
        #[arg(required_unless_present = "file")]
        pub text: Option<String>,
    }

    /// Prints the ids on the first line (space-separated, ready for `rwkv detokenize`),
    /// then one line per token: id and quoted, escaped piece. With `--json`, one object.
    pub fn run(args: Args) -> Result<()> {
        let bytes = match (&args.text, &args.file) {
            (Some(t), _) => t.clone().into_bytes(),
            (None, Some(f)) if f.as_os_str() == "-" => {
                let mut b = Vec::new();
                std::io::stdin()
                    .read_to_end(&mut b)
                    .context("reading standard input")?;
                b
            }
            (None, Some(f)) => {
                std::fs::read(f).with_context(|| format!("reading {}", f.display()))?
            }
            (None, None) => bail!("give TEXT or --file F"),
        };
        let tok = load_tokenizer(args.model.as_deref())?;
        let ids = tok.encode_bytes(&bytes);
        let pieces: Vec<String> = ids
            .iter()
            .map(|&id| escape_piece(tok.token_bytes(id).unwrap_or_default()))
            .collect();
        let mut out = std::io::stdout().lock();
        if args.json {
            let v = serde_json::json!({
                "tokenizer": tok.source(),
                "count": ids.len(),
                "bytes": bytes.len(),
                "ids": ids,
                "pieces": pieces,
            });
            writeln!(out, "{v}")?;
        } else {
            let line: Vec<String> = ids.iter().map(u32::to_string).collect();
            writeln!(out, "{}", line.join(" "))?;
            for (id, p) in ids.iter().zip(&pieces) {
                writeln!(out, "{id:>6}  \"{p}\"")?;
            }
            eprintln!(
                "{} tokens, {} bytes ({})",
                ids.len(),
                bytes.len(),
                tok.source()
            );
        }
        Ok(())
    }
}

pub mod detokenize {
    use super::*;

    /// Turn token ids back into text.
    #[derive(clap::Args, Debug)]
    pub struct Args {
        /// Model whose vocabulary to use (see `rwkv tokenize --model`).
        #[arg(long, value_name = "M")]
        pub model: Option<PathBuf>,
        /// Token ids: separate arguments, or lists such as `1,2,3` or `[1, 2, 3]`.
        #[arg(required = true, value_name = "IDS")]
        pub ids: Vec<String>,
    }

    /// Parses `1 2 3`, `1,2,3`, `[1, 2, 3]` (any mix) into ids.
    pub fn parse_ids(args: &[String]) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        for arg in args {
            for part in arg.split(|c: char| c == ',' || c.is_whitespace() || c == '[' || c == ']') {
                if part.is_empty() {
                    continue;
                }
                let id: u32 = part
                    .parse()
                    .with_context(|| format!("`{part}` is not a token id"))?;
                ids.push(id);
            }
        }
        Ok(ids)
    }

    /// Writes the decoded bytes to stdout exactly (a token may hold part of a UTF-8
    /// character; nothing is replaced), plus a newline when stdout is a terminal.
    pub fn run(args: Args) -> Result<()> {
        let ids = parse_ids(&args.ids)?;
        let tok = load_tokenizer(args.model.as_deref())?;
        let bytes = tok.decode(&ids)?;
        let mut out = std::io::stdout().lock();
        out.write_all(&bytes)?;
        if out.is_terminal() {
            writeln!(out)?;
        }
        out.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_escaped_readably() {
        assert_eq!(escape_piece(b" world"), " world");
        assert_eq!(escape_piece(b"\n\t\"\\"), "\\n\\t\\\"\\\\");
        assert_eq!(escape_piece("你好".as_bytes()), "你好");
        assert_eq!(escape_piece(b"\xf0\x9f"), "\\xf0\\x9f");
        assert_eq!(escape_piece("a\u{200d}".as_bytes()), "a\\u{200d}");
    }

    #[test]
    fn ids_parse_from_lists_and_reject_junk() {
        let args: Vec<String> = ["[1, 2,3]", "4", " 5 "]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(detokenize::parse_ids(&args).unwrap(), vec![1, 2, 3, 4, 5]);
        assert!(detokenize::parse_ids(&["1,x".to_string()]).is_err());
        assert!(detokenize::parse_ids(&["-1".to_string()]).is_err());
    }
}
