//! Typed decoding errors. Each names the structure and the offset where it failed.

use std::fmt;

/// Why bytes could not be decoded as the structure they should hold.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatError {
    /// The bytes end before the structure does.
    Truncated {
        /// Structure being decoded.
        structure: &'static str,
        /// Offset of the failed read.
        offset: u64,
        /// Bytes the read needed.
        needed: u64,
        /// Bytes that remained.
        available: u64,
    },
    /// The magic number is not the structure's.
    BadMagic {
        /// Structure being decoded.
        structure: &'static str,
        /// Offset of the magic.
        offset: u64,
        /// The bytes found.
        found: Vec<u8>,
    },
    /// A stored checksum does not match the bytes it covers.
    ChecksumMismatch {
        /// Structure (and part of it) being checked.
        structure: &'static str,
        /// Offset of the covered bytes.
        offset: u64,
        /// The checksum stored on disk.
        expected: u32,
        /// The checksum of the bytes read.
        actual: u32,
    },
    /// A digest (blake3 or xxh3-128, SPEC.md §8.3) does not match.
    DigestMismatch {
        /// Structure being checked.
        structure: &'static str,
        /// Offset of the covered bytes.
        offset: u64,
    },
    /// Reserved bytes are not zero.
    ReservedNotZero {
        /// Structure being decoded.
        structure: &'static str,
        /// Offset of the reserved bytes.
        offset: u64,
    },
    /// A count is larger than the bytes that remain could hold.
    CountTooLarge {
        /// Structure being decoded.
        structure: &'static str,
        /// The count field.
        field: &'static str,
        /// Offset of the items.
        offset: u64,
        /// The count read.
        count: u64,
        /// Bytes that remained.
        available: u64,
    },
    /// Bytes remain after the structure's last field.
    TrailingBytes {
        /// Structure being decoded.
        structure: &'static str,
        /// Offset of the first extra byte.
        offset: u64,
        /// Number of extra bytes.
        len: u64,
    },
    /// A field holds a value the format does not allow.
    InvalidField {
        /// Structure being decoded.
        structure: &'static str,
        /// The field.
        field: &'static str,
        /// Offset of the structure or field.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The format version is not one this code reads.
    UnsupportedVersion {
        /// Structure being decoded.
        structure: &'static str,
        /// Offset of the structure.
        offset: u64,
        /// Major version found.
        major: u16,
        /// Minor version found.
        minor: u16,
    },
}

impl FormatError {
    /// A convenience constructor for `InvalidField`.
    pub fn invalid(structure: &'static str, field: &'static str, offset: u64, reason: impl Into<String>) -> Self {
        Self::InvalidField { structure, field, offset, reason: reason.into() }
    }

    fn offset_mut(&mut self) -> &mut u64 {
        match self {
            Self::Truncated { offset, .. }
            | Self::BadMagic { offset, .. }
            | Self::ChecksumMismatch { offset, .. }
            | Self::DigestMismatch { offset, .. }
            | Self::ReservedNotZero { offset, .. }
            | Self::CountTooLarge { offset, .. }
            | Self::TrailingBytes { offset, .. }
            | Self::InvalidField { offset, .. }
            | Self::UnsupportedVersion { offset, .. } => offset,
        }
    }

    /// The offset the error names.
    pub fn offset(&self) -> u64 {
        *self.clone().offset_mut()
    }

    /// The same error with its offset moved by `delta` (when a structure decoded from a
    /// sub-slice is reported in the enclosing area's coordinates).
    pub fn shifted(mut self, delta: u64) -> Self {
        *self.offset_mut() += delta;
        self
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { structure, offset, needed, available } => {
                write!(f, "{structure} at offset {offset}: truncated, needs {needed} bytes, {available} remain")
            }
            Self::BadMagic { structure, offset, found } => {
                write!(f, "{structure} at offset {offset}: bad magic {}", hex(found))
            }
            Self::ChecksumMismatch { structure, offset, expected, actual } => write!(
                f,
                "{structure} at offset {offset}: checksum mismatch, stored {expected:#010x}, computed {actual:#010x}"
            ),
            Self::DigestMismatch { structure, offset } => {
                write!(f, "{structure} at offset {offset}: digest mismatch")
            }
            Self::ReservedNotZero { structure, offset } => {
                write!(f, "{structure} at offset {offset}: reserved bytes are not zero")
            }
            Self::CountTooLarge { structure, field, offset, count, available } => write!(
                f,
                "{structure} at offset {offset}: {field} = {count} cannot fit in the {available} bytes that remain"
            ),
            Self::TrailingBytes { structure, offset, len } => {
                write!(f, "{structure} at offset {offset}: {len} unexpected trailing bytes")
            }
            Self::InvalidField { structure, field, offset, reason } => {
                write!(f, "{structure} at offset {offset}: {field}: {reason}")
            }
            Self::UnsupportedVersion { structure, offset, major, minor } => write!(
                f,
                "{structure} at offset {offset}: unsupported format version {major}.{minor} (this build reads 1.x)"
            ),
        }
    }
}

impl std::error::Error for FormatError {}

/// Lowercase hex of bytes, for messages and JSON.
pub fn hex(bytes: &[u8]) -> String {
    use fmt::Write;
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(text, "{byte:02x}");
    }
    text
}
