//! llama.cpp's base log-probability file (`llama-perplexity --kl-divergence-base FILE`),
//! read and written byte for byte as llama.cpp 0c1e570 does
//! (`tools/perplexity/perplexity.cpp`), so a base written by either program scores the
//! other.
//!
//! Layout, little-endian:
//!
//! | bytes | field |
//! | --- | --- |
//! | 8 | magic `_logits_` |
//! | 4 | `n_ctx`: u32, tokens per chunk |
//! | 4 | `n_vocab`: i32 |
//! | 4 | `n_chunk`: i32 |
//! | 4 · n_ctx · n_chunk | the tokens: i32 |
//! | then per chunk, per scored row | `nv` = 2·⌈n_vocab / 2⌉ + 4 u16: `scale` f32, `min` f32, then one u16 `q` per token id (padded to even) |
//!
//! A chunk scores its last `n_ctx − 1 − n_ctx / 2` positions (see [`scored_rows`]). A
//! row holds the log-probabilities of the next token as `log p = scale · q + min`:
//! llama.cpp keeps the 16 nats below the largest logit in 65,535 steps, everything
//! lower as `q = 0`.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use rwkv_engine::{EngineError, Result};

const MAGIC: &[u8; 8] = b"_logits_";
const FORMAT: &str = "llama.cpp log-probability";

/// Positions scored in a chunk of `n_ctx` tokens: the second half, less the last one
/// (whose next token lies in the next chunk): `n_ctx − 1 − n_ctx / 2`.
pub fn scored_rows(n_ctx: usize) -> usize {
    n_ctx.saturating_sub(1 + n_ctx / 2)
}

/// u16 per stored row: two f32 (scale, min) and one u16 per token id, padded to even.
pub fn row_len(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

/// Encodes one row of `logits` (`[n_vocab]` f32) into `out` (`[row_len(n_vocab)]` u16)
/// as llama.cpp does, and returns the row's negative log-likelihood of `target` in
/// nats (`max + ln Σ exp(l − max) − l[target]`, the sum in f64).
pub fn encode_row(logits: &[f32], target: usize, out: &mut [u16]) -> f64 {
    let (max, sum_exp) = super::stats::max_and_sum_exp(logits);
    let min = logits
        .iter()
        .copied()
        .fold(f32::INFINITY, f32::min)
        .max(max - 16.0);
    let log_sum_exp = sum_exp.ln() as f32;
    let min_log_prob = min - max - log_sum_exp;
    let scale = (max - min) / 65535.0;
    let (head, q) = out.split_at_mut(4);
    put_f32(&mut head[0..2], scale);
    put_f32(&mut head[2..4], min_log_prob);
    q.fill(0);
    if scale != 0.0 {
        let inv = 1.0 / scale;
        for (o, &l) in q.iter_mut().zip(logits) {
            if l > min {
                // llama.cpp's nearest_int: round half to even, in f32.
                *o = (inv * (l - min)).round_ties_even() as u16;
            }
        }
    }
    f64::from(max) + sum_exp.ln() - f64::from(logits[target])
}

/// A stored row's `(scale, min)`: `log p[i] = scale · q[i] + min`.
pub fn row_scale(row: &[u16]) -> (f32, f32) {
    (get_f32(&row[0..2]), get_f32(&row[2..4]))
}

fn put_f32(dst: &mut [u16], v: f32) {
    let b = v.to_le_bytes();
    dst[0] = u16::from_le_bytes([b[0], b[1]]);
    dst[1] = u16::from_le_bytes([b[2], b[3]]);
}

fn get_f32(src: &[u16]) -> f32 {
    let (a, b) = (src[0].to_le_bytes(), src[1].to_le_bytes());
    f32::from_le_bytes([a[0], a[1], b[0], b[1]])
}

/// The header of a base file: chunk length, vocabulary size, chunk count and the tokens
/// the base model scored (`n_ctx · n_chunk`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub n_ctx: usize,
    pub n_vocab: usize,
    pub n_chunk: usize,
    pub tokens: Vec<u32>,
}

impl Header {
    /// Bytes of the whole file this header describes.
    fn file_len(&self) -> Option<u64> {
        let rows = (scored_rows(self.n_ctx) as u64).checked_mul(self.n_chunk as u64)?;
        let row_bytes = (row_len(self.n_vocab) as u64).checked_mul(2)?;
        let tokens = (self.n_ctx as u64)
            .checked_mul(self.n_chunk as u64)?
            .checked_mul(4)?;
        rows.checked_mul(row_bytes)?
            .checked_add(tokens)?
            .checked_add(20)
    }
}

