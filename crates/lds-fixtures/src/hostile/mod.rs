//! Hostile volumes (issue 39, docs/reliability.md F9): volumes crafted field by field from
//! SPEC.md's byte tables, every checksum and digest recomputed so that the tools get past them
//! and act on the hostile value.
//!
//! A case starts from a small healthy volume the real engine wrote (the frozen fixtures of
//! `fixtures/v1.*`, which hold wrapped logs, value chunks, key sketches, log chunks and a volume
//! of two devices), or one the format crate's encoders wrote (`fixtures/d_journal`), or an undo
//! file the real undo writer wrote ([`undo`]). It decodes each structure ([`walk`]: labels and
//! their geometry and device table; version log objects, base and delta versions with their
//! chunk metadata and value sections, compaction journal records and wrap objects; backup log
//! write batches and their value pointers; chunk footers, block indexes, filters, key sketches,
//! block trailers and entries with their value pointers and log references; value chunk
//! footers; undo file headers, state blocks, batches and records), and for each field produces
//! variants: 0, 1, its maximum, past the end of what it names, overlapping another structure,
//! and a cycle (a wrap object pointing at itself, an lsn or batch number repeated, a device
//! listed twice). Each variant is written into the field and then every checksum and digest
//! covering it is recomputed ([`seal`]): the block's crc32c, the chunk's index, filter and
//! sketch checksums, its digest and footer checksum, the digests the version log's chunk
//! metadata repeats (and those objects' checksums), a label's crc32c, an undo file's record,
//! batch and chain checksums and its state block.
//!
//! Cases are named `BASE:STRUCTURE.FIELD=VARIANT`, e.g.
//! `levels:label.geometry.num_slots=max` or `values:vlog.bv.chunk[0].sub_chunk[0].slot=past_end`;
//! [`cases`] lists them all, [`craft`] builds one. The same name always gives the same bytes
//! (docs/reliability.md I8): nothing depends on time or randomness.
//!
//! [`runner`] runs every command of the `lds` binary against each crafted volume and checks
//! the oracles I6, I9 and I10 (the binary `lds-hostile`, and `crates/lds-cli/tests/hostile.rs`
//! for the bounded set that runs in `cargo test`).
#![deny(missing_docs)]

pub mod runner;
pub mod seal;
pub mod undo;
pub mod walk;
mod walker;

use std::collections::BTreeMap;
use std::fmt;

use lds_format::device_table::member_ofs_slot_area;
use lds_format::geometry::Geometry;
use lds_format::label::Label;

/// Why a case cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseError(pub String);

impl fmt::Display for CaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CaseError {}

/// What a field is set to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Variant {
    /// Every byte zero.
    Zero,
    /// The value 1 (a reserved field: its first byte 1).
    One,
    /// Every byte 0xff: the largest value the field holds.
    Max,
    /// The first value past what the field may name: the end of its area, slot or payload,
    /// the slot count, one more element than the bytes hold.
    PastEnd,
    /// A value naming another structure: another chunk's slot, another object's offset, an
    /// area that overlaps the next one, another device's slots.
    Overlap,
    /// A value that makes a structure name itself or repeat: a wrap object pointing at itself,
    /// an lsn or batch number repeated, a device listed twice.
    Cycle,
    /// Another volume's or device's uuid.
    Other,
    /// A code no version defines (an object type, an entry kind, a feature bit).
    Unknown,
}

impl Variant {
    /// Every variant, in the order cases list them.
    pub const ALL: [Variant; 8] = [
        Variant::Zero,
        Variant::One,
        Variant::Max,
        Variant::PastEnd,
        Variant::Overlap,
        Variant::Cycle,
        Variant::Other,
        Variant::Unknown,
    ];

    /// The name in a case name.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Zero => "0",
            Variant::One => "1",
            Variant::Max => "max",
            Variant::PastEnd => "past_end",
            Variant::Overlap => "overlap",
            Variant::Cycle => "cycle",
            Variant::Other => "other",
            Variant::Unknown => "unknown",
        }
    }

    /// The variant called `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|variant| variant.name() == name)
    }
}

