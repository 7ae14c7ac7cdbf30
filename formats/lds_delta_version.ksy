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
  - id: trailing
    size-eos: true
    valid:
      expr: _.size == 0
    doc: Nothing may follow the last added chunk in the payload.
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
