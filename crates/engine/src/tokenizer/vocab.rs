//! Vocabulary readers: BlinkDL's World vocab file (Python literals) and the escaped token
//! text llama.cpp's converter writes into GGUF `tokenizer.ggml.tokens`.

/// Longest token accepted from any source, in bytes (the World vocabulary's longest is 128).
pub(crate) const MAX_TOKEN_BYTES: usize = 4096;
/// Most ids a vocabulary may have (the World vocabulary has 65 530, GGUF pads to 65 536).
pub(crate) const MAX_VOCAB: usize = 1 << 20;

/// Parses a World vocab file (`rwkv_vocab_v20230424.txt`): one token a line,
/// `<id> <python str or bytes literal> <byte length>`, ids ascending from 1 without gaps,
/// LF or CRLF line ends. Returns the pieces indexed by id, with `pieces[0]` empty
/// (id 0 is end-of-text, which the file does not list).
///
/// Same reading as BlinkDL's `TRIE_TOKENIZER.__init__` (`rwkv/rwkv_tokenizer.py`): the id
/// is the text before the first space, the byte length the text after the last space, the
/// literal what lies between; a `str` literal is UTF-8 encoded, a `bytes` literal taken as
/// is, and the length must match. Errors name the line (1-based) of `source`.
pub(crate) fn parse_world_vocab(text: &[u8], source: &str) -> Result<Vec<Vec<u8>>, String> {
    let text = std::str::from_utf8(text).map_err(|e| format!("{source}: not UTF-8 text: {e}"))?;
    let mut pieces: Vec<Vec<u8>> = vec![Vec::new()];
    let body = text.strip_suffix('\n').unwrap_or(text);
    if body.is_empty() {
        return Err(format!("{source}: no tokens"));
    }
    for (n, line) in body.split('\n').enumerate() {
        let line_no = n + 1;
        let err = |what: String| format!("{source} line {line_no}: {what}");
        let line = line.strip_suffix('\r').unwrap_or(line);
        let first = line
            .find(' ')
            .ok_or_else(|| err("expected `<id> <literal> <length>`".into()))?;
        let last = line.rfind(' ').unwrap_or(first);
        if last == first {
            return Err(err("expected `<id> <literal> <length>`".into()));
        }
        let id: usize = parse_decimal(&line[..first])
            .ok_or_else(|| err(format!("bad id `{}`", &line[..first])))?;
        let len: usize = parse_decimal(&line[last + 1..])
            .ok_or_else(|| err(format!("bad byte length `{}`", &line[last + 1..])))?;
        if id != pieces.len() {
            return Err(err(format!(
                "id {id} out of order: ids must run 1, 2, 3, … (expected {})",
                pieces.len()
            )));
        }
        if id >= MAX_VOCAB {
            return Err(err(format!(
                "id {id} exceeds the limit of {MAX_VOCAB} tokens"
            )));
        }
        let literal = line[first + 1..last].trim_matches(|c| c == ' ' || c == '\t');
        let piece =
            parse_py_literal(literal).map_err(|e| err(format!("literal {literal}: {e}")))?;
        if piece.len() != len {
            return Err(err(format!(
                "literal is {} bytes, the line says {len}",
                piece.len()
            )));
        }
        if piece.is_empty() || piece.len() > MAX_TOKEN_BYTES {
            return Err(err(format!(
                "token of {} bytes (allowed: 1..={MAX_TOKEN_BYTES})",
                piece.len()
            )));
        }
        pieces.push(piece);
    }
    Ok(pieces)
}