/// Writes a base file chunk by chunk: the header first, then [`Writer::chunk`] once per
/// chunk in order, then [`Writer::finish`].
pub struct Writer {
    path: PathBuf,
    out: BufWriter<File>,
    rows: usize,
    row_len: usize,
    chunks_left: usize,
    bytes: Vec<u8>,
}

impl Writer {
    /// Creates `path` and writes `header`.
    ///
    /// Errors: [`EngineError::Io`] naming the file; [`EngineError::InvalidInput`] when a
    /// count does not fit the format's 32-bit fields.
    pub fn create(path: &Path, header: &Header) -> Result<Self> {
        let io = |source| EngineError::Io {
            path: path.to_path_buf(),
            source,
        };
        let field = |v: usize, name: &str| {
            i32::try_from(v).map_err(|_| {
                EngineError::invalid(format!("{name} {v} does not fit the base file's i32"))
            })
        };
        let (n_ctx, n_vocab, n_chunk) = (
            field(header.n_ctx, "n_ctx")?,
            field(header.n_vocab, "n_vocab")?,
            field(header.n_chunk, "n_chunk")?,
        );
        let mut out = BufWriter::new(File::create(path).map_err(io)?);
        let mut head = Vec::with_capacity(20 + 4 * header.tokens.len());
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&(n_ctx as u32).to_le_bytes());
        head.extend_from_slice(&n_vocab.to_le_bytes());
        head.extend_from_slice(&n_chunk.to_le_bytes());
        for &t in &header.tokens {
            head.extend_from_slice(&t.to_le_bytes());
        }
        out.write_all(&head).map_err(io)?;
        Ok(Self {
            path: path.to_path_buf(),
            out,
            rows: scored_rows(header.n_ctx),
            row_len: row_len(header.n_vocab),
            chunks_left: header.n_chunk,
            bytes: Vec::new(),
        })
    }

    /// Appends one chunk's rows (`[scored_rows(n_ctx) · row_len(n_vocab)]` u16).
    pub fn chunk(&mut self, rows: &[u16]) -> Result<()> {
        if rows.len() != self.rows * self.row_len || self.chunks_left == 0 {
            return Err(EngineError::invalid(format!(
                "{}: a chunk of {} u16 where {} were due ({} chunks left)",
                self.path.display(),
                rows.len(),
                self.rows * self.row_len,
                self.chunks_left
            )));
        }
        self.bytes.clear();
        self.bytes.extend(rows.iter().flat_map(|v| v.to_le_bytes()));
        self.out
            .write_all(&self.bytes)
            .map_err(|source| EngineError::Io {
                path: self.path.clone(),
                source,
            })?;
        self.chunks_left -= 1;
        Ok(())
    }

    /// Flushes the file; every chunk of the header must have been written.
    pub fn finish(mut self) -> Result<()> {
        if self.chunks_left != 0 {
            return Err(EngineError::invalid(format!(
                "{}: {} chunks were never written",
                self.path.display(),
                self.chunks_left
            )));
        }
        self.out.flush().map_err(|source| EngineError::Io {
            path: self.path.clone(),
            source,
        })
    }
}

/// Reads a base file: [`Reader::open`] checks the header against the file's length,
/// then [`Reader::chunk`] gives each chunk's rows in order.
pub struct Reader {
    path: PathBuf,
    input: BufReader<File>,
    pub header: Header,
    bytes: Vec<u8>,
}