/// What a field holds, which decides its variants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// An integer: 0, 1, max and the field's extras.
    Num,
    /// A uuid: 0, max (every byte 0xff) and the extras (another volume's or device's).
    Uuid,
    /// Bytes that must be zero: 1 and max.
    Reserved,
    /// A magic: 0.
    Magic,
    /// A whole structure re-encoded (a list made to repeat an element, which changes its
    /// length): the extras only, each the structure's new bytes, checksums computed.
    Whole,
    /// A digest another structure repeats (a chunk's in chunk metadata, a value chunk's in
    /// its metadata): never a case of its own, rewritten when that structure is resealed.
    Digest {
        /// The slot of the structure it repeats the digest of.
        slot: u64,
        /// A value chunk's (else a chunk's).
        value_chunk: bool,
    },
}

/// A checksum or digest to recompute after a field changed, innermost first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seal {
    /// A label copy (SPEC.md §4): its crc32c.
    Label {
        /// File index.
        file: usize,
        /// Offset of the label.
        at: usize,
    },
    /// A log object (SPEC.md §5): its payload's crc32c (where the payload its header claims
    /// lies in the area) and its header's.
    Object {
        /// File index.
        file: usize,
        /// The log area's first byte.
        area_at: usize,
        /// The log area's length.
        area_len: usize,
        /// Offset of the object.
        at: usize,
    },
    /// A block (SPEC.md §8.2): its trailer's crc32c, over the block as the index placed it
    /// before the change.
    Block {
        /// File index.
        file: usize,
        /// Offset of the block.
        at: usize,
        /// Its length, trailer included.
        len: usize,
    },
    /// A value pointer (SPEC.md §8.6): its `value_crc32c`, over the bytes its extents now name.
    Pointer {
        /// File index.
        file: usize,
        /// Offset of the pointer.
        at: usize,
        /// Its length.
        len: usize,
    },
    /// The chunk in a slot (SPEC.md §8.3): index, filter and sketch checksums, digest, footer
    /// checksum, and the digest in every chunk metadata naming the slot.
    Chunk {
        /// The slot.
        slot: u64,
    },
    /// The value chunk in a slot (SPEC.md §8.6): digest and footer checksum, and the digest in
    /// every value chunk metadata naming the slot.
    ValueChunk {
        /// The slot.
        slot: u64,
    },
    /// An undo file (docs/undo-file.md): record, batch and chain checksums, the FINAL digest,
    /// the state block and the header's crc32c.
    Undo {
        /// File index.
        file: usize,
    },
}

/// One field of one structure of a volume or undo file.
#[derive(Debug, Clone)]
pub struct FieldRef {
    /// `label.geometry.num_slots`, `vlog.dv.added[0].sub_chunk[0].slot`, ...
    pub path: String,
    /// Index of the file holding it ([`Volume::files`]).
    pub file: usize,
    /// Offset of its first byte in that file.
    pub at: usize,
    /// Bytes.
    pub width: usize,
    /// What it holds.
    pub kind: Kind,
    /// The values of its variants beyond 0, 1 and max (little-endian, `width` bytes).
    pub extras: Vec<(Variant, Vec<u8>)>,
    /// Other places the same value is written to (a label field's place in the backup copy).
    pub also: Vec<(usize, usize)>,
    /// What to recompute after it changed.
    pub seals: Vec<Seal>,
}

impl FieldRef {
    /// The variants of this field and the bytes each writes, without those equal to what the
    /// field holds in `current`.
    pub fn variants(&self, current: &[u8]) -> Vec<(Variant, Vec<u8>)> {
        let mut all: Vec<(Variant, Vec<u8>)> = match self.kind {
            Kind::Num => vec![
                (Variant::Zero, vec![0; self.width]),
                (Variant::One, le(1, self.width)),
                (Variant::Max, vec![0xff; self.width]),
            ],
            Kind::Uuid => vec![(Variant::Zero, vec![0; self.width]), (Variant::Max, vec![0xff; self.width])],
            Kind::Reserved => {
                let mut one = vec![0; self.width];
                one[0] = 1;
                vec![(Variant::One, one), (Variant::Max, vec![0xff; self.width])]
            }
            Kind::Magic => vec![(Variant::Zero, vec![0; self.width])],
            Kind::Whole | Kind::Digest { .. } => Vec::new(),
        };
        all.extend(self.extras.iter().cloned());
        let mut seen = Vec::new();
        all.retain(|(variant, bytes)| {
            let keep = bytes.as_slice() != current && !seen.contains(variant);
            seen.push(*variant);
            keep
        });
        all
    }
}

