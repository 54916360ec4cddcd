//! Redis Cluster's key hash slots: which of the 16384 slots a key lives
//! in (CRC16/XMODEM of its hash tag, or of the whole key), as the cluster
//! specification defines it. A leaf: it knows nothing of the crate.

/// How many hash slots a cluster has.
pub(crate) const SLOTS: u16 = 16384;

/// The part of `key` Redis hashes: the text between the first `{` and the
/// first `}` after it when that is not empty (the hash tag), else the
/// whole key.
pub(crate) fn hash_part(key: &[u8]) -> &[u8] {
    tag(key).unwrap_or(key)
}

/// `key`'s hash tag, if it has one (see [`hash_part`]).
pub(crate) fn tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// The hash slot of `key`.
pub(crate) fn slot(key: &[u8]) -> u16 {
    crc16(hash_part(key)) % SLOTS
}

/// A short text whose hash slot is `slot` (a decimal number: the first
/// that hashes there). `None` only for a slot past the last.
pub(crate) fn tag_for(slot: u16) -> Option<String> {
    (slot < SLOTS).then_some(())?;
    (0..1u32 << 22)
        .map(|i| i.to_string())
        .find(|text| crc16(text.as_bytes()) % SLOTS == slot)
}

/// CRC16/XMODEM (polynomial 0x1021, initial value 0), bit by bit: keys
/// are short, and this runs once per request.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The specification's check value, and slots `CLUSTER KEYSLOT`
    /// answers (redis-server 7.0).
    #[test]
    fn slots_are_redis_clusters() {
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"bar"), 5061);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_eq!(hash_part(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_part(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_part(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_part(b"a}b{c"), b"a}b{c");
        assert_eq!(hash_part(b""), b"");
        for slot in [0, 1, 5460, 8191, 16383] {
            let tag = tag_for(slot).expect("a tag");
            assert_eq!(super::slot(format!("x{{{tag}}}").as_bytes()), slot, "{tag}");
        }
        assert_eq!(tag_for(SLOTS), None);
    }
}
