//! The zip directory of a `.pth`, read from the mapping without trusting it (APPNOTE 6.3.10
//! §4.3: end of central directory, zip64 end record and locator, central directory
//! headers, local headers; the zip64 extra field §4.5.3).
//!
//! Why not the `zip` crate: it reserves one entry record (hundreds of bytes) per entry the
//! end record *claims*, before it parses any, and on a failure retries every earlier
//! end-record signature in the file, so a small crafted file can make it ask for
//! gigabytes. Here the entry count is read first and checked against [`MAX_ENTRIES`] and
//! against the directory's size (each header takes at least 46 bytes), then the directory
//! is parsed into a map reserved with `try_reserve`. Only what `torch.save` writes is
//! read: one disk, STORED entries, no encryption.

use std::collections::HashMap;
use std::path::Path;

use super::{malformed, Entry, MAX_ENTRIES};
use crate::error::Result;

/// Bytes of the fixed part of the end-of-central-directory record.
const EOCD_LEN: usize = 22;
/// Bytes of the zip64 end-of-central-directory locator (just before the EOCD).
const LOCATOR_LEN: usize = 20;
/// Bytes of the fixed part of the zip64 end-of-central-directory record.
const EOCD64_LEN: usize = 56;
/// Bytes of the fixed part of a central directory header.
const CDH_LEN: usize = 46;
/// Bytes of the fixed part of a local file header.
const LOCAL_LEN: usize = 30;
/// Longest comment the EOCD can have (its length is a `u16`).
const MAX_COMMENT: usize = u16::MAX as usize;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Where the central directory is and how many entries it claims.
struct Directory {
    entries: u64,
    offset: u64,
    size: u64,
    /// The directory must end before this offset (the end record or zip64 record).
    end_limit: u64,
}

/// Finds the end record: the last `PK\5\6` signature in the final 64 KiB + 22 bytes whose
/// comment fits in the file; then the zip64 record where a field says so.
fn directory(path: &Path, map: &[u8]) -> Result<Directory> {
    let bad = |what: String| malformed(path, format!("zip directory: {what}"));
    let lowest = map.len().saturating_sub(EOCD_LEN + MAX_COMMENT);
    let eocd = (lowest..=map.len().saturating_sub(EOCD_LEN))
        .rev()
        .find(|&at| {
            map.get(at..at + 4) == Some(b"PK\x05\x06")
                && u16_at(map, at + 20).is_some_and(|c| at + EOCD_LEN + usize::from(c) <= map.len())
        })
        .ok_or_else(|| bad("no end-of-central-directory record (not a zip file?)".into()))?;
    let f16 = |off| u16_at(map, eocd + off).unwrap_or(0);
    let f32_ = |off| u32_at(map, eocd + off).unwrap_or(0);
    let (disk, cd_disk, on_disk, total) = (f16(4), f16(6), f16(8), f16(10));
    let (size, offset) = (f32_(12), f32_(16));
    let zip64 = total == u16::MAX || size == u32::MAX || offset == u32::MAX;
    if !zip64 {
        if disk != 0 || cd_disk != 0 || on_disk != total {
            return Err(bad("multi-disk archives are not read".into()));
        }
        return Ok(Directory {
            entries: total.into(),
            offset: offset.into(),
            size: size.into(),
            end_limit: eocd as u64,
        });
    }
    let loc = eocd
        .checked_sub(LOCATOR_LEN)
        .filter(|&l| map.get(l..l + 4) == Some(b"PK\x06\x07"))
        .ok_or_else(|| bad("a zip64 field without its zip64 locator".into()))?;
    let rec = u64_at(map, loc + 8).unwrap_or(u64::MAX);
    let rec = usize::try_from(rec)
        .ok()
        .filter(|&r| r.checked_add(EOCD64_LEN).is_some_and(|e| e <= loc))
        .filter(|&r| map.get(r..r + 4) == Some(b"PK\x06\x06"))
        .ok_or_else(|| bad(format!("zip64 end record at {rec} is not one")))?;
    let g32 = |off| u32_at(map, rec + off).unwrap_or(u32::MAX);
    let g64 = |off| u64_at(map, rec + off).unwrap_or(u64::MAX);
    if g32(16) != 0 || g32(20) != 0 || g64(24) != g64(32) {
        return Err(bad("multi-disk archives are not read".into()));
    }
    Ok(Directory {
        entries: g64(32),
        size: g64(40),
        offset: g64(48),
        end_limit: rec as u64,
    })
}

