meta:
  id: lds_value_pointer
  title: LDS value pointer
  license: Apache-2.0
  endian: le
doc: |
  The value of an entry of kind 2 (`pointer`, format 1.4, feature
  `value_chunks`) in a write batch or a block: where the key's value is,
  as extents of value chunk bodies. Parse it from a stream of exactly the
  entry's `len_value` bytes. The value is the extents' bytes in order.

  A reader finds each extent's value chunk by `value_chunk_id` in the value
  section of its version (value chunks may move; their ids stay), or, for an
  id the version does not list, at the extent's `slot`, whose footer
  (lds_value_footer) must then name the id and the instance (a value
  written directly before its batch, which the backup log replays). The
  value's crc32c must equal `value_crc32c`.

  The rules that need nothing but the pointer are `valid` checks: the
  length is exactly `12 + 24 * num_extents` with at least one extent,
  `len_value` is 1 to 2^30 and the extents' lengths add up to it, every
  extent has at least one byte in a value chunk other than 0, reserved
  bytes are zero.
doc-ref: SPEC.md §8.6
seq:
  - id: len_value
    type: u4
    valid:
      min: 1
      max: 1073741824
    doc: Bytes of the value, 1 to 2^30 (SPEC.md §16).
  - id: value_crc32c
    type: u4
    doc: crc32c of the value.
  - id: num_extents
    type: u2
    valid:
      min: 1
  - id: reserved
    size: 2
    valid: '[0, 0]'
  - id: extents
    type: 'extent(_index == 0 ? 0 : extents[_index - 1].end)'
    repeat: expr
    repeat-expr: num_extents
  - id: check_len_value
    size: 0
    valid:
      expr: extents.last.end == len_value
    doc: Reads nothing; fails when the extents do not add up to `len_value`.
  - id: trailing
    size-eos: true
    valid:
      expr: _.size == 0
    doc: Nothing follows the last extent.
types:
  extent:
    doc: '`len` bytes at `offset` of the body of value chunk `value_chunk_id`.'
    params:
      - id: start
        type: u8
        doc: Bytes of the value before this extent (the sum of the earlier extents).
    seq:
      - id: value_chunk_id
        type: u8
        valid:
          min: 1
      - id: slot
        type: u8
        doc: |
          The value chunk's slot when the pointer was written; read only for
          a value chunk its version does not list.
      - id: offset
        type: u4
        doc: In the value chunk's body.
      - id: len
        type: u4
        valid:
          min: 1
        doc: At least 1; `offset + len <= len_body` of the value chunk.
    instances:
      end:
        value: (start + len).as<u8>
        doc: Bytes of the value up to the end of this extent.
