meta:
  id: lds_block_index
  title: LDS chunk block index
  license: Apache-2.0
  endian: le
doc: |
  The block index of a sub-chunk: one entry per block, in block order. It is
  `len_index` bytes at `ofs_index` from the slot start; the number of entries
  is the footer's `num_blocks`. Its crc32c is the footer's `index_crc32c`.
doc-ref: SPEC.md §8.2
params:
  - id: num_blocks
    type: u4
    doc: From the chunk footer.
seq:
  - id: entries
    type: index_entry
    repeat: expr
    repeat-expr: num_blocks
types:
  index_entry:
    doc-ref: SPEC.md §8.2
    seq:
      - id: ofs_block
        type: u4
        doc: From the slot start.
      - id: len_block
        type: u4
        doc: With its trailer.
      - id: last_seq_kind
        type: u8
        doc: seq_kind of the last entry of the block.
      - id: len_last_key
        type: u2
      - id: last_key
        size: len_last_key
        doc: Key of the last entry of the block.
    instances:
      last_seq:
        value: (last_seq_kind / 256).as<u8>
        doc: '`last_seq_kind >> 8`, as a division (see lds_block::entry::sequence).'
      last_kind:
        value: last_seq_kind % 256
        enum: kind
enums:
  kind:
    0: delete
    1: put
    2:
      id: pointer
      doc: A value pointer (format 1.4), as lds_block::kind.
    3:
      id: log_ref
      doc: A log reference (format 1.6, SPEC.md §8.9), as lds_block::kind.
