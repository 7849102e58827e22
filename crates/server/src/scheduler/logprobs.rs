//! Log-probabilities of a token and its most likely alternatives, from raw logits
//! (the model's distribution at temperature 1, before penalties and sampling).

use rwkv_engine::Tokenizer;

use crate::openai::response::{TokenLogprob, TopLogprob};

/// `log softmax(logits)[id]` with the `top` most likely tokens.
pub fn token_logprob(tok: &Tokenizer, logits: &[f32], id: u32, top: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits
        .iter()
        .filter(|l| l.is_finite())
        .map(|&l| ((l - max) as f64).exp())
        .sum();
    let log_z = max as f64 + sum.ln();
    let lp = |i: u32| {
        (logits.get(i as usize).copied().unwrap_or(f32::NEG_INFINITY) as f64 - log_z) as f32
    };
    let bytes = |i: u32| tok.token_bytes(i).unwrap_or_default().to_vec();
    let mut top_ids: Vec<u32> = Vec::new();
    if top > 0 {
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        let k = top.min(idx.len());
        let key = |i: &u32| {
            let l = logits[*i as usize];
            if l.is_nan() {
                f32::NEG_INFINITY
            } else {
                l
            }
        };
        idx.select_nth_unstable_by(k - 1, |a, b| key(b).total_cmp(&key(a)));
        idx.truncate(k);
        idx.sort_by(|a, b| key(b).total_cmp(&key(a)).then(a.cmp(b)));
        top_ids = idx;
    }
    TokenLogprob {
        token: String::from_utf8_lossy(&bytes(id)).into_owned(),
        logprob: lp(id),
        bytes: bytes(id),
        top_logprobs: top_ids
            .into_iter()
            .map(|i| TopLogprob {
                token: String::from_utf8_lossy(&bytes(i)).into_owned(),
                logprob: lp(i),
                bytes: bytes(i),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_a_normalised_log_softmax_with_the_best_first() {
        let tok = Tokenizer::world().unwrap();
        let mut logits = vec![0f32; tok.vocab_size()];
        logits[65] = 5.0;
        logits[66] = 4.0;
        let t = token_logprob(&tok, &logits, 66, 3);
        let z: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
        assert!((t.logprob as f64 - (4.0 - z.ln())).abs() < 1e-4);
        assert_eq!(t.top_logprobs.len(), 3);
        assert_eq!(t.top_logprobs[0].bytes, tok.token_bytes(65).unwrap());
        assert!(t.top_logprobs[0].logprob > t.top_logprobs[1].logprob);
        assert_eq!(t.bytes, tok.token_bytes(66).unwrap());
    }
}
