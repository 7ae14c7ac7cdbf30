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
  A compact block (format 1.7, feature `compact_entries`: bit 31 of the
  trailer's `num_entries`) holds compact entries: a varint `tag` of
  sequence and kind and varint lengths instead of the 14 fixed bytes.
doc-ref: SPEC.md §8.2
seq:
  - id: entries
    type: entry(_io.pos, compact)
    repeat: until
    repeat-until: _io.pos >= _io.size - 8
    doc: The trailer's `num_entries` entries (at least 1).
  - id: num_entries
    type: u4
    valid:
      min: 1
    doc: |
      The entry count in bits 0 to 30; bit 31 (format 1.7, feature
      `compact_entries`) set in a compact block (`compact`).
  - id: crc32c
    type: u4
    doc: crc32c of the block's bytes before it (entries and `num_entries`).
instances:
  trailer_flags:
    pos: _io.size - 5
    type: u1
    doc: The last byte of `num_entries`, read before the entries.
  compact:
    value: trailer_flags >= 128
    doc: |
      The entries are compact (format 1.7): three varints, then key and
      value, instead of 14 fixed bytes.
types:
  entry:
    doc-ref: SPEC.md §8.2
    params:
      - id: ofs_entry
        type: u8
        doc: Where the entry starts in the block (locates `pointer`).
      - id: compact
        type: bool
        doc: The block is compact.
    seq:
      - id: seq_kind
        type: u8
        if: not compact
        doc: (sequence << 8) | kind.
      - id: fixed_len_key
        type: u2
        if: not compact
      - id: fixed_len_value
        type: u4
        if: not compact
      - id: tag
        type: varint
        if: compact
        doc: |
          (sequence << 1) | 1 for a put, (sequence << 3) | (kind << 1) for
          the other kinds, in a compact entry.
      - id: varint_len_key
        type: varint
        if: compact
      - id: varint_len_value
        type: varint
        if: compact
      - id: key
        size: len_key
      - id: value
        size: len_value
    instances:
      len_key:
        value: 'compact ? varint_len_key.value : fixed_len_key'
      len_value:
        value: 'compact ? varint_len_value.value : fixed_len_value'
      len_header:
        value: 'compact ? tag.len + varint_len_key.len + varint_len_value.len : 14'
        doc: Bytes before the key.
      sequence:
        value: '(compact ? (tag.value % 2 == 1 ? tag.value / 2 : tag.value / 8) : seq_kind / 256).as<u8>'
        doc: |
          `seq_kind >> 8` (or `tag >> 1`, `tag >> 3`), written as a division so that
          languages whose shifts are 32-bit (JavaScript) keep every bit.
      kind:
        value: 'compact ? (tag.value % 2 == 1 ? 1 : (tag.value / 2) % 4) : seq_kind % 256'
        enum: kind
      pointer:
        pos: ofs_entry + len_header + len_key
        size: len_value
        type: lds_value_pointer
        if: kind == kind::pointer
        doc: The value of a `pointer` entry, decoded (the same bytes as `value`).
      log_ref:
        pos: ofs_entry + len_header + len_key
        size: len_value
        type: lds_log_ref
        if: kind == kind::log_ref
        doc: |
          The value of a `log_ref` entry, decoded (the same bytes as `value`):
          where the put's value is in the backup log (SPEC.md §8.9).
  varint:
    doc: |
      An unsigned LEB128 varint of a compact entry: 7 bits a byte, least
      significant first, the high bit set on every byte but the last
      (at most 9 bytes for `tag`, 3 for `len_key`, 5 for `len_value`, each
      in its shortest form: SPEC.md §8.2; lds refuses a block that breaks
      this, or a non-put tag naming kind 1, which this reader does not check).
    seq:
      - id: groups
        type: u1
        repeat: until
        repeat-until: _ < 128
    instances:
      len:
        value: groups.size
      value:
        value: >-
          ((groups[0] % 128).as<u8>
          + (groups.size > 1 ? (groups[1] % 128).as<u8> * 128 : 0)
          + (groups.size > 2 ? (groups[2] % 128).as<u8> * 16384 : 0)
          + (groups.size > 3 ? (groups[3] % 128).as<u8> * 2097152 : 0)
          + (groups.size > 4 ? (groups[4] % 128).as<u8> * 268435456 : 0)
          + (groups.size > 5 ? (groups[5] % 128).as<u8> * 34359738368 : 0)
          + (groups.size > 6 ? (groups[6] % 128).as<u8> * 4398046511104 : 0)
          + (groups.size > 7 ? (groups[7] % 128).as<u8> * 562949953421312 : 0)
          + (groups.size > 8 ? (groups[8] % 128).as<u8> * 72057594037927936 : 0)).as<u8>
        doc: |
          The value, a u8 in every language (a 32-bit integer would cut a tag
          past 2^31, a put's from sequence 2^30: SPEC.md §15.1 "Widths");
          exact to 2^53 in JavaScript.
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
