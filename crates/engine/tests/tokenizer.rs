//! World tokenizer against its peers: BlinkDL's `rwkv` package (`TRIE_TOKENIZER`, whose ids
//! are in `shared/fixtures/tokenizer_ref.json` and in the generated corpus
//! `tests/data/tokenizer_corpus.jsonl.gz`) and llama.cpp's GGUF vocabulary.
//! Property tests: round trip and streaming, plus an independent naive longest-match
//! encoder written here from the definition (a hash set of tokens, longest length first).

// Not library code: a failed setup or assertion should stop the run loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use anyhow::{anyhow, ensure, Context, Result};
use proptest::prelude::*;
use rwkv_engine::format::MetaValue;
use rwkv_engine::tokenizer::{END_OF_TEXT, WORLD_VOCAB_FILE};
use rwkv_engine::{EngineError, ModelFile, Tokenizer};
use serde_json::Value;
use sha2::{Digest, Sha256};

mod support;

use support::fixtures;

fn read_fixture(name: &str) -> Result<Vec<u8>> {
    let path = fixtures().join(name);
    std::fs::read(&path).with_context(|| {
        format!(
            "reading fixture {} (is ../shared/fixtures next to the repo?)",
            path.display()
        )
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn ref_cases() -> Result<Vec<Value>> {
    let json: Value = serde_json::from_slice(&read_fixture("tokenizer_ref.json")?)?;
    let cases = json["cases"]
        .as_array()
        .ok_or_else(|| anyhow!("no cases"))?;
    ensure!(
        cases.len() >= 6,
        "expected at least 6 reference cases, got {}",
        cases.len()
    );
    Ok(cases.clone())
}

fn ids_of(v: &Value) -> Result<Vec<u32>> {
    v.as_array()
        .ok_or_else(|| anyhow!("ids not an array"))?
        .iter()
        .map(|x| {
            x.as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .ok_or_else(|| anyhow!("bad id {x}"))
        })
        .collect()
}

#[test]
fn bundled_vocab_is_the_reference_file() -> Result<()> {
    let json: Value = serde_json::from_slice(&read_fixture("tokenizer_ref.json")?)?;
    let want = json["vocab_sha256"]
        .as_str()
        .ok_or_else(|| anyhow!("no vocab_sha256"))?;
    assert_eq!(hex(&Sha256::digest(WORLD_VOCAB_FILE)), want);
    assert_eq!(
        WORLD_VOCAB_FILE,
        read_fixture("rwkv_vocab_v20230424.txt")?.as_slice()
    );
    let t = Tokenizer::world()?;
    // ids 1..=65529 in the file plus end-of-text 0.
    assert_eq!(t.vocab_size(), 65530);
    assert_eq!(t.token_bytes(END_OF_TEXT), Some(&b""[..]));
    assert_eq!(t.token_bytes(65529), Some(&[b' '; 128][..]));
    assert_eq!(t.token_bytes(65530), None);
    Ok(())
}

#[test]
fn reference_cases_give_identical_ids_and_pieces() -> Result<()> {
    let t = Tokenizer::world()?;
    for case in ref_cases()? {
        let name = case["name"].as_str().unwrap_or("?");
        let text = case["text"]
            .as_str()
            .ok_or_else(|| anyhow!("{name}: no text"))?;
        assert_eq!(
            hex(text.as_bytes()),
            case["utf8_hex"].as_str().unwrap_or(""),
            "{name}: utf8"
        );
        let want = ids_of(&case["ids"])?;
        let got = t.encode(text);
        assert_eq!(got, want, "{name}: ids");
        let pieces: Vec<String> = got
            .iter()
            .map(|&id| hex(t.token_bytes(id).unwrap_or(b"?")))
            .collect();
        let want_pieces: Vec<&str> = case["pieces_hex"]
            .as_array()
            .ok_or_else(|| anyhow!("{name}: no pieces"))?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(pieces, want_pieces, "{name}: pieces");
        assert_eq!(t.decode(&want)?, text.as_bytes(), "{name}: decode");
    }
    Ok(())
}

#[test]
fn encode_into_appends_and_reuses_the_buffer() -> Result<()> {
    let t = Tokenizer::world()?;
    let mut out = vec![7u32];
    t.encode_into(b"Hello", &mut out);
    t.encode_into(b", world", &mut out);
    // "Hello" = 33155, "," = 45, " world" = 40213 (tokenizer_ref.json, case english).
    assert_eq!(out, vec![7, 33155, 45, 40213]);
    assert_eq!(t.encode(""), Vec::<u32>::new());
    assert_eq!(t.longest_prefix(b"Hello, world"), Some((33155, 5)));
    assert_eq!(t.longest_prefix(b""), None);
    Ok(())
}

#[test]
fn decode_rejects_ids_past_the_vocabulary_naming_them() -> Result<()> {
    let t = Tokenizer::world()?;
    let err = t
        .decode(&[33155, 65535])
        .err()
        .ok_or_else(|| anyhow!("65535 decoded"))?;
    assert!(matches!(err, EngineError::InvalidInput { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("65535") && msg.contains("position 1") && msg.contains("0..65530"),
        "{msg}"
    );
    let mut buf = b"kept".to_vec();
    assert!(t.decode_into(&[33155, 70000], &mut buf).is_err());
    assert_eq!(
        buf, b"kept",
        "a failed decode_into leaves the buffer as it was"
    );
    Ok(())
}

#[test]
fn stream_decoder_holds_back_split_characters() -> Result<()> {
    let t = Tokenizer::world()?;
    // 😀 = F0 9F 98 80 = tokens 3319 (F0 9F), 153 (98), 129 (80): tokenizer_ref.json, emoji.
    assert_eq!(t.encode("😀"), vec![3319, 153, 129]);
    let mut s = t.stream_decoder();
    assert_eq!(s.push(33155)?, "Hello");
    assert_eq!(s.push(3319)?, "");
    assert_eq!(s.pending_bytes(), b"\xf0\x9f");
    assert_eq!(s.push(153)?, "");
    assert_eq!(s.push(129)?, "😀");
    assert_eq!(s.pending_bytes(), b"");
    // A bad id leaves the state alone.
    assert_eq!(s.push(3319)?, "");
    assert!(s.push(65530).is_err());
    assert_eq!(s.pending_bytes(), b"\xf0\x9f");
    // An incomplete sequence followed by ASCII is invalid for good: U+FFFD, then the text.
    assert_eq!(s.push(45)?, "\u{fffd},");
    assert_eq!(s.push(3319)?, "");
    assert_eq!(s.flush(), "\u{fffd}");
    assert_eq!(s.flush(), "");
    assert_eq!(s.push_all(&[3319, 153, 129, END_OF_TEXT])?, "😀");
    Ok(())
}

// ---- the GGUF vocabulary -------------------------------------------------------------

/// The GGUF vocabulary written by llama.cpp's converter equals the bundled one on every id
/// below 65530; ids 65530.. are `[PAD…]` and decode to nothing.
#[test]
fn gguf_vocabulary_equals_bundled() -> Result<()> {
    let world = Tokenizer::world()?;
    for name in ["rwkv7-tiny-Q8_0.gguf", "rwkv7-small-Q4_K_M.gguf"] {
        let file = ModelFile::open(fixtures().join(name))?;
        let g = Tokenizer::from_gguf(&file)?.ok_or_else(|| anyhow!("{name}: no vocabulary"))?;
        assert_eq!(g.vocab_size(), 65536, "{name}");
        for id in 0..65536u32 {
            let want = world.token_bytes(id).unwrap_or(b"");
            assert_eq!(g.token_bytes(id), Some(want), "{name}: token {id}");
        }
        for case in ref_cases()? {
            let text = case["text"].as_str().unwrap_or("");
            assert_eq!(
                g.encode(text),
                ids_of(&case["ids"])?,
                "{name}: {}",
                case["name"]
            );
        }
    }
    Ok(())
}

#[test]
fn safetensors_has_no_gguf_vocabulary() -> Result<()> {
    let file = ModelFile::open(fixtures().join("rwkv7-tiny.safetensors"))?;
    assert!(Tokenizer::from_gguf(&file)?.is_none());
    Ok(())
}

/// A GGUF holding only tokenizer metadata: the 256 single bytes escaped as llama.cpp's
/// converter does (`repr(bytes)[2:-1]`), plus `extra` tokens, with token types.
fn small_gguf(model: &str, extra: &[(&str, i32)]) -> Vec<u8> {
    let mut tokens = vec![MetaValue::String("<s>".into())];
    let mut types = vec![MetaValue::I32(3)];
    for b in 0u8..=255 {
        let esc = match b {
            b'\\' => "\\\\".to_string(),
            b'\t' => "\\t".into(),
            b'\n' => "\\n".into(),
            b'\r' => "\\r".into(),
            0x20..=0x7e => (b as char).to_string(),
            _ => format!("\\x{b:02x}"),
        };
        tokens.push(MetaValue::String(esc));
        types.push(MetaValue::I32(1));
    }
    for (t, ty) in extra {
        tokens.push(MetaValue::String((*t).into()));
        types.push(MetaValue::I32(*ty));
    }
    support::Gguf::new()
        .kv("general.architecture", MetaValue::String("rwkv7".into()))
        .kv("tokenizer.ggml.model", MetaValue::String(model.into()))
        .kv("tokenizer.ggml.tokens", support::arr(tokens))
        .kv("tokenizer.ggml.token_type", support::arr(types))
        .bytes()
}

#[test]
fn gguf_tokens_unescape_and_types_apply() -> Result<()> {
    let bytes = small_gguf(
        "rwkv",
        &[
            ("\\xe4\\xbd\\xa0\\xe5\\xa5\\xbd", 1),
            (" \\'hi\\'\\n", 1),
            ("[PAD259]", 5),
        ],
    );
    let file = ModelFile::from_bytes("small.gguf", &bytes)?;
    let t = Tokenizer::from_gguf(&file)?.ok_or_else(|| anyhow!("no vocabulary"))?;
    assert_eq!(t.vocab_size(), 260);
    assert_eq!(t.token_bytes(257), Some("你好".as_bytes()));
    assert_eq!(t.token_bytes(258), Some(&b" 'hi'\n"[..]));
    assert_eq!(
        t.token_bytes(259),
        Some(&b""[..]),
        "UNUSED pad decodes to nothing"
    );
    assert_eq!(t.token_bytes(1 + u32::from(b'\\')), Some(&b"\\"[..]));
    assert_eq!(t.encode("你好 'hi'\n[PAD259]")[..2], [257, 258]);
    assert_eq!(t.decode(&[0, 257, 259])?, "你好".as_bytes());
    Ok(())
}

#[test]
fn gguf_vocabulary_errors_name_file_and_token() -> Result<()> {
    let file = ModelFile::from_bytes("bpe.gguf", &small_gguf("gpt2", &[]))?;
    let e = Tokenizer::from_gguf(&file)
        .err()
        .ok_or_else(|| anyhow!("gpt2 vocabulary accepted"))?;
    assert!(matches!(e, EngineError::Tokenizer { .. }));
    assert!(
        e.to_string().contains("bpe.gguf") && e.to_string().contains("gpt2"),
        "{e}"
    );

    let file = ModelFile::from_bytes("esc.gguf", &small_gguf("rwkv", &[("ok", 1), ("bad\\q", 1)]))?;
    let e = Tokenizer::from_gguf(&file)
        .err()
        .ok_or_else(|| anyhow!("bad escape accepted"))?;
    assert!(
        e.to_string().contains("esc.gguf") && e.to_string().contains("tokens[258]"),
        "{e}"
    );

    let no_vocab = support::Gguf::new()
        .kv("general.architecture", MetaValue::String("rwkv7".into()))
        .bytes();
    assert!(Tokenizer::from_gguf(&ModelFile::from_bytes("none.gguf", &no_vocab)?)?.is_none());
    Ok(())
}

// ---- the generated corpus ------------------------------------------------------------

/// Every record of the ≈1 MB mixed-language corpus gives the ids BlinkDL's tokenizer gave
/// (`tests/data/make_tokenizer_corpus.py`).
#[test]
fn corpus_ids_identical_to_rwkv_package() -> Result<()> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizer_corpus.jsonl.gz");
    let mut text = String::new();
    flate2::read::GzDecoder::new(
        std::fs::File::open(&path).with_context(|| path.display().to_string())?,
    )
    .read_to_string(&mut text)?;
    let t = Tokenizer::world()?;
    let (mut records, mut bytes, mut tokens) = (0usize, 0usize, 0usize);
    let mut scripts: HashMap<String, usize> = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let rec: Value = serde_json::from_str(line).with_context(|| format!("record {n}"))?;
        let s = rec["text"]
            .as_str()
            .ok_or_else(|| anyhow!("record {n}: no text"))?;
        let want = ids_of(&rec["ids"])?;
        let got = t.encode(s);
        if got != want {
            let at = got
                .iter()
                .zip(&want)
                .position(|(a, b)| a != b)
                .unwrap_or(got.len().min(want.len()));
            panic!(
                "record {n} ({}): ids differ at token {at}: got {:?}, want {:?}",
                rec["kind"],
                &got[at..(at + 5).min(got.len())],
                &want[at..(at + 5).min(want.len())]
            );
        }
        assert_eq!(t.decode(&got)?, s.as_bytes(), "record {n}: round trip");
        *scripts
            .entry(rec["kind"].as_str().unwrap_or("?").to_string())
            .or_default() += s.len();
        records += 1;
        bytes += s.len();
        tokens += got.len();
    }
    assert!(bytes >= 1_000_000, "corpus has only {bytes} bytes");
    assert!(
        scripts.len() >= 9,
        "corpus covers only {:?}",
        scripts.keys()
    );
    eprintln!("corpus: {records} records, {bytes} bytes, {tokens} tokens, kinds {scripts:?}");
    Ok(())
}

// ---- properties ----------------------------------------------------------------------

/// Longest match from the definition: at each position try every length from the longest
/// token down, in a hash map of the vocabulary. Slow and obviously right.
struct Naive {
    map: HashMap<Vec<u8>, u32>,
    max_len: usize,
}

impl Naive {
    fn new(t: &Tokenizer) -> Naive {
        let mut map = HashMap::new();
        let mut max_len = 0;
        for id in 1..t.vocab_size() as u32 {
            if let Some(b) = t.token_bytes(id).filter(|b| !b.is_empty()) {
                map.insert(b.to_vec(), id);
                max_len = max_len.max(b.len());
            }
        }
        Naive { map, max_len }
    }

    fn encode(&self, s: &[u8]) -> Vec<u32> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < s.len() {
            let mut len = self.max_len.min(s.len() - i);
            loop {
                if let Some(&id) = self.map.get(&s[i..i + len]) {
                    out.push(id);
                    i += len;
                    break;
                }
                len -= 1;
            }
        }
        out
    }
}

fn naive() -> &'static Naive {
    static N: std::sync::OnceLock<Naive> = std::sync::OnceLock::new();
    N.get_or_init(|| Naive::new(&Tokenizer::world().unwrap()))
}

/// Strings mixing scripts that the vocabulary covers unevenly, plus whitespace runs.
fn text_strategy() -> impl Strategy<Value = String> {
    let pieces = prop_oneof![
        any::<String>(),
        "[ a-zA-Z0-9.,!?'\"\\n\\t-]{0,40}",
        "[你好世界中文测试北京的是]{0,12}",
        "[こんにちはカタナ]{0,12}",
        "[привет мир]{0,16}",
        "[😀👍🏽🇯🇵‍]{0,8}",
        "[ \\n\\t#=*-]{0,140}",
    ];
    prop::collection::vec(pieces, 0..8).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn decode_encode_round_trips(s in text_strategy()) {
        let t = Tokenizer::world().unwrap();
        let ids = t.encode(&s);
        prop_assert!(ids.iter().all(|&id| id != END_OF_TEXT));
        prop_assert_eq!(t.decode(&ids).unwrap(), s.as_bytes());
    }

    #[test]
    fn trie_agrees_with_naive_longest_match(s in text_strategy()) {
        let t = Tokenizer::world().unwrap();
        prop_assert_eq!(t.encode(&s), naive().encode(s.as_bytes()));
    }

    #[test]
    fn arbitrary_bytes_round_trip(b in prop::collection::vec(any::<u8>(), 0..200)) {
        let t = Tokenizer::world().unwrap();
        let ids = t.encode_bytes(&b);
        prop_assert_eq!(&ids, &naive().encode(&b));
        prop_assert_eq!(t.decode(&ids).unwrap(), b);
    }

    /// Streaming any text's ids in any chunks gives the text; streaming arbitrary ids gives
    /// the lossy decoding of all of them.
    #[test]
    fn streaming_equals_whole_decode(
        s in text_strategy(),
        raw in prop::collection::vec(0u32..65530, 0..60),
        cuts in prop::collection::vec(0usize..64, 0..10),
    ) {
        let t = Tokenizer::world().unwrap();
        for (ids, want) in [
            (t.encode(&s), s.clone()),
            (raw.clone(), String::from_utf8_lossy(&t.decode(&raw).unwrap()).into_owned()),
        ] {
            let mut bounds: Vec<usize> = cuts.iter().map(|&c| c.min(ids.len())).collect();
            bounds.push(0);
            bounds.push(ids.len());
            bounds.sort_unstable();
            let mut dec = t.stream_decoder();
            let mut got = String::new();
            for w in bounds.windows(2) {
                let chunk = &ids[w[0]..w[1]];
                if chunk.len() == 1 {
                    got.push_str(dec.push(chunk[0]).unwrap());
                } else {
                    got.push_str(dec.push_all(chunk).unwrap());
                }
                prop_assert!(dec.pending_bytes().len() <= 3);
            }
            got.push_str(dec.flush());
            prop_assert_eq!(got, want);
        }
    }
}
