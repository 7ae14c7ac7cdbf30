meta:
  id: lds_write_batch
  title: LDS write batch (backup log payload)
  license: Apache-2.0
  endian: le
  imports:
    - lds_block
    - lds_value_pointer
doc: |
  Payload of a `write_batch` log object: one atomic batch of the write-ahead
  log. Entry `i` has sequence number `first_sequence + i`. The `kind` enum
  (1 put, 0 delete, 2 pointer) is the one of the chunk blocks (lds_block.ksy),
  whose kind 3 (`log_ref`, format 1.6) lives in log chunks only and makes a
  batch invalid (SPEC.md §7, §8.9).
  A `pointer` entry (format 1.4, feature `value_chunks`) holds a value
  pointer as its value, which must decode (`pointer`).
doc-ref: SPEC.md §7
seq:
  - id: first_sequence
    type: u8
    valid:
      min: 1
    doc: Sequence numbers start at 1 (SPEC.md §7).
  - id: num_entries
    type: u4
    valid:
      expr: _ >= 1 and first_sequence + _ - 1 <= 72057594037927935
    doc: At least 1; the last entry's sequence number is below 2^56 (SPEC.md §16).
  - id: synced_lsn_low
    type: u4
    doc: |
      The sync watermark (SPEC.md §7.1), on volumes with feature
      `sync_watermark` (lds_label): the low 32 bits of an lsn of this log at or
      below which every object was durable before this batch was written; 0
      claims nothing. Zero on 1.0 volumes.
  - id: entries
    type: entry(_io.pos)
    repeat: expr
    repeat-expr: num_entries
  - id: trailing
    size-eos: true
    valid:
      expr: _.size == 0
    doc: Nothing may follow the last entry in the payload.
types:
  entry:
    doc-ref: SPEC.md §7
    params:
      - id: ofs_entry
        type: u8
        doc: Where the entry starts in the payload (locates `pointer`).
    seq:
      - id: kind
        type: u1
        enum: lds_block::kind
        valid:
          any-of:
            - lds_block::kind::delete
            - lds_block::kind::put
            - lds_block::kind::pointer
      - id: len_key
        type: u2
        valid:
          min: 1
        doc: 1 to 65535 (SPEC.md §16).
      - id: len_value
        type: u4
        valid:
          expr: kind != lds_block::kind::delete or _ == 0
        doc: 0 for a delete.
      - id: key
        size: len_key
      - id: value
        size: len_value
      - id: check_pointer
        size: 0
        if: kind == lds_block::kind::pointer
        valid:
          expr: pointer.num_extents >= 1
        doc: |
          Reads nothing; decodes `pointer`, so that a batch holding a pointer
          that does not decode does not parse.
    instances:
      pointer:
        pos: ofs_entry + 7 + len_key
        size: len_value
        type: lds_value_pointer
        if: kind == lds_block::kind::pointer
        doc: The value of a `pointer` entry, decoded (the same bytes as `value`).