/// `value` little-endian in `width` bytes (cut to them).
pub fn le(value: u64, width: usize) -> Vec<u8> {
    let mut bytes = value.to_le_bytes().to_vec();
    bytes.resize(width.max(8), 0);
    bytes.truncate(width);
    bytes
}

/// The little-endian integer of at most 8 bytes at `at` (0 past the end).
pub fn read_le(bytes: &[u8], at: usize, width: usize) -> u64 {
    let Some(field) = bytes.get(at..at.saturating_add(width)) else { return 0 };
    field.iter().take(8).rev().fold(0, |value, &byte| value << 8 | u64::from(byte))
}

/// The files of a case: a volume's devices (the first device first), then its undo file when
/// the case is about one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// The bytes of each file.
    pub files: Vec<Vec<u8>>,
    /// How many of them are devices (the rest: the undo file).
    pub devices: usize,
}

impl Volume {
    /// The undo file's index, when there is one.
    pub fn undo_index(&self) -> Option<usize> {
        (self.files.len() > self.devices).then_some(self.devices)
    }
}

/// Where the slots of a volume lie on its devices (SPEC.md §4.3), from its first device's
/// primary label.
#[derive(Debug, Clone)]
pub struct Space {
    /// The volume's geometry.
    pub geometry: Geometry,
    /// Its label (the first device's primary copy).
    pub label: Label,
    /// `(first_slot, num_slots)` of each device; one entry for a volume of one device.
    pub extents: Vec<(u64, u64)>,
}

impl Space {
    /// The layout of `volume`, from its first device's primary label.
    pub fn of(volume: &Volume) -> Result<Self, CaseError> {
        let first = volume.files.first().ok_or_else(|| CaseError("a volume without devices".into()))?;
        let label = Label::decode(first.get(..lds_format::label::LABEL_LEN).unwrap_or_default(), 0)
            .map_err(|error| CaseError(format!("the base volume's primary label: {error}")))?;
        let geometry = label.geometry;
        let extents = match &label.devices {
            Some(table) => table.devices.iter().map(|entry| (entry.first_slot, entry.num_slots)).collect(),
            None => vec![(0, geometry.num_slots)],
        };
        Ok(Self { geometry, label, extents })
    }

    /// The file index and offset of slot `slot`, when a device holds it.
    pub fn slot_at(&self, slot: u64) -> Option<(usize, usize)> {
        let (device, (first, _)) =
            self.extents.iter().enumerate().find(|(_, (first, count))| (*first..first + count).contains(&slot))?;
        let offset = if device == 0 {
            self.geometry.slot_offset(slot)
        } else {
            member_ofs_slot_area(&self.geometry) + (slot - first) * self.geometry.slot_size
        };
        Some((device, usize::try_from(offset).ok()?))
    }
}

/// One base volume the cases start from.
#[derive(Debug, Clone, Copy)]
pub struct Base {
    /// Its name, the first part of a case name.
    pub name: &'static str,
    /// What it holds.
    pub description: &'static str,
    /// Its device images under fixtures/ (gzip), the first device first.
    pub images: &'static [&'static str],
    /// The structures whose fields become cases on it.
    pub groups: &'static [Group],
}

/// A family of structures whose fields become cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// Both label copies of the first device: every field of SPEC.md §4 and §4.1.
    Label,
    /// The device table (SPEC.md §4.3) of the first device's labels and of the second's.
    DeviceTable,
    /// The version log's live base version and last delta version (SPEC.md §5, §6).
    VersionLog,
    /// The version log's compaction journal record (SPEC.md §6.3).
    Journal,
    /// The wrap objects of both logs (SPEC.md §5.2).
    Wraps,
    /// The backup log's last write batch, and one holding a value pointer (SPEC.md §7).
    BackupLog,
    /// A live chunk: footer, index, filter, block trailer (SPEC.md §8).
    Chunk,
    /// The entries of a live chunk's blocks (fixed entries), its value pointers and log
    /// references (SPEC.md §8.2, §8.6, §8.9).
    Entries,
    /// A chunk's key sketch (SPEC.md §8.7).
    Sketch,
    /// A value chunk's footer (SPEC.md §8.6).
    ValueChunk,
    /// An undo file (docs/undo-file.md).
    Undo,
}

