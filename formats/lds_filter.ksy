meta:
  id: lds_filter
  title: LDS chunk Bloom filter
  license: Apache-2.0
  endian: le
doc: |
  The Bloom filter over the user keys of a sub-chunk, `len_filter` bytes at
  `ofs_filter` from the slot start. Key `k` sets bit `(h1 + i * h2) mod
  num_bits` for `i` in `0..num_probes`, where `h = xxh3_64(k)`, `h1 = h mod
  2^32`, `h2 = h >> 32` (u32 wrapping arithmetic); bit `b` is bit `b mod 8`
  of byte `b / 8`. Its crc32c is the footer's `filter_crc32c`.
doc-ref: SPEC.md §8.3
seq:
  - id: num_probes
    type: u1
    valid:
      expr: '_ <= 30'
    doc: 1 to 30, or 0 exactly when `num_bits` is 0 (checked by `num_bits`).
  - id: reserved
    size: 3
    valid: '[0, 0, 0]'
  - id: num_bits
    type: u4
    valid:
      expr: '_ % 8 == 0 and (_ == 0) == (num_probes == 0)'
    doc: A multiple of 8; 0 means "no filter" (every key may be present).
  - id: bits
    size: num_bits / 8
