//! FNV-1a, the agent's one non-cryptographic hash for identities that are stored or
//! sent: checkpoint fingerprints and first-line hashes (64-bit, kept in checkpoint
//! files, so the function must never change) and document ids (128-bit, so ids of
//! different records do not collide in practice). Not for hash tables fed by logs.

const OFFSET_64: u64 = 0xcbf29ce484222325;
const PRIME_64: u64 = 0x100000001b3;
pub const OFFSET_128: u128 = 0x6c62272e07bb014262b821756295c58d;
const PRIME_128: u128 = 0x0000000001000000000000000000013B;

/// 64-bit FNV-1a of `bytes`.
pub fn hash64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(OFFSET_64, |h, &b| (h ^ b as u64).wrapping_mul(PRIME_64))
}

/// 128-bit FNV-1a of `bytes`, continuing from `h` ([`OFFSET_128`] to start).
pub fn hash128<'a>(h: u128, bytes: impl IntoIterator<Item = &'a u8>) -> u128 {
    bytes.into_iter().fold(h, |h, &b| (h ^ b as u128).wrapping_mul(PRIME_128))
}

/// One 128-bit FNV-1a step over a whole 64-bit word: fewer multiplies than a byte
/// at a time, for the fixed-size parts of a document id.
pub fn step128(h: u128, word: u64) -> u128 {
    (h ^ word as u128).wrapping_mul(PRIME_128)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_test_vectors() {
        // From the FNV reference (draft-eastlake-fnv): "" and "a".
        assert_eq!(hash64(b""), 0xcbf29ce484222325);
        assert_eq!(hash64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(hash128(OFFSET_128, b"a"), 0xd228cb696f1a8caf78912b704e4a8964);
    }
}
