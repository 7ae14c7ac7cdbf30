meta:
  id: lds_base_version
  title: LDS base version (version log payload)
  license: Apache-2.0
  endian: le
  imports:
    - lds_label
    - lds_chunk_meta
doc: |
  Payload of a `base_version` log object: a complete description of one
  instance's tree. The `compact_pointer` and `value_chunk_meta` types are
  shared with the delta version.

  On volumes with feature `value_chunks` (format 1.4, lds_label) the chunk
  metadata is followed by the value section: the value chunks of the tree.
  A reader knows the section by the bytes that remain after the chunk
  metadata (SPEC.md §6.1), as this definition does (`values`).

  The payload is exactly the structure: counts and lengths inside it, no
  trailing bytes. A payload that breaks a rule of SPEC.md it can be checked
  against alone (reserved bytes, ranges, the chunk metadata invariants) does
  not parse.
doc-ref: SPEC.md §6.1
seq:
  - id: geometry
    type: lds_label::geometry
    valid:
      expr: _.is_consistent
    doc: |
      Replica of the label's geometry at the time of writing; it meets the
      invariants of SPEC.md §3 (but the one against the device length).
  - id: instance
    type: u4
  - id: num_levels
    type: u4
    valid:
      min: 1
      max: 16
    doc: Level 0 is the youngest.
  - id: last_sequence
    type: u8
    doc: The largest key sequence number contained in the version's chunks.
  - id: label_generation
    type: u8
    doc: The label `generation` this version was written under (SPEC.md §14).
  - id: ofs_backup_start
    type: u8
    doc: Offset of the first backup log object not yet contained in chunks.
  - id: lsn_backup_start
    type: u8
    doc: The `lsn` that object will have.
  - id: num_chunks
    type: u4
  - id: num_compact_pointers
    type: u4
  - id: compact_pointers
    type: compact_pointer
    repeat: expr
    repeat-expr: num_compact_pointers
  - id: chunks
    type: lds_chunk_meta
    repeat: expr
    repeat-expr: num_chunks
  - id: values
    type: value_section
    if: not _io.eof
    doc: |
      The value section (format 1.4), present exactly when bytes remain after
      the chunk metadata; writers add it exactly on volumes with feature
      `value_chunks`.
    doc-ref: SPEC.md §6.1
  - id: trailing
    size-eos: true
    valid:
      expr: _.size == 0
    doc: Nothing may follow the last chunk metadata (or the value section) in the payload.
types:
  compact_pointer:
    doc: Where the round-robin victim choice of a level resumes.
    doc-ref: SPEC.md §6.1
    seq:
      - id: level
        type: u1
        valid:
          max: 15
        doc: Below the level limit 16 (SPEC.md §16).
      - id: len_key
        type: u2
      - id: key
        size: len_key
  value_section:
    doc: The value chunks of the tree (format 1.4).
    doc-ref: SPEC.md §6.1
    seq:
      - id: next_value_chunk_id
        type: u8
        doc: Above every value chunk id the instance has used.
      - id: num_value_chunks
        type: u4
      - id: reserved
        size: 4
        valid: '[0, 0, 0, 0]'
      - id: value_chunks
        type: value_chunk_meta
        repeat: expr
        repeat-expr: num_value_chunks
  value_chunk_meta:
    doc: |
      One value chunk of a version (56 bytes): its id, the slot holding it,
      and its footer's `len_body` and `digest` (lds_value_footer).
    doc-ref: SPEC.md §6.5
    seq:
      - id: value_chunk_id
        type: u8
        valid:
          min: 1
        doc: At least 1, unique within the version.
      - id: slot
        type: u8
        doc: Below `num_slots`, used by nothing else.
      - id: len_body
        type: u4
      - id: reserved
        size: 4
        valid: '[0, 0, 0, 0]'
      - id: digest
        size: 32
