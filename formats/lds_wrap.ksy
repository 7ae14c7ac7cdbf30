meta:
  id: lds_wrap
  title: LDS wrap objects (WOL and WOR payloads)
  license: Apache-2.0
  endian: le
doc: |
  Payloads of the wrap objects of both log areas. A WOL or WOR is exactly one
  sector long (`len_payload = sector_size - 64`) and sector-aligned, so that
  appending one is atomic. This file has no top-level fields: use
  `lds_wrap::wrap_left` and `lds_wrap::wrap_right`.
doc-ref: SPEC.md §5.2
types:
  wrap_left:
    doc: |
      Written at offset 0 right after a WOR. The first object after it is at
      offset `sector_size`.
    doc-ref: SPEC.md §5.2
    seq:
      - id: ofs_first_live
        type: u8
        doc: |
          Offset of the first live object at the moment of the wrap (version
          log: the live base version; backup log: the backup start point).
      - id: lsn_first_live
        type: u8
        doc: That object's `lsn`.
      - id: reserved
        type: u1
        repeat: eos
        valid: 0
        doc: The rest of the payload, zero.
  wrap_right:
    doc: |
      Appended at `align_up(head, sector_size)` when the next object does not
      fit before the end of the area; the chain continues at offset 0.
    doc-ref: SPEC.md §5.2
    seq:
      - id: reserved
        type: u1
        repeat: eos
        valid: 0
        doc: The whole payload, zero.
