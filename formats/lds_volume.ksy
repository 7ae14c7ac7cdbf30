meta:
  id: lds_volume
  title: LDS volume (inspection view)
  file-extension:
    - img
    - lds
  license: Apache-2.0
  endian: le
  imports:
    - lds_label
    - lds_log_object
    - lds_chunk_footer
    - lds_value_footer
    - lds_block_index
    - lds_filter
    - lds_key_sketch
    - lds_block
doc: |
  A whole LDS volume (a raw block device or an image file) as the inspection
  walks of SPEC.md §15 see it: both labels, for every instance the version
  log and backup log listed by the physical walk, and the footer of every
  slot (a chunk footer, or on volumes with feature `value_chunks` a value
  chunk footer).

  Nothing here computes a checksum. The label whose geometry is used is
  chosen as in SPEC.md §4.2 with every check but the crc32c: a label is
  usable when `lds_label::is_valid_except_crc` holds and its `volume_len`
  fits in the device; if both are, the higher `generation` wins (the
  primary on a tie). A label, chunk footer or value chunk footer is shown
  (`primary`, `backup`, `slot::footer`, `slot::value_footer`) whenever its
  magic is there, usable or not.

  A volume of several devices (SPEC.md §4.3) is parsed from its address
  space, which the reader assembles by SPEC.md §15.1 rule 7, passing
  `ofs_first_device_backup`: the backup label is then the first device's
  backup copy at the address space's last sector, not where the primary's
  geometry would put it (after an interrupted `lds device` command the
  first device's two copies hold different tables, and only the copy with
  the higher generation gives the address space its length).

  The physical walk never fails: it stops at a position where fewer than 64
  bytes remain, the magic is not "LDSO" (at that position, nor, when the
  position is not a multiple of `sector_size`, at the next multiple), or
  `64 + len_payload` does not fit in the rest of the area. Each walk list
  therefore ends with one step whose `is_object` is false. Payloads are
  decoded lazily (see lds_log_object.ksy).

  On volumes with feature `log_tables` (format 1.6), the blocks of log
  chunks hold log references (lds_log_ref) into the backup log of the
  chunk's instance: a reader resolves one at `ofs_object` of
  `instance_areas[i].backup_log` (the walk lists the object there when it
  is one), checking it as a valid object of that area (SPEC.md §5, §8.9).
doc-ref:
  - SPEC.md §3
  - SPEC.md §4.2
  - SPEC.md §15
params:
  - id: ofs_first_device_backup
    type: u8
    doc: |
      0 for a volume of one device: the backup label is located by SPEC.md
      §4.2 (at the primary's `volume_len - sector_size`, or by probing the
      end). For the address space of a volume of several devices: its last
      sector, where the reader mapped the first device's backup label copy
      (SPEC.md §15.1 rule 7); both copies are then read at 0 and here.
instances:
  primary_magic:
    pos: 0
    size: 8
    if: _io.size >= 512
  has_primary:
    value: _io.size >= 512 and primary_magic == [0x4c, 0x44, 0x53, 0x4c, 0x41, 0x42, 0x45, 0x4c]
  primary:
    pos: 0
    size: 512
    type: lds_label
    if: has_primary
    doc: The primary label, when its magic is there.
  primary_usable:
    value: >-
      has_primary and primary.is_valid_except_crc
      and primary.geometry.volume_len <= _io.size
  backup_candidates:
    type: backup_candidate(512 << _index)
    repeat: until
    repeat-until: _.is_usable or _.sector_size >= 65536
    if: not primary_usable and ofs_first_device_backup == 0
    doc: |
      Without a usable primary, the last sector of the device is probed for
      each sector size 512, 1024, ..., 65536 (SPEC.md §4.2 step 2); the
      first usable label whose `sector_size` is the probed one is taken.
  has_ofs_backup_label:
    value: >-
      ofs_first_device_backup != 0 or primary_usable
      or backup_candidates.last.is_usable
  ofs_backup_label:
    value: >-
      (ofs_first_device_backup != 0
      ? ofs_first_device_backup
      : (primary_usable
      ? primary.geometry.volume_len - primary.geometry.sector_size
      : _io.size - backup_candidates.last.sector_size)).as<u8>
    if: has_ofs_backup_label
  backup_magic:
    pos: ofs_backup_label
    size: 8
    if: has_ofs_backup_label and ofs_backup_label + 512 <= _io.size
  has_backup:
    value: >-
      has_ofs_backup_label and ofs_backup_label + 512 <= _io.size
      and backup_magic == [0x4c, 0x44, 0x53, 0x4c, 0x41, 0x42, 0x45, 0x4c]
  backup:
    pos: ofs_backup_label
    size: 512
    type: lds_label
    if: has_backup
    doc: The backup label, when its magic is there.
  backup_usable:
    value: >-
      has_backup and backup.is_valid_except_crc
      and backup.geometry.volume_len <= _io.size
  has_label:
    value: primary_usable or backup_usable
  label:
    value: >-
      primary_usable
      ? (backup_usable and backup.generation > primary.generation ? backup : primary)
      : backup
    if: has_label
    doc: The label whose geometry locates the areas.
  instance_areas:
    type: instance_area(_index)
    repeat: expr
    repeat-expr: label.geometry.instance_count
    if: has_label
    doc: The log areas of instance 0 .. instance_count - 1.
  slots:
    type: slot(_index)
    repeat: expr
    repeat-expr: label.geometry.num_slots
    if: has_label
    doc: Slot 0 .. num_slots - 1.
