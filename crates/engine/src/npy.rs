//! A small, bounded reader and writer for NumPy `.npy` files holding `float32` arrays
//! (little-endian `<f4`, C order) — the format of the reference outputs in
//! `shared/fixtures` (logits, embeddings, states, dequantized tensors).
//!
//! Format: NumPy's `format.py` (NEP 1): magic `\x93NUMPY`, version byte pair (1.0 has a
//! `u16` header length, 2.0 / 3.0 a `u32`), an ASCII/UTF-8 Python dict literal
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (d0, d1, ...), }` padded with spaces
//! and a `\n` so that the data starts on a 64-byte boundary, then the raw data.
//!
//! Only what the fixtures need is read: little-endian `<f4`, C order, up to [`MAX_DIMS`] dimensions. Everything else is an
//! [`EngineError::Malformed`] naming the file.

use std::io::Write;
use std::path::Path;

use crate::error::{EngineError, Result};

/// Largest header accepted (bytes). NumPy itself writes a few hundred; this bounds the
/// parse of an untrusted file.
pub const MAX_HEADER: usize = 64 * 1024;
/// Most dimensions accepted.
pub const MAX_DIMS: usize = 16;

const MAGIC: &[u8; 6] = b"\x93NUMPY";

fn malformed(path: &Path, what: impl Into<String>) -> EngineError {
    EngineError::Malformed {
        path: path.to_path_buf(),
        format: "npy",
        what: what.into(),
    }
}

/// Reads a `float32` `.npy` file.
///
/// Returns `(shape, data)`: `shape` outermost first (as NumPy prints it; `[]` for a
/// scalar), `data` in C (row-major) order with `data.len() == shape.iter().product()`.
///
/// Errors: [`EngineError::Io`] when the file cannot be read; [`EngineError::Malformed`]
/// for a bad magic, an unsupported version, dtype (anything but `<f4`) or Fortran order,
/// an unparsable or oversized header, or a data length that disagrees with the shape.
pub fn read_f32(path: impl AsRef<Path>) -> Result<(Vec<usize>, Vec<f32>)> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| EngineError::io(path, e))?;
    parse_f32(path, &bytes)
}

/// Parses the bytes of a `float32` `.npy` file (see [`read_f32`]); `path` only names the
/// source in errors.
pub fn parse_f32(path: &Path, bytes: &[u8]) -> Result<(Vec<usize>, Vec<f32>)> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(malformed(path, "no \\x93NUMPY magic"));
    }
    let major = bytes[6];
    let (header_len, header_start) = match major {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        2 | 3 => {
            let raw = bytes
                .get(8..12)
                .ok_or_else(|| malformed(path, "truncated header length"))?;
            let n = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
            (usize::try_from(n).unwrap_or(usize::MAX), 12)
        }
        v => return Err(malformed(path, format!("unsupported format version {v}"))),
    };
    if header_len > MAX_HEADER {
        return Err(malformed(
            path,
            format!("header of {header_len} bytes exceeds the {MAX_HEADER}-byte limit"),
        ));
    }
    let data_start = header_start + header_len;
    let header = bytes
        .get(header_start..data_start)
        .ok_or_else(|| malformed(path, "header runs past the end of the file"))?;
    let header = std::str::from_utf8(header).map_err(|_| malformed(path, "header is not UTF-8"))?;

    let descr =
        dict_value(header, "descr").ok_or_else(|| malformed(path, "header has no 'descr'"))?;
    if descr != "'<f4'" {
        return Err(malformed(
            path,
            format!("dtype {descr} is not '<f4' (little-endian float32)"),
        ));
    }
    let fortran = dict_value(header, "fortran_order")
        .ok_or_else(|| malformed(path, "header has no 'fortran_order'"))?;
    if fortran != "False" {
        return Err(malformed(path, "Fortran-order arrays are not read"));
    }
    let shape_txt =
        dict_value(header, "shape").ok_or_else(|| malformed(path, "header has no 'shape'"))?;
    let shape = parse_shape(shape_txt)
        .ok_or_else(|| malformed(path, format!("unparsable shape {shape_txt}")))?;
    let numel = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| malformed(path, format!("shape {shape:?} overflows")))?;
    let data = &bytes[data_start..];
    let want = numel
        .checked_mul(4)
        .ok_or_else(|| malformed(path, format!("shape {shape:?} overflows")))?;
    if data.len() != want {
        return Err(malformed(
            path,
            format!(
                "shape {shape:?} needs {want} data bytes, file has {}",
                data.len()
            ),
        ));
    }
    let values = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok((shape, values))
}

/// Writes `data` (C order, `shape` outermost first) as a version-1.0 `<f4` `.npy` file that
/// NumPy reads with `np.load`.
///
/// Errors: [`EngineError::InvalidInput`] when `data.len()` is not the product of `shape`
/// or `shape` has more than [`MAX_DIMS`] dimensions; [`EngineError::Io`] on write failure.
pub fn write_f32(path: impl AsRef<Path>, shape: &[usize], data: &[f32]) -> Result<()> {
    let path = path.as_ref();
    let bytes = encode_f32(shape, data)?;
    let mut f =
        std::io::BufWriter::new(std::fs::File::create(path).map_err(|e| EngineError::io(path, e))?);
    f.write_all(&bytes).map_err(|e| EngineError::io(path, e))?;
    f.flush().map_err(|e| EngineError::io(path, e))
}

/// The bytes of a version-1.0 `<f4` `.npy` file (see [`write_f32`]).
pub fn encode_f32(shape: &[usize], data: &[f32]) -> Result<Vec<u8>> {
    if shape.len() > MAX_DIMS {
        return Err(EngineError::invalid(format!(
            "npy: {} dimensions, at most {MAX_DIMS}",
            shape.len()
        )));
    }
    let numel: Option<usize> = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if numel != Some(data.len()) {
        return Err(EngineError::invalid(format!(
            "npy: shape {shape:?} does not hold {} values",
            data.len()
        )));
    }
    let dims = match shape {
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {dims}, }}");
    // Pad with spaces so that magic (6) + version (2) + length (2) + header ends on a
    // 64-byte boundary, the last byte being '\n' (NumPy's own alignment rule).
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let header_len = u16::try_from(header.len())
        .map_err(|_| EngineError::invalid("npy: header longer than 65535 bytes"))?;
    let mut out = Vec::with_capacity(10 + header.len() + 4 * data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&header_len.to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in data {
        out.extend_from_slice(&v.to_le_bytes());
    }
    Ok(out)
}

/// The literal text following `'key':` in a Python dict literal, up to the next
/// top-level `,` or `}` (a tuple's commas are inside parentheses), trimmed.
fn dict_value<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let pat = format!("'{key}'");
    let at = header.find(&pat)? + pat.len();
    let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
    let mut depth = 0usize;
    for (i, ch) in rest.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1)?,
            ',' | '}' if depth == 0 => return Some(rest[..i].trim()),
            _ => {}
        }
    }
    None
}

/// `(3, 4)` → `[3, 4]`, `(5,)` → `[5]`, `()` → `[]`.
fn parse_shape(txt: &str) -> Option<Vec<usize>> {
    let inner = txt.strip_prefix('(')?.strip_suffix(')')?;
    let mut dims = Vec::new();
    for part in inner.split(',') {
        let p = part.trim();
        if p.is_empty() {
            continue;
        }
        // NumPy may write `3L` in files from Python 2.
        let p = p.strip_suffix('L').unwrap_or(p);
        dims.push(p.parse().ok()?);
        if dims.len() > MAX_DIMS {
            return None;
        }
    }
    Some(dims)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> std::path::PathBuf {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures")
    }

    #[test]
    fn round_trip_shapes() -> anyhow::Result<()> {
        let dir = std::env::temp_dir().join(format!("rwkv-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        for shape in [vec![], vec![5], vec![2, 3], vec![2, 1, 4, 3]] {
            let n: usize = shape.iter().product();
            let data: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 1.0).collect();
            let p = dir.join("x.npy");
            write_f32(&p, &shape, &data)?;
            let bytes = std::fs::read(&p)?;
            // NumPy's alignment rule: data starts on a 64-byte boundary.
            assert_eq!((bytes.len() - 4 * n) % 64, 0, "shape {shape:?}");
            let (s2, d2) = read_f32(&p)?;
            assert_eq!(s2, shape);
            assert_eq!(d2, data);
        }
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    #[test]
    fn reads_numpy_written_fixture() -> anyhow::Result<()> {
        // Written by NumPy (make_refs.py): the final WKV state of the tiny model,
        // [L=2, H=2, 64, 64] per the fixtures README.
        let (shape, data) = read_f32(fixtures().join("rwkv7-tiny.ref.rwkv.state_att_kv.f32.npy"))?;
        assert_eq!(shape, vec![2, 2, 64, 64]);
        assert_eq!(data.len(), 2 * 2 * 64 * 64);
        assert!(data.iter().all(|v| v.is_finite()));
        assert!(data.iter().any(|&v| v != 0.0));
        Ok(())
    }

    #[test]
    fn rejects_bad_files() -> anyhow::Result<()> {
        let p = Path::new("bad.npy");
        assert!(parse_f32(p, b"not numpy at all").is_err());
        let good = encode_f32(&[2], &[1.0, 2.0])?;
        // Truncated data.
        assert!(parse_f32(p, &good[..good.len() - 1]).is_err());
        // Other dtype.
        let f8 = String::from_utf8_lossy(&good)
            .replace("<f4", "<f8")
            .into_bytes();
        assert!(parse_f32(p, &f8).is_err());
        // Header length past the end.
        let mut long = good.clone();
        long[8] = 0xff;
        long[9] = 0xff;
        assert!(parse_f32(p, &long).is_err());
        // Mismatched shape on write.
        assert!(encode_f32(&[3], &[1.0]).is_err());
        assert!(parse_f32(p, &good).is_ok());
        Ok(())
    }
}
