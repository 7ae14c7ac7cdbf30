meta:
  id: lds_key_sketch
  title: LDS key sketch
  license: Apache-2.0
  endian: le
doc: |
  A HyperLogLog sketch of a sub-chunk's distinct user keys (format 1.5,
  feature `chunk_sketches`), just before its block index. With `h =
  xxh3_64(key)` (the filter's hash), key `k` sets register `h >> (64 - p)` to
  at least `1 + clz64(h << p)`, capped at `65 - p`. Its crc32c is the footer's
  `sketch_crc32c` (not checked here); the chunk digest does not cover it.
doc-ref: SPEC.md §8.7
seq:
  - id: precision
    type: u1
    valid:
      min: 4
      max: 16
    doc: p; writers use 12 (4 KiB of registers).
  - id: reserved
    size: 3
  - id: registers
    type: u1
    repeat: expr
    repeat-expr: 1 << precision
    doc: One byte each, at most `65 - precision`.
