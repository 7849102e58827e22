//! llama.cpp GBNF → llguidance Lark, token by token (the same translation as
//! llguidance's own Python `gbnf_to_lark`):
//! - `name ::= body` → `name: body`, one line per rule; `root` becomes `start`;
//! - `"lit"` (GBNF escapes `\n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH`) → a JSON string;
//! - `[...]`, `[^...]` → `/[...]/` (a regex: in Lark, `[x]` means "optional");
//! - `.` → `/./`; groups, `|`, `* + ?` and `{m}`, `{m,}`, `{m,n}` are the same in both;
//! - `# comments` are dropped.
//!
//! Names other than lowercase `[a-z][a-z0-9-]*` are re-spelled `r_…` (uppercase
//! letters as `_x`), since Lark reserves uppercase names for lexemes. As in llguidance,
//! string literals and character classes are lexemes (matched greedily).

use crate::error::{EngineError, Result};

/// Most rules in one grammar.
const MAX_RULES: usize = 10_000;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Defines,
    Lit(String),
    /// A character class with its brackets, already in regex syntax.
    Class(String),
    Dot,
    Open,
    Close,
    Bar,
    /// `*`, `+`, `?` or a `{m,n}` repetition.
    Op(String),
}

fn err(line: usize, what: impl Into<String>) -> EngineError {
    EngineError::constraint("gbnf", format!("line {line}: {}", what.into()))
}

/// Translates a GBNF grammar to llguidance's Lark dialect.
///
/// Errors: [`EngineError::Constraint`] (kind `gbnf`) naming the line of an unterminated
/// literal or class, a bad escape or repetition, a stray character, a body without a
/// rule, no `root` rule, or more than 10 000 rules.
pub fn gbnf_to_lark(src: &str) -> Result<String> {
    let toks = lex(src)?;
    let mut rules: Vec<(String, Vec<Tok>)> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let (line, t) = &toks[i];
        match (t, toks.get(i + 1).map(|x| &x.1)) {
            (Tok::Name(n), Some(Tok::Defines)) => {
                if rules.len() >= MAX_RULES {
                    return Err(err(*line, format!("more than {MAX_RULES} rules")));
                }
                rules.push((n.clone(), Vec::new()));
                i += 2;
            }
            _ => match rules.last_mut() {
                Some((_, body)) => {
                    body.push(t.clone());
                    i += 1;
                }
                None => return Err(err(*line, "expected `name ::=` to start a rule")),
            },
        }
    }
    if !rules.iter().any(|(n, _)| n == "root") {
        return Err(EngineError::constraint("gbnf", "no `root ::=` rule"));
    }
    let mut out = String::new();
    for (name, body) in &rules {
        out.push_str(&lark_name(name));
        out.push(':');
        let mut prev: Option<&Tok> = None;
        for t in body {
            // An empty alternative (`a ::= | "x"`, `( "x" | )`) is the empty string.
            if matches!(t, Tok::Bar | Tok::Close)
                && matches!(prev, None | Some(Tok::Bar | Tok::Open))
            {
                out.push_str(" \"\"");
            }
            prev = Some(t);
            out.push(' ');
            match t {
                Tok::Name(n) => out.push_str(&lark_name(n)),
                Tok::Lit(s) => out.push_str(&serde_json::to_string(s).unwrap_or_default()),
                Tok::Class(c) => {
                    out.push('/');
                    out.push_str(c);
                    out.push('/');
                }
                Tok::Dot => out.push_str("/(?s:.)/"),
                Tok::Open => out.push('('),
                Tok::Close => out.push(')'),
                Tok::Bar => out.push('|'),
                Tok::Op(o) => {
                    // Postfix operators bind to the previous item: no space before them.
                    out.pop();
                    out.push_str(o);
                }
                Tok::Defines => {}
            }
        }
        if matches!(prev, None | Some(Tok::Bar)) {
            out.push_str(" \"\"");
        }
        out.push('\n');
    }
    Ok(out)
}

