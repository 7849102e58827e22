//! World vocab file parser on arbitrary text: it returns a tokenizer or an error naming a
//! line, never panics; a tokenizer it returns round-trips the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rwkv_engine::Tokenizer;

fuzz_target!(|data: &[u8]| {
    // The 256 single bytes first, so that inputs can reach the trie build.
    let mut text = String::new();
    for b in 0..=255u8 {
        text.push_str(&format!("{} b'\\x{b:02x}' 1\n", u32::from(b) + 1));
    }
    let (prefix, rest) = match data.split_first() {
        Some((&flag, rest)) if flag & 1 == 1 => (true, rest),
        Some((_, rest)) => (false, rest),
        None => (false, data),
    };
    let mut bytes = if prefix {
        text.into_bytes()
    } else {
        Vec::new()
    };
    bytes.extend_from_slice(rest);
    match Tokenizer::from_world_vocab(&bytes, "fuzz") {
        Ok(t) => {
            let ids = t.encode_bytes(rest);
            assert_eq!(t.decode(&ids).expect("decode"), rest);
        }
        Err(e) => assert!(e.to_string().contains("fuzz"), "{e}"),
    }
});
