//! Unit tests of the parsers and the trie. Expected literal values are what Python 3.11
//! gives for the same literal (`eval(lit)`, `.encode("utf-8")` for `str`); GGUF escapes are
//! `repr(bytes)[2:-1]` as llama.cpp's converter writes them. Whole-vocabulary and
//! reference-id tests live in `crates/engine/tests/tokenizer.rs`.

use super::trie::Trie;
use super::vocab::{parse_py_literal, parse_world_vocab, unescape_gguf_token};
use super::*;

type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

#[test]
fn python_literals_decode_like_python() -> TestResult {
    let cases: &[(&str, &[u8])] = &[
        (r"'\x00'", b"\x00"),
        // str escape = code point U+0080 (2 UTF-8 bytes); bytes escape = one byte.
        (r"'\x80'", b"\xc2\x80"),
        (r"b'\x80'", b"\x80"),
        (r"b'\xe4\xbd'", b"\xe4\xbd"),
        (r"'\u2002'", b"\xe2\x80\x82"),
        (r"'\U0001F600'", "😀".as_bytes()),
        (r"'\t\n\r\\'", b"\t\n\r\\"),
        (r#""'""#, b"'"),
        (r#"'"\''"#, b"\"'"),
        (r"'\101\0'", b"A\x00"),
        (r"'\a\b\f\v'", b"\x07\x08\x0c\x0b"),
        // Unknown escapes keep the backslash, as Python does.
        (r"'\q'", b"\\q"),
        ("'你好'", "你好".as_bytes()),
        ("' '", b" "),
    ];
    for &(lit, want) in cases {
        let got = parse_py_literal(lit).map_err(|e| format!("{lit}: {e}"))?;
        assert_eq!(got, want, "literal {lit}");
    }
    Ok(())
}

#[test]
fn python_literal_errors_are_reported() {
    for lit in [
        "'abc",
        "abc",
        r"'\'",
        r"'\ud800'",
        r"'\x4'",
        r"'\N{BULLET}'",
        "b'é'",
        r"b'\777'",
        "'a'b'",
        r"'\U00110000'",
    ] {
        assert!(parse_py_literal(lit).is_err(), "{lit} should not parse");
    }
}

#[test]
fn vocab_lines_parse_with_crlf_and_errors_name_the_line() -> TestResult {
    let ok = parse_world_vocab(b"1 'a' 1\r\n2 b'\\xff' 1\r\n3 ' b' 2\r\n", "t")?;
    assert_eq!(
        ok,
        vec![
            b"".to_vec(),
            b"a".to_vec(),
            b"\xff".to_vec(),
            b" b".to_vec()
        ]
    );

    let cases: &[(&[u8], &str)] = &[
        (b"1 'a' 1\n2 'bc' 3\n", "t line 2"),
        (b"1 'a' 1\n3 'b' 1\n", "t line 2"),
        (b"1 'a' 1\n2 'b\n", "t line 2"),
        (b"1 'a' 1\nx 'b' 1\n", "t line 2"),
        (b"1 'a'\n", "t line 1"),
        (b"1 'a' 1\n\n2 'b' 1\n", "t line 2"),
        (b"1 '' 0\n", "t line 1"),
        (b"", "no tokens"),
    ];
    for &(text, want) in cases {
        match parse_world_vocab(text, "t") {
            Ok(_) => return Err(format!("{:?} parsed", text.escape_ascii().to_string()).into()),
            Err(e) => assert!(e.contains(want), "error `{e}` should contain `{want}`"),
        }
    }
    Ok(())
}

#[test]
fn gguf_escapes_invert_python_bytes_repr() -> TestResult {
    // (repr(b)[2:-1], b), from Python.
    let cases: &[(&str, &[u8])] = &[
        (r"\x00", b"\x00"),
        (r"\t", b"\t"),
        (r"\\", b"\\"),
        (r"\\'", b"\\'"),
        (r#""\'"#, b"\"'"),
        ("'", b"'"),
        (r"\xe4\xbd\xa0", "你".as_bytes()),
        (r"\x7f", b"\x7f"),
        (" the", b" the"),
    ];
    for &(s, want) in cases {
        assert_eq!(unescape_gguf_token(s)?, want, "{s}");
    }
    for bad in [r"\", r"\x4", r"\xzz", r"\q"] {
        assert!(
            unescape_gguf_token(bad).is_err(),
            "{bad} should not unescape"
        );
    }
    Ok(())
}

#[test]
fn trie_finds_longest_prefix_and_larger_duplicate_id() -> TestResult {
    let keys: Vec<(&[u8], u32)> = vec![
        (b"a", 1),
        (b"ab", 2),
        (b"abcd", 3),
        (b"b", 4),
        (b"c", 5),
        (b"d", 6),
        (b"ab", 7),
    ];
    let trie = Trie::build(&keys)?;
    assert_eq!(trie.longest_prefix(b"abc"), Some((7, 2)));
    assert_eq!(trie.longest_prefix(b"abcd!"), Some((3, 4)));
    assert_eq!(trie.longest_prefix(b"x"), None);
    assert_eq!(trie.longest_prefix(b""), None);
    let mut out = Vec::new();
    trie.encode_into(b"abcabcdd", &mut out);
    // "ab" (7, larger of the duplicates), "c", "abcd", "d"
    assert_eq!(out, vec![7, 5, 3, 6]);
    // Odd and short lengths (the last byte goes through the single-step path).
    for (text, want) in [
        (&b"a"[..], vec![1]),
        (b"ab", vec![7]),
        (b"abc", vec![7, 5]),
        (b"", vec![]),
    ] {
        out.clear();
        trie.encode_into(text, &mut out);
        assert_eq!(out, want, "{}", text.escape_ascii());
    }
    assert!(Trie::build(&[(b"", 1)]).is_err());
    assert!(Trie::build(&[(b"a", 0)]).is_err());
    Ok(())
}

/// Node "xy" exists but is no token: the pair step must keep the 1-byte token and go on.
#[test]
fn trie_pair_step_through_inner_node_without_token() -> TestResult {
    let keys: Vec<(&[u8], u32)> = vec![(b"x", 1), (b"y", 2), (b"z", 3), (b"xyz", 4), (b"xyzzy", 5)];
    let trie = Trie::build(&keys)?;
    let cases: [(&[u8], Vec<u32>); 6] = [
        (b"xyz", vec![4]),
        (b"xyy", vec![1, 2, 2]),
        (b"xy", vec![1, 2]),
        (b"xyzzyx", vec![5, 1]),
        (b"xyzzz", vec![4, 3, 3]),
        (b"zzxyzxy", vec![3, 3, 4, 1, 2]),
    ];
    for (text, want) in cases {
        let mut out = Vec::new();
        trie.encode_into(text, &mut out);
        assert_eq!(out, want, "{}", text.escape_ascii());
    }
    Ok(())
}

#[test]
fn from_pieces_requires_every_single_byte() {
    let mut pieces: Vec<Vec<u8>> = vec![Vec::new()];
    pieces.extend((0u8..=255).filter(|&b| b != 0x41).map(|b| vec![b]));
    match Tokenizer::from_pieces(pieces, "t") {
        Ok(_) => unreachable!("a vocabulary without byte 0x41 was accepted"),
        Err(e) => assert!(e.to_string().contains("0x41"), "{e}"),
    }
    let mut with_eot_bytes: Vec<Vec<u8>> = vec![b"x".to_vec()];
    with_eot_bytes.extend((0u8..=255).map(|b| vec![b]));
    assert!(Tokenizer::from_pieces(with_eot_bytes, "t").is_err());
}

#[test]
fn padding_ids_decode_to_nothing_and_are_never_produced() -> TestResult {
    let mut pieces: Vec<Vec<u8>> = vec![Vec::new()];
    pieces.extend((0u8..=255).map(|b| vec![b]));
    pieces.push(b"hello".to_vec());
    pieces.push(Vec::new()); // a pad
    let t = Tokenizer::from_pieces(pieces, "t")?;
    assert_eq!(t.vocab_size(), 259);
    assert_eq!(t.encode("hello!"), vec![257, 1 + u32::from(b'!')]);
    assert_eq!(t.decode(&[257, 258, 0])?, b"hello");
    let e = t.decode(&[257, 259]).err().ok_or("id 259 decoded")?;
    assert!(
        e.to_string().contains("259") && e.to_string().contains("position 1"),
        "{e}"
    );
    Ok(())
}