/// The bases, in the order cases list them.
pub const BASES: &[Base] = &[
    Base {
        name: "levels",
        description: "format 1.7 (compact entries): chunks in several levels, compact pointers, trims",
        images: &["v1.7/levels/image.gz"],
        groups: &[Group::Label, Group::VersionLog, Group::BackupLog, Group::Chunk],
    },
    Base {
        name: "wrapped",
        description: "format 1.6 without log chunks: both logs wrapped, fixed block entries, batches to replay",
        images: &["v1.6/wrapped/image.gz"],
        groups: &[Group::Wraps, Group::Entries, Group::BackupLog],
    },
    Base {
        name: "values",
        description: "format 1.4: value chunks, value pointers in blocks and batches, value sections",
        images: &["v1.4/values/image.gz"],
        groups: &[Group::VersionLog, Group::BackupLog, Group::ValueChunk, Group::Entries],
    },
    Base {
        name: "sketches",
        description: "format 1.5: level-0 chunks with key sketches",
        images: &["v1.5/deferred_level0/image.gz"],
        groups: &[Group::Chunk, Group::Sketch],
    },
    Base {
        name: "log_chunks",
        description: "format 1.6: log chunks whose references run across the backup log's wrap",
        images: &["v1.6/log_across_wrap/image.gz"],
        groups: &[Group::VersionLog, Group::Entries],
    },
    Base {
        name: "two_devices",
        description: "format 1.2: a volume of two devices, chunks on both, both logs wrapped",
        images: &["v1.2/two_devices/image.gz", "v1.2/two_devices/device-1.gz"],
        groups: &[Group::Label, Group::DeviceTable, Group::Chunk],
    },
    Base {
        name: "journal",
        description: "an unfinished compaction recorded in a compaction journal record",
        images: &["d_journal/image.gz"],
        groups: &[Group::Journal],
    },
    Base {
        name: "undo",
        description: "an undo file the real undo writer wrote for three writes to d_versions, finished",
        images: &["d_versions/image.gz"],
        groups: &[Group::Undo],
    },
];

/// The base called `name`.
pub fn base(name: &str) -> Option<&'static Base> {
    BASES.iter().find(|base| base.name == name)
}

/// The healthy volume (and undo file) of a base, as the cases start from it.
pub fn load_base(base: &Base) -> Result<Volume, CaseError> {
    let root = crate::fixtures_root();
    let mut files = Vec::new();
    for image in base.images {
        let path = root.join(image);
        let packed = std::fs::read(&path).map_err(|error| CaseError(format!("{}: {error}", path.display())))?;
        files.push(crate::decompress(&packed).map_err(|error| CaseError(format!("{}: {error}", path.display())))?);
    }
    let devices = files.len();
    let mut volume = Volume { files, devices };
    if base.groups.contains(&Group::Undo) {
        let (after, undo_file) = undo::make(&volume.files[0])?;
        volume.files[0] = after;
        volume.files.push(undo_file);
    }
    Ok(volume)
}

/// One case: a base, a field and a variant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// `BASE:PATH=VARIANT`.
    pub name: String,
    /// The base's name.
    pub base: &'static str,
    /// The field's path.
    pub path: String,
    /// The variant.
    pub variant: Variant,
}

/// The fields of `volume` (a copy of `base`'s) that become cases, in a fixed order.
pub fn fields(base: &Base, volume: &Volume) -> Result<Vec<FieldRef>, CaseError> {
    let space = Space::of(volume)?;
    let mut fields = Vec::new();
    for group in base.groups {
        fields.extend(walk::group(*group, volume, &space)?);
    }
    // A path names one field: the first one walked.
    let mut seen = std::collections::BTreeSet::new();
    fields.retain(|field| !matches!(field.kind, Kind::Digest { .. }) && seen.insert(field.path.clone()));
    Ok(fields)
}