/// A non-empty run of ASCII digits (at most 9, so it cannot overflow).
fn parse_decimal(s: &str) -> Option<usize> {
    if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses one Python string literal — `'…'`, `"…"`, `b'…'` or `b"…"` — into bytes:
/// `str` literals UTF-8 encoded, `bytes` literals as written.
///
/// Escapes as Python 3 reads them: `\\ \' \" \a \b \f \n \r \t \v`, octal `\o`…`\ooo`,
/// `\xHH`, and in `str` only `\uHHHH` and `\UHHHHHHHH` (a code point: `'\x80'` is U+0080,
/// two UTF-8 bytes, whereas `b'\x80'` is one byte). An unknown escape keeps its backslash,
/// as in Python. Not supported (error): `\N{…}`, triple quotes, raw or f-strings.
pub(crate) fn parse_py_literal(lit: &str) -> Result<Vec<u8>, String> {
    let (is_bytes, rest) = match lit.as_bytes().first() {
        Some(b'b' | b'B') => (true, &lit[1..]),
        _ => (false, lit),
    };
    let quote = match rest.chars().next() {
        Some(q @ ('\'' | '"')) => q,
        _ => return Err("expected a quoted string".into()),
    };
    let inner = rest
        .strip_prefix(quote)
        .and_then(|r| r.strip_suffix(quote))
        .ok_or_else(|| "unterminated string".to_string())?;
    let mut out = Vec::with_capacity(inner.len());
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c == quote {
            return Err("unescaped quote inside the string".into());
        }
        if c != '\\' {
            if is_bytes && !c.is_ascii() {
                return Err(format!("non-ASCII character {c:?} in a bytes literal"));
            }
            push_char(&mut out, c);
            continue;
        }
        let Some(e) = chars.next() else {
            return Err("string ends with a lone backslash".into());
        };
        let simple = match e {
            '\\' => Some(b'\\'),
            '\'' => Some(b'\''),
            '"' => Some(b'"'),
            'a' => Some(0x07),
            'b' => Some(0x08),
            'f' => Some(0x0C),
            'n' => Some(b'\n'),
            'r' => Some(b'\r'),
            't' => Some(b'\t'),
            'v' => Some(0x0B),
            _ => None,
        };
        if let Some(b) = simple {
            out.push(b);
            continue;
        }
        let value: u32 = match e {
            '0'..='7' => {
                let mut v = e as u32 - '0' as u32;
                for _ in 0..2 {
                    match chars.peek() {
                        Some(&d @ '0'..='7') => {
                            v = v * 8 + (d as u32 - '0' as u32);
                            chars.next();
                        }
                        _ => break,
                    }
                }
                v
            }
            'x' => hex_digits(&mut chars, 2)?,
            'u' if !is_bytes => hex_digits(&mut chars, 4)?,
            'U' if !is_bytes => hex_digits(&mut chars, 8)?,
            'N' if !is_bytes => return Err("\\N{…} escapes are not supported".into()),
            other => {
                // Python keeps unknown escapes verbatim (with a DeprecationWarning).
                out.push(b'\\');
                if is_bytes && !other.is_ascii() {
                    return Err(format!("non-ASCII character {other:?} in a bytes literal"));
                }
                push_char(&mut out, other);
                continue;
            }
        };
        if is_bytes {
            let b = u8::try_from(value)
                .map_err(|_| format!("escape value {value:#o} exceeds a byte"))?;
            out.push(b);
        } else {
            // Surrogates and values past U+10FFFF cannot be UTF-8 encoded (Python raises).
            let c = char::from_u32(value)
                .ok_or_else(|| format!("escape U+{value:04X} is not a Unicode scalar value"))?;
            push_char(&mut out, c);
        }
    }
    Ok(out)
}

fn push_char(out: &mut Vec<u8>, c: char) {
    let mut buf = [0u8; 4];
    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
}

fn hex_digits(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    n: usize,
) -> Result<u32, String> {
    let mut v = 0u32;
    for _ in 0..n {
        let d = chars
            .next()
            .and_then(|c| c.to_digit(16))
            .ok_or_else(|| format!("escape needs {n} hex digits"))?;
        v = v * 16 + d;
    }
    Ok(v)
}

/// Unescapes one `tokenizer.ggml.tokens` entry of an RWKV GGUF.
///
/// llama.cpp's converter (`convert_hf_to_gguf.py`, `_set_vocab_rwkv_world`) writes each
/// token as `repr(token_bytes)[2:-1]`: Python's `bytes` repr without `b'` and `'`, i.e.
/// printable ASCII as is, `\\`, `\'` (only when the repr chose single quotes), `\t \n \r`,
/// and `\xhh` for every other byte (all non-ASCII bytes included). Checked against all
/// 65 529 tokens of `rwkv7-tiny-Q8_0.gguf`. llama.cpp reads it back with
/// `llama_unescape_rwkv_token`; this is the same inverse, except that an unknown escape is
/// an error here instead of being passed through.
pub(crate) fn unescape_gguf_token(s: &str) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c != b'\\' {
            out.push(c);
            i += 1;
            continue;
        }
        let e = *b.get(i + 1).ok_or("ends with a lone backslash")?;
        match e {
            b'\\' | b'\'' | b'"' => out.push(e),
            b't' => out.push(b'\t'),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b'x' => {
                let hex = b.get(i + 2..i + 4).ok_or("\\x needs two hex digits")?;
                let hi = (hex[0] as char).to_digit(16);
                let lo = (hex[1] as char).to_digit(16);
                match (hi, lo) {
                    (Some(h), Some(l)) => out.push((h * 16 + l) as u8),
                    _ => return Err("\\x needs two hex digits".into()),
                }
                i += 2;
            }
            other => return Err(format!("unknown escape `\\{}`", other.escape_ascii())),
        }
        i += 2;
    }
    Ok(out)
}
