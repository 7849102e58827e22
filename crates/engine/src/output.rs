//! The bound on what one call returns: logits, embeddings, field analyses and state
//! exports are sized from the caller's input (T positions × vocab floats), so a call with a
//! million token ids would ask for 256 GiB. Every such output is checked against
//! [`MAX_OUTPUT_BYTES`] before any work, and its buffer is reserved with `try_reserve`, so
//! an oversized request is [`EngineError::OutputTooLarge`] — an error the caller can
//! catch (Python: `MemoryError`) — never an allocation failure that aborts the process.

use crate::error::{EngineError, Result};

/// Most bytes one call may return: 2 GiB, e.g. the f32 logits of 8,192 positions of a
/// 65,536-token vocabulary. Larger results are asked for in several calls (fewer
/// positions, fewer sequences); the bound keeps one call's result well inside the memory
/// of the machines the app targets (8 GB and up).
pub const MAX_OUTPUT_BYTES: u64 = 2 << 30;

/// Checks that an output of `values` elements of `elem_bytes` bytes each fits
/// [`MAX_OUTPUT_BYTES`]; `what` names it for the error ("logits of 3 sequences, 1000000
/// rows × 65536").
///
/// Errors: [`EngineError::OutputTooLarge`] with the requested and allowed bytes.
pub fn check(what: impl FnOnce() -> String, values: u64, elem_bytes: u64) -> Result<()> {
    let requested = values.saturating_mul(elem_bytes);
    if requested > MAX_OUTPUT_BYTES {
        return Err(EngineError::OutputTooLarge {
            what: what(),
            requested,
            allowed: MAX_OUTPUT_BYTES,
        });
    }
    Ok(())
}

/// An empty vector with room for `n` elements, checked against [`MAX_OUTPUT_BYTES`] and
/// reserved without aborting (a refused reservation is the same error).
///
/// Errors: [`EngineError::OutputTooLarge`] naming `what`.
pub fn vec<T>(what: impl Fn() -> String, n: usize) -> Result<Vec<T>> {
    let elem = std::mem::size_of::<T>() as u64;
    check(&what, n as u64, elem)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| EngineError::OutputTooLarge {
            what: format!("{} (the system refused the allocation)", what()),
            requested: (n as u64).saturating_mul(elem),
            allowed: MAX_OUTPUT_BYTES,
        })?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_inclusive_and_named() {
        let ok = vec::<f32>(|| "x".into(), 16).unwrap_or_default();
        assert!(ok.capacity() >= 16);
        assert!(check(|| "edge".into(), MAX_OUTPUT_BYTES / 4, 4).is_ok());
        match check(|| "logits of 1 row".into(), MAX_OUTPUT_BYTES / 4 + 1, 4) {
            Err(EngineError::OutputTooLarge {
                what,
                requested,
                allowed,
            }) => {
                assert_eq!(
                    (what.as_str(), requested, allowed),
                    ("logits of 1 row", MAX_OUTPUT_BYTES + 4, MAX_OUTPUT_BYTES)
                );
            }
            other => unreachable!("{other:?}"),
        }
        // Saturating, not wrapping: u64::MAX values of 8 bytes is refused.
        assert!(check(String::new, u64::MAX, 8).is_err());
    }
}
