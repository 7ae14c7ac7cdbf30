meta:
  id: lds_value_footer
  title: LDS value chunk footer
  license: Apache-2.0
  endian: le
doc: |
  The last 160 bytes of a slot holding a value chunk (format 1.4, feature
  `value_chunks`): the chunk's values are its body, back to back from the
  slot start (`len_body` bytes), then padding, then this footer. A reader
  finds it where a chunk footer would be (`slot_end - 160`) and tells the
  two apart by the magic.

  `digest` is blake3 of body ‖ footer bytes 0..48, or with flag bit 1
  xxh3-128 of the same bytes (little endian) and 16 zero bytes (as in a
  chunk footer, SPEC.md §8.3); `footer_crc32c` covers bytes 0..156. Neither
  is checked here, and every field is read raw (no `valid` check), so that
  an inspection tool can still show a damaged footer.
doc-ref: SPEC.md §8.6
seq:
  - id: magic
    contents: LDSVALUE
  - id: version_major
    type: u2
    doc: 1 (read raw).
  - id: reserved1
    type: u1
    doc: Reserved, zero.
  - id: flags
    type: u1
    doc: Bit 1, the digest is xxh3-128 (as in a chunk footer); others reserved.
  - id: instance
    type: u4
    doc: The owning instance.
  - id: value_chunk_id
    type: u8
    doc: At least 1; pointers name the value chunk by it.
  - id: len_body
    type: u4
    doc: Bytes of values from the slot start, at most `slot_size - 160`.
  - id: slot_size
    type: u4
    doc: The slot size it was written for.
  - id: volume_uuid
    size: 16
  - id: digest
    size: 32
    doc: Of body ‖ footer bytes 0..48.
  - id: reserved2
    size: 76
    doc: Reserved, zero.
  - id: footer_crc32c
    type: u4
    doc: crc32c of footer bytes 0..156.
instances:
  has_xxh3_digest:
    value: (flags & 2) != 0
    doc: The digest is xxh3-128 and 16 zero bytes.