/// Every entry of the zip directory: name → location of its bytes in the mapping.
///
/// Errors ([`crate::EngineError::Malformed`] naming `path`): no end record, more than
/// [`MAX_ENTRIES`] entries or more than the directory can hold, a header or local header
/// out of place, an encrypted or compressed entry, data past the end of the file, a name
/// twice.
pub(super) fn entries(path: &Path, map: &[u8]) -> Result<HashMap<String, Entry>> {
    let bad = |what: String| malformed(path, format!("zip directory: {what}"));
    let dir = directory(path, map)?;
    if dir.entries > MAX_ENTRIES as u64 {
        return Err(bad(format!(
            "the archive claims {} entries (limit {MAX_ENTRIES})",
            dir.entries
        )));
    }
    let end = dir.offset.checked_add(dir.size);
    if end.is_none_or(|e| e > dir.end_limit)
        || dir.entries.saturating_mul(CDH_LEN as u64) > dir.size
    {
        return Err(bad(format!(
            "{} entries cannot fit a directory of {} bytes at {} before byte {}",
            dir.entries, dir.size, dir.offset, dir.end_limit
        )));
    }
    // offset + size <= end_limit <= map.len(): the casts are exact.
    let cd = &map[dir.offset as usize..(dir.offset + dir.size) as usize];
    let mut out = HashMap::new();
    out.try_reserve(dir.entries as usize)
        .map_err(|_| bad(format!("no memory for {} entries", dir.entries)))?;
    let mut at = 0usize;
    for i in 0..dir.entries {
        let h = cd
            .get(at..at + CDH_LEN)
            .filter(|h| h.starts_with(b"PK\x01\x02"))
            .ok_or_else(|| {
                bad(format!(
                    "entry #{i}: no directory header at byte {}",
                    dir.offset as usize + at
                ))
            })?;
        let field16 = |off| u16_at(h, off).unwrap_or(0);
        let field32 = |off| u32_at(h, off).unwrap_or(0);
        let (flags, method) = (field16(8), field16(10));
        let (mut csize, mut usize_, mut local) = (
            u64::from(field32(20)),
            u64::from(field32(24)),
            u64::from(field32(42)),
        );
        let (n, e, c) = (
            usize::from(field16(28)),
            usize::from(field16(30)),
            usize::from(field16(32)),
        );
        let var = cd
            .get(at + CDH_LEN..at + CDH_LEN + n + e + c)
            .ok_or_else(|| bad(format!("entry #{i}: header runs past the directory")))?;
        let name = String::from_utf8_lossy(&var[..n]).into_owned();
        // zip64 extra field: the 8-byte values of the fields that are 0xFFFFFFFF, in order.
        let mut extra = &var[n..n + e];
        while let (Some(id), Some(len)) = (u16_at(extra, 0), u16_at(extra, 2)) {
            let body = extra.get(4..4 + usize::from(len)).unwrap_or_default();
            if id == 1 {
                let mut vals = body.chunks_exact(8).filter_map(|c| u64_at(c, 0));
                for field in [&mut usize_, &mut csize, &mut local] {
                    if *field == u64::from(u32::MAX) {
                        *field = vals
                            .next()
                            .ok_or_else(|| bad(format!("entry `{name}`: zip64 field missing")))?;
                    }
                }
            }
            extra = extra.get(4 + usize::from(len)..).unwrap_or_default();
        }
        if flags & 1 != 0 {
            return Err(bad(format!("entry `{name}` is encrypted")));
        }
        if method != 0 || csize != usize_ {
            return Err(malformed(
                path,
                format!(
                    "zip entry `{name}` is compressed (method {method}); torch.save stores \
                     entries uncompressed — re-save the file with torch.save"
                ),
            ));
        }
        let lh = usize::try_from(local)
            .ok()
            .and_then(|l| Some((l, map.get(l..l.checked_add(LOCAL_LEN)?)?)))
            .filter(|(_, lh)| lh.starts_with(b"PK\x03\x04"));
        let Some((l, lh)) = lh else {
            return Err(bad(format!(
                "entry `{name}`: no local header at byte {local}"
            )));
        };
        let start = l
            + LOCAL_LEN
            + usize::from(u16_at(lh, 26).unwrap_or(0))
            + usize::from(u16_at(lh, 28).unwrap_or(0));
        let entry = usize::try_from(usize_)
            .ok()
            .filter(|&len| start.checked_add(len).is_some_and(|end| end <= map.len()))
            .map(|len| Entry { start, len })
            .ok_or_else(|| {
                malformed(
                    path,
                    format!(
                        "zip entry `{name}` ({usize_} bytes at {start}) lies past the end of the {}-byte file",
                        map.len()
                    ),
                )
            })?;
        if out.insert(name.clone(), entry).is_some() {
            return Err(malformed(path, format!("zip entry `{name}` appears twice")));
        }
        at += CDH_LEN + n + e + c;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-entry zip as a writer of files over 4 GiB lays it out (miniz for torch.save):
    /// sizes and offset in the central header are 0xFFFFFFFF with their values in the
    /// zip64 extra field, a local extra field pads the data, zip64 end record + locator.
    fn zip64_one_entry(name: &str, data: &[u8], pad: usize) -> Vec<u8> {
        let mut b = b"PK\x03\x04".to_vec();
        b.extend_from_slice(&[45, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // ver, flags, method, time, date, crc
        b.extend_from_slice(&u32::MAX.to_le_bytes()); // sizes in the local zip64 field
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        b.extend_from_slice(&(name.len() as u16).to_le_bytes());
        b.extend_from_slice(&(pad as u16).to_le_bytes());
        b.extend_from_slice(name.as_bytes());
        b.extend(std::iter::repeat_n(0u8, pad));
        let data_at = b.len();
        b.extend_from_slice(data);
        let cd = b.len() as u64;
        b.extend_from_slice(b"PK\x01\x02");
        b.extend_from_slice(&[45, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // versions, flags, method, time, date, crc
        b.extend_from_slice(&u32::MAX.to_le_bytes()); // compressed size
        b.extend_from_slice(&u32::MAX.to_le_bytes()); // uncompressed size
        b.extend_from_slice(&(name.len() as u16).to_le_bytes());
        b.extend_from_slice(&28u16.to_le_bytes()); // extra: 4 + 24
        b.extend_from_slice(&[0; 6]); // comment length, disk, internal attributes
        b.extend_from_slice(&[0; 4]); // external attributes
        b.extend_from_slice(&u32::MAX.to_le_bytes()); // local header offset
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&24u16.to_le_bytes());
        for v in [data.len() as u64, data.len() as u64, 0] {
            b.extend_from_slice(&v.to_le_bytes()); // uncompressed, compressed, offset
        }
        let cd_size = b.len() as u64 - cd;
        let rec = b.len() as u64;
        b.extend_from_slice(b"PK\x06\x06");
        b.extend_from_slice(&44u64.to_le_bytes());
        b.extend_from_slice(&[45, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        for v in [1u64, 1, cd_size, cd] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(b"PK\x06\x07");
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&rec.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(b"PK\x05\x06");
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&u16::MAX.to_le_bytes());
        b.extend_from_slice(&u16::MAX.to_le_bytes());
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        assert_eq!(&b[data_at..data_at + data.len()], data);
        b
    }

    #[test]
    fn zip64_fields_and_local_padding() {
        let p = Path::new("z.pth");
        let b = zip64_one_entry("archive/data/0", b"0123456789", 37);
        let e = entries(p, &b).unwrap_or_default();
        let got = e.get("archive/data/0").map(|x| (x.start, x.len));
        // 30-byte local header + 14-byte name + 37 bytes of padding.
        assert_eq!(got, Some((30 + 14 + 37, 10)));
        // A zip64 field the extra does not hold is an error, not a guess.
        let mut short = b.clone();
        let at = b.windows(4).position(|w| w == b"PK\x01\x02").unwrap_or(0);
        short[at + 30] = 4; // extra length 4: the zip64 header without its values
        assert!(entries(p, &short).is_err());
    }
}
