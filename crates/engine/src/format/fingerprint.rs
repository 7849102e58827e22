//! The model fingerprint: sha256 of a model's config and tensor table, which states and
//! cached embeddings carry so that they are never used with another model.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::Rwkv7Config;
use crate::format::ModelFile;

/// Version string hashed first into every fingerprint; bump it if the hashed text changes.
const FINGERPRINT_DOMAIN: &str = "rwkv-studio model fingerprint v1\n";

/// sha256 identifying a model: its config and its tensor table (names, encodings,
/// shapes) — not the tensor bytes, so it costs nothing at load. Two files with the same
/// tensors in the same encodings and shapes get the same fingerprint; a GGUF and a
/// SafeTensors of one model differ (other names and encodings, slightly other numbers).
/// Serialized as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModelFingerprint(pub [u8; 32]);

impl ModelFingerprint {
    /// 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// Parses 64 hex digits.
    pub fn from_hex(s: &str) -> Option<Self> {
        let b = s.as_bytes();
        if b.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, o) in out.iter_mut().enumerate() {
            let hi = (b[2 * i] as char).to_digit(16)?;
            let lo = (b[2 * i + 1] as char).to_digit(16)?;
            *o = (hi * 16 + lo) as u8;
        }
        Some(ModelFingerprint(out))
    }

    /// The first 12 hex digits, for messages.
    pub fn short(&self) -> String {
        self.to_hex()[..12].to_string()
    }
}

impl std::fmt::Display for ModelFingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl std::fmt::Debug for ModelFingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ModelFingerprint({})", self.to_hex())
    }
}

impl Serialize for ModelFingerprint {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for ModelFingerprint {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ModelFingerprint::from_hex(&s)
            .ok_or_else(|| serde::de::Error::custom("a model fingerprint is 64 hex digits"))
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The fingerprint of `file` read as a model of shape `cfg`: sha256 over a text of
/// `key=value` lines of the config, then one `name\tTYPE\td0,d1,…` line per tensor,
/// sorted by name (so the file's tensor order does not matter).
pub fn model_fingerprint(file: &ModelFile, cfg: &Rwkv7Config) -> ModelFingerprint {
    let mut h = Sha256::new();
    h.update(FINGERPRINT_DOMAIN.as_bytes());
    let l = &cfg.lora;
    for (k, v) in [
        ("n_layer", cfg.n_layer),
        ("n_embd", cfg.n_embd),
        ("head_size", cfg.head_size),
        ("n_head", cfg.n_head),
        ("ffn_dim", cfg.ffn_dim),
        ("vocab_size", cfg.vocab_size),
        ("lora_decay_w", l.decay_w),
        ("lora_iclr_a", l.iclr_a),
        ("lora_value_v", l.value_v),
        ("lora_gate_g", l.gate_g),
    ] {
        h.update(format!("{k}={v}\n").as_bytes());
    }
    let mut tensors: Vec<_> = file.tensors().iter().collect();
    tensors.sort_by(|a, b| a.name.cmp(&b.name));
    for t in tensors {
        let dims: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
        h.update(format!("{}\t{}\t{}\n", t.name, t.dtype.name(), dims.join(",")).as_bytes());
    }
    ModelFingerprint(h.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_hex_round_trip() {
        let fp = ModelFingerprint(std::array::from_fn(|i| (i as u8).wrapping_mul(37)));
        assert_eq!(ModelFingerprint::from_hex(&fp.to_hex()), Some(fp));
        assert_eq!(ModelFingerprint::from_hex("zz"), None);
    }
}
