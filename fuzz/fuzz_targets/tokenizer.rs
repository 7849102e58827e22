//! World tokenizer on arbitrary bytes: encoding never fails or loops, decoding gives the
//! bytes back, every id is a real token, and streaming the ids in any split (chosen by the
//! input's first byte) gives the lossy UTF-8 of the whole.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rwkv_engine::Tokenizer;

fuzz_target!(|data: &[u8]| {
    let Ok(t) = Tokenizer::world() else {
        panic!("bundled vocabulary failed to load");
    };
    let ids = t.encode_bytes(data);
    assert!(ids.len() <= data.len());
    assert!(ids
        .iter()
        .all(|&id| id != 0 && (id as usize) < t.vocab_size()));
    let back = t.decode(&ids).expect("ids from encode decode");
    assert_eq!(back, data, "round trip");

    // Greedy: each emitted token is the longest prefix of the rest.
    let mut pos = 0;
    for &id in &ids {
        let (longest, len) = t.longest_prefix(&data[pos..]).expect("non-empty rest");
        assert_eq!(longest, id);
        pos += len;
    }

    let step = data.first().map_or(1, |&b| usize::from(b % 7) + 1);
    let mut dec = t.stream_decoder();
    let mut text = String::new();
    for chunk in ids.chunks(step) {
        text.push_str(dec.push_all(chunk).expect("valid ids"));
        assert!(dec.pending_bytes().len() <= 3);
    }
    text.push_str(dec.flush());
    assert_eq!(text, String::from_utf8_lossy(data));
});
