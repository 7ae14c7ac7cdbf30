meta:
  id: lds_block
  title: LDS chunk data block
  license: Apache-2.0
  endian: le
  imports:
    - lds_value_pointer
    - lds_log_ref
doc: |
  One block of a chunk body: a run of entries followed by an 8-byte trailer.
  The block's length is not stored in the block: it comes from the block
  index (`len_block`, trailer included), so parse this type from a stream of
  exactly that length (`size: len_block`). Entries are sorted by user key
  ascending, then sequence number descending. The `crc32c` covers the
  block's bytes before it and is not checked here. The `kind` enum is shared
  with the write batch (lds_write_batch.ksy). An entry of kind `pointer`
  (format 1.4, feature `value_chunks`) holds a value pointer as its value
  (`pointer`, parsed when first used: lds checks only that its length
  matches its extent count when it reads a block, SPEC.md §8.6). An entry of
  kind `log_ref` (format 1.6, feature `log_tables`), only in the blocks of a
  log chunk (lds_chunk_meta flag `log_refs`), holds a log reference as its
  value (`log_ref`): the put's value is in the backup log (SPEC.md §8.9).
doc-ref: SPEC.md §8.2
seq:
  - id: entries
    type: entry(_io.pos)
    repeat: until
    repeat-until: _io.pos >= _io.size - 8
    doc: The trailer's `num_entries` entries (at least 1).
  - id: num_entries
    type: u4
    valid:
      min: 1
  - id: crc32c
    type: u4
    doc: crc32c of the block's bytes before it (entries and `num_entries`).
types:
  entry:
    doc-ref: SPEC.md §8.2
    params:
      - id: ofs_entry
        type: u8
        doc: Where the entry starts in the block (locates `pointer`).
    seq:
      - id: seq_kind
        type: u8
        doc: (sequence << 8) | kind.
      - id: len_key
        type: u2
      - id: len_value
        type: u4
      - id: key
        size: len_key
      - id: value
        size: len_value
    instances:
      sequence:
        value: (seq_kind / 256).as<u8>
        doc: |
          `seq_kind >> 8`, written as a division so that languages whose
          shifts are 32-bit (JavaScript) keep every bit.
      kind:
        value: seq_kind % 256
        enum: kind
      pointer:
        pos: ofs_entry + 14 + len_key
        size: len_value
        type: lds_value_pointer
        if: kind == kind::pointer
        doc: The value of a `pointer` entry, decoded (the same bytes as `value`).
      log_ref:
        pos: ofs_entry + 14 + len_key
        size: len_value
        type: lds_log_ref
        if: kind == kind::log_ref
        doc: |
          The value of a `log_ref` entry, decoded (the same bytes as `value`):
          where the put's value is in the backup log (SPEC.md §8.9).
enums:
  kind:
    0: delete
    1: put
    2:
      id: pointer
      doc: The value is a value pointer (lds_value_pointer, format 1.4).
    3:
      id: log_ref
      doc: |
        A put whose value is in the backup log: the value is a log reference
        (lds_log_ref, format 1.6). Only in blocks of log chunks, never in a
        write batch.
