meta:
  id: lds_chunk_meta
  title: LDS chunk metadata
  license: Apache-2.0
  endian: le
doc: |
  The description of one chunk in a version (base version, delta version,
  compaction journal record). The chunk id is the slot of its sub-chunk 0.

  The invariants of SPEC.md §6.4 that need nothing but the record itself
  are `valid` checks (a record that breaks one does not parse): reserved
  bits and bytes zero, `level` below the level limit 16 (SPEC.md §16),
  `num_entries >= 1`, `smallest_seq <= largest_seq`, `smallest_key <=
  largest_key` (bytewise), `sub_chunks[0].slot == chunk_id`, and with flag
  `value_refs` (format 1.4) at least one value reference, ids strictly
  increasing, each of at least one byte, and with flag `log_refs` (format
  1.6) a log start at an offset that is a multiple of 8. Those that need the
  volume (slots below `num_slots`, all distinct; value chunks in the
  version) are not checked, nor that a log chunk is at level 0 (SPEC.md
  §6.2: a version that holds one elsewhere is invalid, not the record).
doc-ref: SPEC.md §6.4
seq:
  - id: chunk_id
    type: u8
    doc: Equal to the slot number of sub-chunk 0.
  - id: level
    type: u1
    valid:
      max: 15
    doc: Below the level limit 16 (SPEC.md §16).
  - id: flags
    type: u1
    valid:
      expr: (_ & 0xf8) == 0
    doc: |
      Bit 0 `odd` (SPEC.md §11); bit 1 `value_refs` (format 1.4): the value
      references follow the sub-chunks; bit 2 `log_refs` (format 1.6): the
      chunk is a log chunk and its log start follows (SPEC.md §8.9); the
      other bits are reserved.
  - id: num_sub_chunks
    type: u2
    valid:
      min: 1
  - id: reserved
    size: 4
    valid: '[0, 0, 0, 0]'
  - id: num_entries
    type: u8
    valid:
      min: 1
    doc: Entries over all sub-chunks.
  - id: smallest_seq
    type: u8
  - id: largest_seq
    type: u8
    valid:
      min: smallest_seq
  - id: len_data
    type: u8
    doc: Bytes used in the slots (bodies and tails of all sub-chunks).
  - id: len_smallest_key
    type: u2
  - id: smallest_key
    size: len_smallest_key
    doc: Smallest user key, inclusive.
  - id: len_largest_key
    type: u2
  - id: largest_key
    size: len_largest_key
    valid:
      expr: smallest_key <= _
    doc: Largest user key, inclusive; not below `smallest_key` (bytewise).
  - id: sub_chunks
    type: sub_chunk(_index)
    repeat: expr
    repeat-expr: num_sub_chunks
    doc: In key order (SPEC.md §8.4).
  - id: num_value_refs
    type: u4
    valid:
      min: 1
    if: has_value_refs
  - id: value_refs
    type: value_ref(_index)
    repeat: expr
    repeat-expr: num_value_refs
    if: has_value_refs
    doc: |
      For each value chunk the chunk's pointer entries reach, in strictly
      increasing id order, the bytes of their extents in it.
    doc-ref: SPEC.md §8.6
  - id: lsn_log_start
    type: u8
    if: has_log_refs
    doc: |
      The lsn of the backup log object with the smallest lsn that the
      chunk's log references name (its log start).
    doc-ref: SPEC.md §8.9
  - id: ofs_log_start
    type: u8
    valid:
      expr: _ % 8 == 0
    if: has_log_refs
    doc: That object's offset in the backup log area; a multiple of 8.
    doc-ref: SPEC.md §8.9
instances:
  odd:
    value: (flags & 1) != 0
  has_value_refs:
    value: (flags & 2) != 0
    doc: Flag `value_refs` (format 1.4), set on chunks holding pointer entries.
  has_log_refs:
    value: (flags & 4) != 0
    doc: |
      Flag `log_refs` (format 1.6), set exactly on log chunks: level-0
      chunks holding log reference entries (lds_log_ref). The version's
      retention start is the smallest (by lsn) of its backup start and its
      log chunks' log starts (SPEC.md §8.9).
types:
  sub_chunk:
    doc-ref: SPEC.md §6.4
    params:
      - id: index
        type: u2
        doc: Position in `sub_chunks`.
    seq:
      - id: slot
        type: u8
        valid:
          expr: index != 0 or _ == _parent.chunk_id
        doc: The slot of sub-chunk 0 is the chunk id.
      - id: digest
        size: 32
        doc: The digest from that sub-chunk's footer (blake3, or xxh3-128 from format 1.3, SPEC.md §8.3).
  value_ref:
    doc: The bytes a chunk's pointers hold in one value chunk (its live bytes there).
    doc-ref: SPEC.md §6.4
    params:
      - id: index
        type: u4
        doc: Position in `value_refs`.
    seq:
      - id: value_chunk_id
        type: u8
        valid:
          expr: index == 0 or _ > _parent.value_refs[index - 1].value_chunk_id
        doc: Above the previous reference's.
      - id: bytes
        type: u8
        valid:
          min: 1