/// Every case of `base`.
pub fn base_cases(base: &'static Base) -> Result<Vec<Case>, CaseError> {
    let volume = load_base(base)?;
    let mut cases = Vec::new();
    for field in fields(base, &volume)? {
        let current = &volume.files[field.file][field.at..field.at + field.width];
        for (variant, _) in field.variants(current) {
            cases.push(Case {
                name: format!("{}:{}={}", base.name, field.path, variant.name()),
                base: base.name,
                path: field.path.clone(),
                variant,
            });
        }
    }
    Ok(cases)
}

/// Every case of every base.
pub fn cases() -> Result<Vec<Case>, CaseError> {
    let mut all = Vec::new();
    for base in BASES {
        all.extend(base_cases(base)?);
    }
    Ok(all)
}

/// Splits `BASE:PATH=VARIANT`.
pub fn parse_name(name: &str) -> Result<(&'static Base, String, Variant), CaseError> {
    let bad = || CaseError(format!("{name}: a case is named BASE:FIELD=VARIANT"));
    let (base_name, rest) = name.split_once(':').ok_or_else(bad)?;
    let (path, variant) = rest.rsplit_once('=').ok_or_else(bad)?;
    let base = base(base_name).ok_or_else(|| {
        let names: Vec<&str> = BASES.iter().map(|base| base.name).collect();
        CaseError(format!("{name}: no base {base_name} (there are {})", names.join(", ")))
    })?;
    let variant = Variant::from_name(variant).ok_or_else(|| {
        let names: Vec<&str> = Variant::ALL.iter().map(|variant| variant.name()).collect();
        CaseError(format!("{name}: no variant {variant} (there are {})", names.join(", ")))
    })?;
    Ok((base, path.to_string(), variant))
}

/// A crafted case: its files and what was changed.
#[derive(Debug, Clone)]
pub struct Crafted {
    /// The case's name.
    pub name: String,
    /// The base it started from.
    pub base: &'static Base,
    /// The crafted files.
    pub volume: Volume,
    /// The field changed.
    pub field: FieldRef,
    /// The bytes written into it.
    pub value: Vec<u8>,
}

/// Builds the case called `name` from `healthy`, the base's volume ([`load_base`]).
pub fn craft_from(name: &str, healthy: &Volume) -> Result<Crafted, CaseError> {
    let (base, path, variant) = parse_name(name)?;
    let fields = fields(base, healthy)?;
    let field = fields
        .into_iter()
        .find(|field| field.path == path)
        .ok_or_else(|| CaseError(format!("{name}: base {} has no field {path}", base.name)))?;
    let current = &healthy.files[field.file][field.at..field.at + field.width];
    let (_, value) = field
        .variants(current)
        .into_iter()
        .find(|(candidate, _)| *candidate == variant)
        .ok_or_else(|| CaseError(format!("{name}: field {path} has no variant {} here", variant.name())))?;
    let mut volume = healthy.clone();
    volume.files[field.file][field.at..field.at + field.width].copy_from_slice(&value);
    for &(file, at) in &field.also {
        if let Some(place) = volume.files.get_mut(file).and_then(|bytes| bytes.get_mut(at..at + field.width)) {
            place.copy_from_slice(&value);
        }
    }
    seal::reseal(&mut volume, &field, &Space::of(healthy)?)?;
    Ok(Crafted { name: name.to_string(), base, volume, field, value })
}

/// Builds the case called `name`.
pub fn craft(name: &str) -> Result<Crafted, CaseError> {
    let (base, _, _) = parse_name(name)?;
    craft_from(name, &load_base(base)?)
}

/// The healthy volumes of the bases, loaded once (the runner crafts many cases from each).
#[derive(Debug, Default)]
pub struct Bases {
    loaded: BTreeMap<&'static str, Volume>,
}

impl Bases {
    /// The healthy volume of `base`.
    pub fn get(&mut self, base: &'static Base) -> Result<&Volume, CaseError> {
        if !self.loaded.contains_key(base.name) {
            let volume = load_base(base)?;
            self.loaded.insert(base.name, volume);
        }
        self.loaded.get(base.name).ok_or_else(|| CaseError(format!("base {} not loaded", base.name)))
    }
}
