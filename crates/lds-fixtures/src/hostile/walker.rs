//! The walker every decoder of a hostile volume's structures reads fields with (`walk` for
//! the volume's structures, `undo` for the undo file's): each field with its place, what it
//! holds, its extra variants and the seals covering it. A file of its own, so that `walk`
//! (which lists the undo file's fields through `undo`) and `undo` both use it without
//! importing each other in a circle.

use super::{le, read_le, FieldRef, Kind, Seal, Variant};

/// A uuid no base volume has: the "other volume" of uuid fields.
pub const FOREIGN_UUID: [u8; 16] = *b"hostile-volume!!";

/// Reads fields from a run of bytes of one file.
pub(crate) struct Walker<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) file: usize,
    pub(super) at: usize,
    pub(super) end: usize,
    /// Fields are read but not listed (later elements of a list).
    pub(super) quiet: bool,
    pub(super) seals: Vec<Seal>,
    pub(super) out: Vec<FieldRef>,
}

impl<'a> Walker<'a> {
    pub(crate) fn new(bytes: &'a [u8], file: usize, at: usize, end: usize, seals: Vec<Seal>) -> Self {
        Self { bytes, file, at, end: end.min(bytes.len()), quiet: false, seals, out: Vec::new() }
    }

    pub(super) fn left(&self) -> usize {
        self.end.saturating_sub(self.at)
    }

    pub(super) fn take(&mut self, width: usize) -> Option<usize> {
        if self.left() < width {
            return None;
        }
        let at = self.at;
        self.at += width;
        Some(at)
    }

    pub(super) fn push(&mut self, path: &str, at: usize, width: usize, kind: Kind, extras: Vec<(Variant, Vec<u8>)>) {
        let listed = !self.quiet || matches!(kind, Kind::Digest { .. });
        if listed {
            let seals = self.seals.clone();
            self.out.push(FieldRef {
                path: path.to_string(),
                file: self.file,
                at,
                width,
                kind,
                extras,
                also: Vec::new(),
                seals,
            });
        }
    }

    /// An integer of `width` bytes with extra variants.
    pub(crate) fn num(&mut self, path: &str, width: usize, extras: &[(Variant, u64)]) -> Option<u64> {
        let at = self.take(width)?;
        let extras = extras.iter().map(|&(variant, value)| (variant, le(value, width))).collect();
        self.push(path, at, width, Kind::Num, extras);
        Some(read_le(self.bytes, at, width))
    }

    /// A uuid with extra variants.
    pub(crate) fn uuid(&mut self, path: &str, extras: &[(Variant, [u8; 16])]) -> Option<[u8; 16]> {
        let at = self.take(16)?;
        let extras = extras.iter().map(|(variant, uuid)| (*variant, uuid.to_vec())).collect();
        self.push(path, at, 16, Kind::Uuid, extras);
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&self.bytes[at..at + 16]);
        Some(uuid)
    }

    /// Bytes that must be zero.
    pub(crate) fn reserved(&mut self, path: &str, width: usize) -> Option<()> {
        if width == 0 {
            return Some(());
        }
        let at = self.take(width)?;
        self.push(path, at, width, Kind::Reserved, Vec::new());
        Some(())
    }

    /// A magic.
    pub(crate) fn magic(&mut self, path: &str, width: usize) -> Option<()> {
        let at = self.take(width)?;
        self.push(path, at, width, Kind::Magic, Vec::new());
        Some(())
    }

    /// A digest another structure's seal rewrites.
    pub(super) fn digest(&mut self, path: &str, slot: u64, value_chunk: bool) -> Option<()> {
        let at = self.take(32)?;
        self.push(path, at, 32, Kind::Digest { slot, value_chunk }, Vec::new());
        Some(())
    }

    /// Bytes that are not a case (a checksum the seals recompute, key bytes).
    pub(crate) fn skip(&mut self, width: usize) -> Option<()> {
        self.take(width).map(|_| ())
    }

    /// A key: its u16 length (a field) and its bytes.
    pub(super) fn key(&mut self, path: &str) -> Option<()> {
        let left = self.left().saturating_sub(2) as u64;
        let len = self.num(&format!("{path}.len"), 2, &[(Variant::PastEnd, (left + 1).min(0xffff))])?;
        self.skip(len as usize)
    }

    /// The fields listed.
    pub(crate) fn finish(self) -> Vec<FieldRef> {
        self.out
    }
}
