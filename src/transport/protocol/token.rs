//! The tokens a lock's keys hold: 20 random bytes in hex (the secret that
//! proves a hold), and on a fenced hold the fencing token after a `.`, so
//! that what a key holds says which fencing token its holder has (see
//! `scripts/inspect.lua`). The fencing token is no secret: storage sees it
//! with every write.

/// The random part's length in hex characters.
const RANDOM_HEX: usize = 40;

/// A new token: 20 bytes from the thread-local CSPRNG, hex-encoded, then
/// `.{fence}` for a fenced hold.
pub(crate) fn new(fence: Option<u64>) -> std::sync::Arc<str> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut bytes = [0u8; RANDOM_HEX / 2];
    rand::fill(&mut bytes);
    let mut token = String::with_capacity(RANDOM_HEX + 21);
    for byte in bytes {
        token.push(char::from(HEX[usize::from(byte >> 4)]));
        token.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    if let Some(fence) = fence {
        token.push('.');
        token.push_str(&fence.to_string());
    }
    std::sync::Arc::from(token)
}

/// The fencing token a key's value carries: only a token this crate made
/// for a fenced hold (another client's value carries none). The nodes read
/// it so in `inspect.lua`; this is the fake node's reading.
#[cfg(test)]
pub(crate) fn fence_of(token: &[u8]) -> Option<u64> {
    let (random, fence) = token.split_at_checked(RANDOM_HEX)?;
    let digits = fence.strip_prefix(b".")?;
    let hex = |b: &u8| b.is_ascii_digit() || (b'a'..=b'f').contains(b);
    if !random.iter().all(hex) || digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_token_carries_its_fence_and_a_plain_one_none() {
        let fenced = new(Some(1_733_000_000_000_123));
        assert_eq!(fence_of(fenced.as_bytes()), Some(1_733_000_000_000_123));
        let plain = new(None);
        assert_eq!(plain.len(), RANDOM_HEX);
        assert!(plain.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(fence_of(plain.as_bytes()), None);
        let tokens: std::collections::HashSet<_> = (0..1000).map(|_| new(None)).collect();
        assert_eq!(tokens.len(), 1000, "tokens must be unique");
    }

    #[test]
    fn other_clients_values_carry_no_fence() {
        for value in [
            &b""[..],
            b"12",
            b"550e8400-e29b-41d4-a716-446655440000.7",
            b"0123456789abcdef0123456789abcdef01234567.",
            b"0123456789abcdef0123456789abcdef01234567.1x",
            b"0123456789ABCDEF0123456789abcdef01234567.1",
            b"0123456789abcdef0123456789abcdef01234567.99999999999999999999999",
        ] {
            assert_eq!(fence_of(value), None, "{}", String::from_utf8_lossy(value));
        }
    }
}
