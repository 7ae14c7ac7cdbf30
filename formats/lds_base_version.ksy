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
  instance's tree. The `compact_pointer` type is shared with the delta version.

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
  - id: trailing
    size-eos: true
    valid:
      expr: _.size == 0
    doc: Nothing may follow the last chunk metadata in the payload.
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
