meta:
  id: lds_delta_version
  title: LDS delta version (version log payload)
  license: Apache-2.0
  endian: le
  imports:
    - lds_base_version
    - lds_chunk_meta
doc: |
  Payload of a `delta_version` log object: the result of one flush or
  compaction. Applied to a version it deletes `deleted`, replaces the listed
  compact pointers, then adds `added`. The payload is exactly the structure
  (no trailing bytes), with zero reserved bytes.

  On volumes with feature `value_chunks` (format 1.4, lds_label) the added
  chunk metadata is followed by the value section: the value chunks this
  change deletes and adds (deleted first: a value chunk that moves is
  deleted and added with its id). A reader knows the section by the bytes
  that remain (SPEC.md §6.2), as this definition does (`values`).
doc-ref: SPEC.md §6.2
seq:
  - id: last_sequence
    type: u8
    doc: As in the base version, after this change.
  - id: ofs_backup_start
    type: u8
    doc: After this change; unchanged values mean the backup log was not reset.
  - id: lsn_backup_start
    type: u8
  - id: compaction_id
    type: u8
    doc: 0, or the id of the journaled compaction this delta version completes.
  - id: num_deleted
    type: u4
  - id: num_added
    type: u4
  - id: num_compact_pointers
    type: u4
  - id: reserved
    size: 4
    valid: '[0, 0, 0, 0]'
  - id: deleted
    type: deleted_chunk
    repeat: expr
    repeat-expr: num_deleted
  - id: compact_pointers
    type: lds_base_version::compact_pointer
    repeat: expr
    repeat-expr: num_compact_pointers
    doc: Each replaces that level's pointer.
  - id: added
    type: lds_chunk_meta
    repeat: expr
    repeat-expr: num_added
  - id: values
    type: value_delta
    if: not _io.eof
    doc: |
      The value section (format 1.4), present exactly when bytes remain after
      the added chunk metadata.
    doc-ref: SPEC.md §6.2
  - id: trailing
    size-eos: true
    valid:
      expr: _.size == 0
    doc: Nothing may follow the last added chunk (or the value section) in the payload.
types:
  deleted_chunk:
    doc-ref: SPEC.md §6.2
    seq:
      - id: chunk_id
        type: u8
      - id: level
        type: u1
      - id: reserved
        size: 7
        valid: '[0, 0, 0, 0, 0, 0, 0]'
  value_delta:
    doc: The value chunk changes of a delta version (format 1.4).
    doc-ref: SPEC.md §6.2
    seq:
      - id: next_value_chunk_id
        type: u8
        doc: After this change; it does not decrease and is above every added id.
      - id: num_value_deleted
        type: u4
      - id: num_value_added
        type: u4
      - id: value_deleted
        type: u8
        repeat: expr
        repeat-expr: num_value_deleted
        doc: The ids of the value chunks deleted (before the additions).
      - id: value_added
        type: lds_base_version::value_chunk_meta
        repeat: expr
        repeat-expr: num_value_added
