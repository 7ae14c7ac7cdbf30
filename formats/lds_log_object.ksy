meta:
  id: lds_log_object
  title: LDS log object (version log and backup log)
  license: Apache-2.0
  endian: le
  imports:
    - lds_base_version
    - lds_delta_version
    - lds_compaction_journal
    - lds_write_batch
    - lds_wrap
doc: |
  One object of a log area: a 64-byte header followed by `len_payload` bytes
  of payload. The next object starts at `align8(log_offset + 64 +
  len_payload)`; the padding between is not part of the object.

  `payload` is an instance (parsed when first used) rather than a `seq` field,
  so that an object whose payload does not decode can still be listed with its
  header, as the inspection walk of SPEC.md §15 requires. The checksums
  (`header_crc32c` over header bytes 8..64, `payload_crc32c` over the payload)
  are not checked here.
doc-ref: SPEC.md §5
seq:
  - id: magic
    contents: LDSO
  - id: header_crc32c
    type: u4
    doc: crc32c of header bytes 8..64.
  - id: object_type
    type: u1
    enum: object_type
  - id: log_kind
    type: u1
    enum: log_kind
  - id: flags
    type: u2
    doc: Reserved, zero (not checked here, so that a damaged object is still listed).
  - id: instance
    type: u4
    doc: The instance owning the log area.
  - id: sn
    type: u8
    doc: Sequence number of the live base version when the object was written.
  - id: lsn
    type: u8
    doc: Log sequence number; 1 for the first object of the area, +1 for each following one.
  - id: log_offset
    type: u8
    doc: The object's offset from the start of its log area.
  - id: len_payload
    type: u4
  - id: payload_crc32c
    type: u4
    doc: crc32c of the payload bytes.
  - id: volume_uuid
    size: 16
instances:
  payload:
    pos: 64
    size: len_payload
    type:
      switch-on: object_type
      cases:
        object_type::base_version: lds_base_version
        object_type::delta_version: lds_delta_version
        object_type::compaction_journal: lds_compaction_journal
        object_type::write_batch: lds_write_batch
        object_type::wrap_left: lds_wrap::wrap_left
        object_type::wrap_right: lds_wrap::wrap_right
    doc: Payload by `object_type`; raw bytes for an unknown type.
enums:
  object_type:
    1:
      id: base_version
      doc: BV, version log only (SPEC.md §6.1).
    2:
      id: delta_version
      doc: DV, version log only (SPEC.md §6.2).
    3:
      id: compaction_journal
      doc: CJ, version log only (SPEC.md §6.3).
    4:
      id: write_batch
      doc: WB, backup log only (SPEC.md §7).
    5:
      id: wrap_left
      doc: WOL, both logs (SPEC.md §5.2).
    6:
      id: wrap_right
      doc: WOR, both logs (SPEC.md §5.2).
  log_kind:
    1: version_log
    2: backup_log
