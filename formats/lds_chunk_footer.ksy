meta:
  id: lds_chunk_footer
  title: LDS chunk footer
  license: Apache-2.0
  endian: le
doc: |
  The last 160 bytes of a slot holding a chunk (or one sub-chunk of a chunk
  larger than a slot). All offsets are from the slot start. Invariants:
  `ofs_filter + len_filter == slot_size - 160`, `ofs_index + len_index ==
  ofs_filter`, `len_body <= ofs_index`. `digest` is blake3 of body ‖ index ‖
  filter ‖ footer bytes 0..104, or with flag bit 1 (format 1.3) xxh3-128 of the
  same bytes (little endian) and 16 zero bytes; `footer_crc32c` covers bytes
  0..156. Neither is checked here.
doc-ref: SPEC.md §8.3
seq:
  - id: magic
    contents: LDSCHUNK
  - id: version_major
    type: u2
    doc: |
      1. Read raw (not a `valid` check), so that an inspection tool can
      still show a footer of another version.
  - id: level
    type: u1
    doc: Level at the time of writing (informational).
  - id: flags
    type: u1
    doc: |
      Bit 0 `odd`; bit 1 (format 1.3) the digest is xxh3-128, not blake3; the
      other bits are reserved.
  - id: instance
    type: u4
    doc: The owning instance.
  - id: chunk_id
    type: u8
    doc: Slot of sub-chunk 0 of the chunk.
  - id: sub_chunk_index
    type: u2
    doc: 0-based.
  - id: num_sub_chunks
    type: u2
  - id: num_blocks
    type: u4
  - id: num_entries
    type: u8
    doc: In this sub-chunk.
  - id: smallest_seq
    type: u8
  - id: largest_seq
    type: u8
  - id: len_body
    type: u4
    doc: Bytes of blocks from the slot start.
  - id: ofs_index
    type: u4
  - id: len_index
    type: u4
  - id: index_crc32c
    type: u4
    doc: crc32c of the index bytes.
  - id: ofs_filter
    type: u4
  - id: len_filter
    type: u4
  - id: filter_crc32c
    type: u4
    doc: crc32c of the filter bytes.
  - id: slot_size
    type: u4
    doc: The slot size the chunk was written for.
  - id: volume_uuid
    size: 16
  - id: digest
    size: 32
  - id: ofs_sketch
    type: u4
    doc: |
      Format 1.5 (feature `chunk_sketches`): offset of the key sketch
      (lds_key_sketch, SPEC.md §8.7) from the slot start; 0 without one.
  - id: len_sketch
    type: u4
    doc: |
      Bytes of the key sketch; 0: none. Otherwise `len_body <= ofs_sketch`
      and `ofs_sketch + len_sketch == ofs_index`.
  - id: sketch_crc32c
    type: u4
    doc: crc32c of the key sketch; 0 without one.
  - id: reserved
    size: 8
  - id: footer_crc32c
    type: u4
    doc: crc32c of footer bytes 0..156.
instances:
  odd:
    value: (flags & 1) != 0
  has_sketch:
    value: len_sketch != 0
    doc: The sub-chunk carries a key sketch (SPEC.md §8.7, format 1.5).
  has_xxh3_digest:
    value: (flags & 2) != 0
    doc: The digest is xxh3-128 and 16 zero bytes (SPEC.md §8.3, format 1.3).