/// `root` → `start`; lowercase names as they are; others `r_` + escaped.
fn lark_name(n: &str) -> String {
    if n == "root" {
        return "start".into();
    }
    let plain = n.starts_with(|c: char| c.is_ascii_lowercase())
        && n.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && n != "start";
    if plain {
        return n.to_string();
    }
    let mut s = String::from("r_");
    for c in n.chars() {
        if c.is_ascii_uppercase() {
            s.push('_');
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

fn lex(src: &str) -> Result<Vec<(usize, Tok)>> {
    let b: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    while i < b.len() {
        let c = b[i];
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            c if c.is_whitespace() => i += 1,
            '#' => {
                while i < b.len() && b[i] != '\n' {
                    i += 1;
                }
            }
            ':' if b.get(i + 1) == Some(&':') && b.get(i + 2) == Some(&'=') => {
                out.push((line, Tok::Defines));
                i += 3;
            }
            '"' => {
                let (s, n) = literal(&b[i + 1..], line)?;
                out.push((line, Tok::Lit(s)));
                i += 1 + n;
            }
            '[' => {
                let (s, n) = class(&b[i + 1..], line)?;
                out.push((line, Tok::Class(s)));
                i += 1 + n;
            }
            '.' => {
                out.push((line, Tok::Dot));
                i += 1;
            }
            '(' => {
                out.push((line, Tok::Open));
                i += 1;
            }
            ')' => {
                out.push((line, Tok::Close));
                i += 1;
            }
            '|' => {
                out.push((line, Tok::Bar));
                i += 1;
            }
            '*' | '+' | '?' => {
                out.push((line, Tok::Op(c.to_string())));
                i += 1;
            }
            '{' => {
                let end = b[i..]
                    .iter()
                    .position(|&x| x == '}')
                    .ok_or_else(|| err(line, "unterminated `{m,n}` repetition"))?;
                let inner: String = b[i + 1..i + end].iter().collect();
                let inner: String = inner.chars().filter(|c| !c.is_whitespace()).collect();
                let ok = !inner.is_empty()
                    && inner.chars().all(|c| c.is_ascii_digit() || c == ',')
                    && inner.matches(',').count() <= 1
                    && !inner.starts_with(',');
                if !ok {
                    return Err(err(line, format!("bad repetition `{{{inner}}}`")));
                }
                out.push((line, Tok::Op(format!("{{{inner}}}"))));
                i += end + 1;
            }
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == '-' || b[i] == '_') {
                    i += 1;
                }
                let name: String = b[start..i].iter().collect();
                if name.contains('_') {
                    return Err(err(
                        line,
                        format!("`{name}`: GBNF names use letters, digits and `-`"),
                    ));
                }
                out.push((line, Tok::Name(name)));
            }
            other => return Err(err(line, format!("unexpected character `{other}`"))),
        }
    }
    Ok(out)
}

/// One GBNF escape after `\` at `b[0]`: the character and the chars consumed.
fn escape(b: &[char], line: usize) -> Result<(char, usize)> {
    let hex = |n: usize| -> Result<(char, usize)> {
        let h: String = b
            .get(1..1 + n)
            .map(|s| s.iter().collect())
            .unwrap_or_default();
        let v = u32::from_str_radix(&h, 16)
            .ok()
            .filter(|_| h.len() == n)
            .and_then(char::from_u32)
            .ok_or_else(|| err(line, format!("bad escape `\\{}{h}`", b[0])))?;
        Ok((v, 1 + n))
    };
    match b.first() {
        Some('n') => Ok(('\n', 1)),
        Some('r') => Ok(('\r', 1)),
        Some('t') => Ok(('\t', 1)),
        Some('x') => hex(2),
        Some('u') => hex(4),
        Some('U') => hex(8),
        Some(&c) if matches!(c, '\\' | '"' | '[' | ']' | '-' | '^') => Ok((c, 1)),
        Some(c) => Err(err(line, format!("unknown escape `\\{c}`"))),
        None => Err(err(line, "a `\\` at the end of the input")),
    }
}

/// A literal's text after the opening quote; returns it and the chars consumed (with
/// the closing quote).
fn literal(b: &[char], line: usize) -> Result<(String, usize)> {
    let mut s = String::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            '"' => return Ok((s, i + 1)),
            '\\' => {
                let (c, n) = escape(&b[i + 1..], line)?;
                s.push(c);
                i += 1 + n;
            }
            '\n' => break,
            c => {
                s.push(c);
                i += 1;
            }
        }
    }
    Err(err(line, "unterminated string literal"))
}

/// A class after `[`, as a regex class `[...]` (characters that are special inside a
/// Rust regex class, or in a Lark `/regex/`, escaped); returns it and the chars consumed.
fn class(b: &[char], line: usize) -> Result<(String, usize)> {
    let mut s = String::from("[");
    let mut i = 0;
    if b.first() == Some(&'^') {
        s.push('^');
        i = 1;
    }
    let mut empty = true;
    while i < b.len() {
        let (c, n) = match b[i] {
            ']' if empty => return Err(err(line, "empty character class `[]`")),
            ']' => {
                s.push(']');
                return Ok((s, i + 1));
            }
            '\\' => {
                let (c, n) = escape(&b[i + 1..], line)?;
                (c, 1 + n)
            }
            '\n' => break,
            c => (c, 1),
        };
        empty = false;
        // A range dash stays a dash; everything else literal and escaped if punctuation.
        if c == '-'
            && b[i] == '-'
            && !s.ends_with('[')
            && !s.ends_with('^')
            && b.get(i + 1) != Some(&']')
        {
            s.push('-');
        } else if c.is_ascii_punctuation() {
            s.push('\\');
            s.push(c);
        } else if c.is_control() || c == ' ' {
            s.push_str(&format!("\\x{{{:x}}}", c as u32));
        } else {
            s.push(c);
        }
        i += n;
    }
    Err(err(line, "unterminated character class"))
}
