meta:
  id: lds_log_ref
  title: LDS log reference
  license: Apache-2.0
  endian: le
doc: |
  The value of an entry of kind 3 (`log_ref`, format 1.6, feature
  `log_tables`) in a block of a log chunk: the put it stands for, left in
  the backup log, where its write batch already holds it (TRIAD-LOG). Parse
  it from a stream of exactly the entry's `len_value` bytes (24). Kind 3
  never appears in a write batch.

  A reader resolves it in the backup log area of the chunk's instance
  (lds_volume::instance_area::backup_log): the log object at `ofs_object`
  must be valid (SPEC.md §5: header and payload checksums, `log_offset`,
  instance, volume uuid), a `write_batch` with lsn `lsn`, and its entry
  `entry_index` a put of the referencing entry's key, with sequence number
  `first_sequence + entry_index` equal to the referencing entry's and
  `len_value` bytes of value; that value is the entry's value. The lsn
  makes an object the ring has overwritten since (a later lap, or stale
  bytes) never pass for the one named.

  The rules that need nothing but the reference are `valid` checks: it is
  exactly 24 bytes, `ofs_object` is a multiple of 8, and `len_value` is at
  least 1.
doc-ref: SPEC.md §8.9
seq:
  - id: lsn
    type: u8
    doc: The lsn of the write batch object holding the put.
  - id: ofs_object
    type: u8
    valid:
      expr: _ % 8 == 0
    doc: |
      That object's offset in the backup log area of the chunk's instance;
      a multiple of 8 (objects start at 8-byte boundaries, SPEC.md §5).
  - id: entry_index
    type: u4
    doc: The put's index among the batch's entries, from 0.
  - id: len_value
    type: u4
    valid:
      min: 1
    doc: The bytes of the put's value; at least 1.
  - id: trailing
    size-eos: true
    valid:
      expr: _.size == 0
    doc: Nothing follows `len_value`.
