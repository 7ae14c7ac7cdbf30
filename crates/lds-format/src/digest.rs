//! The digest a chunk or value chunk footer records (SPEC.md §8.3, §8.6): blake3, or
//! (format 1.3, feature `fast_digest`) xxh3-128, as the footer's flag bit 1 says.

/// Footer flag bit 1 (format 1.3, feature `fast_digest`): the digest is xxh3-128 followed by
/// 16 zero bytes, not blake3 (SPEC.md §8.3).
pub const FOOTER_FLAG_XXH3: u8 = 2;

/// Which function a chunk's digest is (SPEC.md §8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DigestKind {
    /// blake3, 32 bytes (format 1.0 to 1.2).
    #[default]
    Blake3,
    /// xxh3-128, then 16 zero bytes (format 1.3, feature `fast_digest`): about ten times
    /// cheaper, and as good against stale or misdirected sectors (nothing here is adversarial).
    Xxh3,
}

impl DigestKind {
    /// The kind a footer's flags name.
    pub fn of_flags(flags: u8) -> Self {
        if flags & FOOTER_FLAG_XXH3 != 0 {
            Self::Xxh3
        } else {
            Self::Blake3
        }
    }

    /// The footer flag bit it sets.
    pub fn flag(self) -> u8 {
        match self {
            Self::Blake3 => 0,
            Self::Xxh3 => FOOTER_FLAG_XXH3,
        }
    }
}

/// A digest being computed, either kind.
#[derive(Clone)]
pub(crate) enum DigestState {
    Blake3(Box<blake3::Hasher>),
    Xxh3(Box<xxhash_rust::xxh3::Xxh3>),
}

impl std::fmt::Debug for DigestState {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(match self {
            Self::Blake3(_) => "DigestState::Blake3",
            Self::Xxh3(_) => "DigestState::Xxh3",
        })
    }
}

impl DigestState {
    pub(crate) fn new(kind: DigestKind) -> Self {
        match kind {
            DigestKind::Blake3 => Self::Blake3(Box::new(blake3::Hasher::new())),
            DigestKind::Xxh3 => Self::Xxh3(Box::new(xxhash_rust::xxh3::Xxh3::new())),
        }
    }

    pub(crate) fn update(&mut self, bytes: &[u8]) {
        match self {
            Self::Blake3(hasher) => {
                hasher.update(bytes);
            }
            Self::Xxh3(hasher) => hasher.update(bytes),
        }
    }

    pub(crate) fn finish(&self) -> [u8; 32] {
        match self {
            Self::Blake3(hasher) => *hasher.finalize().as_bytes(),
            Self::Xxh3(hasher) => {
                let mut digest = [0u8; 32];
                digest[..16].copy_from_slice(&hasher.digest128().to_le_bytes());
                digest
            }
        }
    }
}
