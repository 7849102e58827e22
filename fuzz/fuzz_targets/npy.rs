//! `.npy` import (`npy::parse_f32`) on arbitrary bytes: `Ok` or an error naming the file,
//! never a panic; what it accepts has `product(shape)` values, and `encode_f32` of them
//! parses back to the same shape and the same bits.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use rwkv_engine::npy;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.npy");
    match npy::parse_f32(path, data) {
        Ok((shape, values)) => {
            assert_eq!(shape.iter().product::<usize>(), values.len());
            if shape.len() <= npy::MAX_DIMS {
                let bytes = npy::encode_f32(&shape, &values).expect("encode what was read");
                let (s2, v2) = npy::parse_f32(path, &bytes).expect("parse what was written");
                assert_eq!(s2, shape);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&v2), bits(&values));
            }
        }
        Err(e) => assert!(e.to_string().contains("fuzz.npy"), "{e}"),
    }
});