types:
  backup_candidate:
    doc: The last sector of the device, read as a backup label of one sector size.
    params:
      - id: sector_size
        type: u4
    instances:
      fits:
        value: _root._io.size >= sector_size
      magic:
        io: _root._io
        pos: _root._io.size - sector_size
        size: 8
        if: fits
      label:
        io: _root._io
        pos: _root._io.size - sector_size
        size: 512
        type: lds_label
        if: fits and magic == [0x4c, 0x44, 0x53, 0x4c, 0x41, 0x42, 0x45, 0x4c]
      is_usable:
        value: >-
          fits and magic == [0x4c, 0x44, 0x53, 0x4c, 0x41, 0x42, 0x45, 0x4c]
          and label.is_valid_except_crc
          and label.geometry.sector_size == sector_size
          and label.geometry.volume_len <= _root._io.size
  instance_area:
    doc: The two log areas of one instance (SPEC.md §3).
    params:
      - id: instance
        type: u4
    instances:
      ofs_version_log:
        value: (_root.label.geometry.ofs_version_log + instance * _root.label.geometry.len_version_log).as<u8>
      version_log:
        io: _root._io
        pos: ofs_version_log
        size: _root.label.geometry.len_version_log
        type: log_area(_root.label.geometry.sector_size)
        if: ofs_version_log + _root.label.geometry.len_version_log <= _root._io.size
      ofs_backup_log:
        value: (_root.label.geometry.ofs_backup_log + instance * _root.label.geometry.len_backup_log).as<u8>
      backup_log:
        io: _root._io
        pos: ofs_backup_log
        size: _root.label.geometry.len_backup_log
        type: log_area(_root.label.geometry.sector_size)
        if: ofs_backup_log + _root.label.geometry.len_backup_log <= _root._io.size
  log_area:
    doc: |
      One log area, listed by the physical walk: `left` from offset 0 and, if
      the first object is a WOL, `right` from its `ofs_first_live`.
    doc-ref: SPEC.md §15
    params:
      - id: sector_size
        type: u4
        doc: The volume's sector size, where a WOR may stand after a gap.
    seq:
      - id: left
        type: walk_step(_io.pos, sector_size)
        repeat: until
        repeat-until: not _.is_object
    instances:
      is_wrapped:
        value: >-
          left[0].is_object
          and left[0].log_object.object_type == lds_log_object::object_type::wrap_left
          and left[0].log_object.len_payload >= 16
        doc: The first object listed is a WOL (long enough to hold `ofs_first_live`).
      ofs_first_live:
        pos: 64
        type: u8
        if: is_wrapped
        doc: |
          The WOL's `ofs_first_live`, read raw so that a WOL whose payload
          does not decode still leads to its right portion.
      right:
        pos: ofs_first_live
        type: walk_step(_io.pos, sector_size)
        repeat: until
        repeat-until: not _.is_object
        if: is_wrapped and ofs_first_live <= _io.size
  walk_step:
    doc: |
      One position `ofs` of the physical walk (SPEC.md §15). The object is
      at `ofs` when the bytes there start with the magic. Otherwise, if
      `ofs` is not a multiple of `sector_size`, it is at the next multiple
      of `sector_size` (where a WOR may stand after a gap, SPEC.md §5.2)
      when the magic is there; the bytes in between are `gap`. Either way it
      is listed (`is_object`) only if `64 + len_payload` fits in the rest of
      the area, and the walk goes on at `align8(ofs_object + 64 +
      len_payload)`. Otherwise the walk stops here and this step reads
      nothing.
    doc-ref: SPEC.md §15
    params:
      - id: ofs
        type: u8
        doc: Position in the area.
      - id: sector_size
        type: u4
    seq:
      - id: gap
        size: ofs_object - ofs
        if: is_object
        doc: Skipped to reach the next sector boundary (empty when the object is at `ofs`).
      - id: log_object
        size: 64 + len_payload
        type: lds_log_object
        if: is_object
      - id: padding
        size: ofs_next - (ofs_object + 64 + len_payload)
        if: is_object
        doc: Up to 7 bytes to the next multiple of 8, not checked.
    instances:
      has_room:
        value: ofs + 64 <= _io.size
      magic:
        pos: ofs
        size: 4
        if: has_room
      is_here:
        value: has_room and magic == [0x4c, 0x44, 0x53, 0x4f]
        doc: The magic is at `ofs`.
      ofs_sector:
        value: ((ofs + sector_size - 1) / sector_size * sector_size).as<u8>
        doc: The first multiple of `sector_size` at or after `ofs`.
      may_move:
        value: >-
          has_room and not is_here and ofs_sector != ofs
          and ofs_sector + 64 <= _io.size
      magic_at_sector:
        pos: ofs_sector
        size: 4
        if: may_move
      is_moved:
        value: may_move and magic_at_sector == [0x4c, 0x44, 0x53, 0x4f]
        doc: The magic is not at `ofs` but at the next sector boundary.
      ofs_object:
        value: '(is_moved ? ofs_sector : ofs).as<u8>'
        doc: Where the object is, in the area.
      len_payload:
        pos: ofs_object + 40
        type: u4
        if: is_here or is_moved
      is_object:
        value: >-
          (is_here or is_moved)
          and ofs_object + 64 + len_payload <= _io.size
      ofs_next:
        value: >-
          ((ofs_object + 64 + len_payload + 7) / 8 * 8 > _io.size
          ? _io.size
          : (ofs_object + 64 + len_payload + 7) / 8 * 8).as<u8>
        if: is_object
        doc: |
          Where the walk goes on: `align8(ofs_object + 64 + len_payload)`
          (the end of the area if that is past it: the walk stops there).
  slot:
    doc: |
      One slot of the slot area (SPEC.md §8). Only the footer is read
      eagerly by tools; the index, filter and blocks are located through it.
      A slot holding a value chunk (SPEC.md §8.6) has `value_footer` instead
      of `footer`; its values are `value_body`.
    doc-ref: SPEC.md §8.1
    params:
      - id: slot
        type: u8
    instances:
      ofs_slot:
        value: (_root.label.geometry.ofs_slot_area + slot * _root.label.geometry.slot_size).as<u8>
      ofs_footer:
        value: (ofs_slot + _root.label.geometry.slot_size - 160).as<u8>
      in_device:
        value: ofs_slot + _root.label.geometry.slot_size <= _root._io.size
      footer_magic:
        io: _root._io
        pos: ofs_footer
        size: 8
        if: in_device
      has_footer:
        value: >-
          in_device
          and footer_magic == [0x4c, 0x44, 0x53, 0x43, 0x48, 0x55, 0x4e, 0x4b]
      footer:
        io: _root._io
        pos: ofs_footer
        size: 160
        type: lds_chunk_footer
        if: has_footer
        doc: The chunk footer; absent for an empty slot (no "LDSCHUNK" magic).
      index:
        io: _root._io
        pos: ofs_slot + footer.ofs_index
        size: footer.len_index
        type: lds_block_index(footer.num_blocks)
        if: has_footer
      filter:
        io: _root._io
        pos: ofs_slot + footer.ofs_filter
        size: footer.len_filter
        type: lds_filter
        if: has_footer
      sketch:
        io: _root._io
        pos: ofs_slot + footer.ofs_sketch
        size: footer.len_sketch
        type: lds_key_sketch
        if: has_footer and footer.has_sketch
        doc: The key sketch (SPEC.md §8.7, format 1.5), when the chunk has one.
      blocks:
        type: slot_block(_index)
        repeat: expr
        repeat-expr: footer.num_blocks
        if: has_footer
      has_value_footer:
        value: >-
          in_device
          and footer_magic == [0x4c, 0x44, 0x53, 0x56, 0x41, 0x4c, 0x55, 0x45]
        doc: The footer magic is "LDSVALUE" (a value chunk, SPEC.md §8.6).
      value_footer:
        io: _root._io
        pos: ofs_footer
        size: 160
        type: lds_value_footer
        if: has_value_footer
        doc: The value chunk footer; absent when the magic is not "LDSVALUE".
      value_body_fits:
        value: >-
          has_value_footer
          and value_footer.len_body <= _root.label.geometry.slot_size - 160
        doc: The footer's `len_body` lies before the footer.
      value_body:
        io: _root._io
        pos: ofs_slot
        size: value_footer.len_body
        if: value_body_fits
        doc: |
          The values (`len_body` bytes from the slot start), which a value
          pointer's extents address by offset.
  slot_block:
    doc: Block `i` of a slot, located by the block index.
    params:
      - id: i
        type: u4
    instances:
      block:
        io: _root._io
        pos: _parent.ofs_slot + _parent.index.entries[i].ofs_block
        size: _parent.index.entries[i].len_block
        type: lds_block