impl Reader {
    /// Opens `path` and reads its header and tokens.
    ///
    /// Errors: [`EngineError::Io`]; [`EngineError::Malformed`] naming the file and the
    /// field when the magic is wrong, a count is zero, negative or absurd, or the file's
    /// length differs from what its header describes (a truncated or padded file).
    pub fn open(path: &Path) -> Result<Self> {
        let io = |source| EngineError::Io {
            path: path.to_path_buf(),
            source,
        };
        let bad = |what: String| EngineError::Malformed {
            path: path.to_path_buf(),
            format: FORMAT,
            what,
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let mut input = BufReader::new(file);
        let mut head = [0u8; 20];
        input
            .read_exact(&mut head)
            .map_err(|_| bad(format!("{len} bytes, shorter than the 20-byte header")))?;
        if &head[0..8] != MAGIC {
            return Err(bad("no `_logits_` magic at the start".into()));
        }
        let word = |i: usize| [head[i], head[i + 1], head[i + 2], head[i + 3]];
        let n_ctx = u32::from_le_bytes(word(8));
        let n_vocab = i32::from_le_bytes(word(12));
        let n_chunk = i32::from_le_bytes(word(16));
        if !(3..=1 << 24).contains(&n_ctx) {
            return Err(bad(format!("n_ctx {n_ctx} (expected 3 to 16,777,216)")));
        }
        if n_vocab < 1 {
            return Err(bad(format!("n_vocab {n_vocab} (expected ≥ 1)")));
        }
        if n_chunk < 1 {
            return Err(bad(format!("n_chunk {n_chunk} (expected ≥ 1)")));
        }
        let mut header = Header {
            n_ctx: n_ctx as usize,
            n_vocab: n_vocab as usize,
            n_chunk: n_chunk as usize,
            tokens: Vec::new(),
        };
        match header.file_len() {
            Some(want) if want == len => {}
            want => {
                return Err(bad(format!(
                    "{len} bytes, but n_ctx {n_ctx}, n_vocab {n_vocab} and n_chunk {n_chunk} \
                     make {} (truncated or not a base file)",
                    want.map_or("more than 2^64".to_string(), |w| w.to_string())
                )))
            }
        }
        let mut raw = vec![0u8; 4 * header.n_ctx * header.n_chunk];
        input.read_exact(&mut raw).map_err(io)?;
        header.tokens = raw
            .chunks_exact(4)
            .map(|w| i32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .enumerate()
            .map(|(i, t)| {
                u32::try_from(t)
                    .ok()
                    .filter(|&t| (t as usize) < header.n_vocab)
                    .ok_or_else(|| bad(format!("token {i} is {t}, not below n_vocab {n_vocab}")))
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            path: path.to_path_buf(),
            input,
            header,
            bytes: Vec::new(),
        })
    }

    /// Reads the next chunk's rows into `rows` (resized to
    /// `scored_rows(n_ctx) · row_len(n_vocab)` u16).
    pub fn chunk(&mut self, rows: &mut Vec<u16>) -> Result<()> {
        let n = scored_rows(self.header.n_ctx) * row_len(self.header.n_vocab);
        self.bytes.resize(2 * n, 0);
        self.input
            .read_exact(&mut self.bytes)
            .map_err(|source| EngineError::Io {
                path: self.path.clone(),
                source,
            })?;
        rows.clear();
        rows.extend(
            self.bytes
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]])),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_decodes_to_its_log_probabilities() {
        let logits: Vec<f32> = (0..11).map(|i| (i as f32 * 0.37).sin() * 5.0).collect();
        let mut row = vec![0u16; row_len(logits.len())];
        assert_eq!(row.len(), 16);
        let nll = encode_row(&logits, 3, &mut row);
        let lse = logits.iter().map(|l| l.exp()).sum::<f32>().ln();
        assert!((nll - f64::from(lse - logits[3])).abs() < 1e-5, "{nll}");
        let (scale, min) = row_scale(&row);
        for (i, &l) in logits.iter().enumerate() {
            let back = scale * f32::from(row[4 + i]) + min;
            assert!(
                (back - (l - lse)).abs() <= scale,
                "{i}: {back} vs {}",
                l - lse
            );
        }
    }

    #[test]
    fn a_file_round_trips_and_a_truncated_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("rwkv-logits-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("base.kld");
        let header = Header {
            n_ctx: 8,
            n_vocab: 5,
            n_chunk: 2,
            tokens: (0..16).map(|i| i % 5).collect(),
        };
        let per_chunk = scored_rows(8) * row_len(5);
        assert_eq!(per_chunk, 3 * 10);
        let mut w = Writer::create(&path, &header).unwrap();
        w.chunk(&vec![7u16; per_chunk]).unwrap();
        w.chunk(&vec![9u16; per_chunk]).unwrap();
        assert!(
            w.chunk(&vec![9u16; per_chunk]).is_err(),
            "a third chunk of two"
        );
        w.finish().unwrap();

        let mut r = Reader::open(&path).unwrap();
        assert_eq!(r.header, header);
        let mut rows = Vec::new();
        r.chunk(&mut rows).unwrap();
        assert!(rows.iter().all(|&v| v == 7));
        r.chunk(&mut rows).unwrap();
        assert!(rows.iter().all(|&v| v == 9));

        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 2]).unwrap();
        let err = Reader::open(&path).err().unwrap().to_string();
        assert!(
            err.contains("base.kld") && err.contains("truncated"),
            "{err}"
        );
        let mut bad = bytes.clone();
        bad[20] = 5; // token 0 = 5, not below n_vocab 5
        std::fs::write(&path, &bad).unwrap();
        let err = Reader::open(&path).err().unwrap().to_string();
        assert!(err.contains("token 0 is 5"), "{err}");
        std::fs::write(&path, b"_logit").unwrap();
        let err = Reader::open(&path).err().unwrap().to_string();
        assert!(err.contains("shorter than the 20-byte header"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
