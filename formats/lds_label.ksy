meta:
  id: lds_label
  title: LDS volume label
  license: Apache-2.0
  endian: le
doc: |
  The 512-byte volume label of an LDS volume. A volume has two copies: the
  primary at offset 0 and the backup in the last sector (`volume_len -
  sector_size`); each is written at the start of its sector, the rest of the
  sector is reserved. `crc32c` covers bytes 0..508 and is not checked here.

  Every field is read raw, so that a damaged or foreign label can still be
  shown; `is_valid_except_crc` tells whether the label passes every check of
  SPEC.md §4 and §4.2 step 1 that needs no checksum.

  The `geometry` type is shared with the base version (lds_base_version.ksy),
  which keeps a replica of it.

  A label with incompatible feature bit 1, `multi_device` (1.2), holds the
  volume's device table in its last 300 bytes (SPEC.md §4.3); on other
  volumes they are reserved zeros. Its `geometry` then describes the
  volume's address space, which spans the devices (see lds_volume.ksy).
doc-ref: SPEC.md §4
seq:
  - id: magic
    contents: LDSLABEL
  - id: version_major
    type: u2
    doc: 1. A reader refuses a major version it does not know.
  - id: version_minor
    type: u2
    doc: |
      The minor version that defined the highest incompatible feature bit
      set, 0 with none (7 on a volume lds mkfs writes today). Not checked:
      the feature bits decide what a reader may do (SPEC.md §4, §17).
  - id: len_label
    type: u4
    doc: 512.
  - id: features_compat
    type: u8
    doc: Unknown bits are ignored. No bits are defined in 1.0.
  - id: features_ro_compat
    type: u8
    doc: Unknown bits allow reading, not writing. No bits are defined in 1.0.
  - id: features_incompat
    type: u8
    doc: |
      Unknown bits make the volume unreadable. Bit 0 (1.1): `sync_watermark`,
      write batches carry a sync watermark (lds_write_batch::synced_lsn_low).
      Bit 1 (1.2): `multi_device`, the volume spans several devices and
      `devices` holds their table. Bit 2 (1.3): `fast_digest`, chunks record an
      xxh3-128 digest (lds_chunk_footer::flags bit 1). Bit 3 (1.4):
      `value_chunks`, large values live in value chunks (lds_value_footer) and
      the tree holds value pointers (lds_value_pointer). Bit 4 (1.5):
      `chunk_sketches`, level-0 chunks carry a key sketch (lds_key_sketch,
      lds_chunk_footer::len_sketch). Bit 5 (1.6): `log_tables`, level-0
      chunks may hold log references into the backup log (lds_log_ref,
      lds_chunk_meta::has_log_refs), whose objects writers retain. Bit 6
      (1.7): `compact_entries`, blocks may hold compact entries
      (lds_block::compact).
  - id: geometry
    type: geometry
  - id: generation
    type: u8
    doc: 1 at mkfs, incremented by every label rewrite (resize, SPEC.md §14).
  - id: volume_name
    size: 64
    pad-right: 0
    doc: |
      UTF-8, padded with NUL bytes (removed here), possibly empty. Kept as
      bytes so that a name that is not valid UTF-8 does not stop parsing.
  - id: devices
    size: 300
    type: device_table
    if: has_devices
    doc: The device table (feature `multi_device`).
    doc-ref: SPEC.md §4.3
  - id: reserved
    size: 300
    type: zeros
    if: not has_devices
    doc: Zero.
  - id: crc32c
    type: u4
    doc: crc32c of bytes 0..508.
instances:
  has_devices:
    value: (features_incompat & 2) != 0
    doc: Feature `multi_device` (1.2).
  has_value_chunks:
    value: (features_incompat & 8) != 0
    doc: |
      Feature `value_chunks` (1.4): value chunks in slots, value pointers
      (entry kind 2) in batches and blocks, and a value section at the end of
      base and delta versions (SPEC.md §8.6).
  has_chunk_sketches:
    value: (features_incompat & 16) != 0
    doc: |
      Feature `chunk_sketches` (1.5): key sketches in chunk tails (SPEC.md
      §8.7).
  has_log_tables:
    value: (features_incompat & 32) != 0
    doc: |
      Feature `log_tables` (1.6): log chunks, whose entries of kind 3 name
      puts in the backup log (SPEC.md §8.9).
  has_compact_entries:
    value: (features_incompat & 64) != 0
    doc: |
      Feature `compact_entries` (1.7): blocks may hold compact entries, whose
      sequence, kind and lengths are varints (SPEC.md §8.2).
  is_valid_except_crc:
    value: >-
      version_major == 1 and len_label == 512 and features_incompat <= 127
      and generation >= 1
      and (has_devices ? devices.is_consistent : reserved.is_zero)
      and geometry.is_consistent
    doc: |
      The label passes the checks of SPEC.md §4.2 step 1 but the crc32c:
      known major version, `len_label`, no unknown incompatible feature
      (version 1.1 defines bit 0, 1.2 bit 1, 1.3 bit 2, 1.4 bit 3, 1.5 bit 4,
      1.6 bit 5, 1.7 bit 6), `generation` at least 1, zero reserved bytes or a
      device table of 1 to 7 devices, and the geometry invariants (except the
      one against the device length).
types:
  device_table:
    doc: |
      The devices of the volume: which one this copy of the label is on,
      and for each its uuid, its slots and the bytes of it the volume uses.
    doc-ref: SPEC.md §4.3
    seq:
      - id: device_uuid
        size: 16
        doc: The device this copy of the label is on.
      - id: num_devices
        type: u4
        doc: 1 to 7.
      - id: devices
        type: device_entry
        repeat: expr
        repeat-expr: 'num_devices <= 7 ? num_devices : 0'
      - id: unused
        size: '280 - 40 * (num_devices <= 7 ? num_devices : 0)'
        type: zeros
        doc: The entries past `num_devices`, zero.
    instances:
      is_consistent:
        value: num_devices >= 1 and num_devices <= 7 and unused.is_zero
  device_entry:
    doc: One device.
    seq:
      - id: device_uuid
        size: 16
      - id: first_slot
        type: u8
        doc: The volume's slot number of the device's first slot.
      - id: num_slots
        type: u8
      - id: len_device
        type: u8
        doc: The bytes of the device the volume uses; its backup label is their last sector.
  zeros:
    doc: Reserved bytes, read until the first one that is not zero.
    seq:
      - id: bytes
        type: u1
        repeat: until
        repeat-until: _ != 0 or _io.eof
    instances:
      is_zero:
        value: bytes.size == 0 or bytes.last == 0
  geometry:
    doc: |
      Where every area of the volume lies. The same 96 bytes are in the label
      and, as a replica, in every base version.
    doc-ref: SPEC.md §4.1
    seq:
      - id: volume_uuid
        size: 16
        doc: Random at mkfs; repeated by every log object and chunk footer.
      - id: sector_size
        type: u4
        doc: A power of two from 512 to 65536.
      - id: instance_count
        type: u4
        doc: 1 to 64.
      - id: volume_len
        type: u8
        doc: The bytes of the device the volume uses.
      - id: ofs_version_log
        type: u8
      - id: len_version_log
        type: u8
        doc: Per instance.
      - id: ofs_backup_log
        type: u8
      - id: len_backup_log
        type: u8
        doc: Per instance.
      - id: ofs_slot_area
        type: u8
      - id: slot_size
        type: u8
      - id: num_slots
        type: u8
      - id: reserved
        size: 8
        doc: Bytes 88..96, zero.
    instances:
      is_consistent:
        value: >-
          sector_size >= 512 and sector_size <= 65536
          and (sector_size & (sector_size - 1)) == 0
          and volume_len % sector_size == 0
          and ofs_version_log % sector_size == 0
          and len_version_log % sector_size == 0
          and ofs_backup_log % sector_size == 0
          and len_backup_log % sector_size == 0
          and ofs_slot_area % sector_size == 0
          and slot_size % sector_size == 0
          and slot_size >= 65536 and slot_size <= 1073741824
          and len_version_log >= 16 * sector_size
          and len_backup_log >= 16 * sector_size
          and instance_count >= 1 and instance_count <= 64
          and num_slots >= 4
          and sector_size <= ofs_version_log
          and ofs_version_log + instance_count * len_version_log <= ofs_backup_log
          and ofs_backup_log + instance_count * len_backup_log <= ofs_slot_area
          and ofs_slot_area + num_slots * slot_size <= volume_len - sector_size
          and reserved == [0, 0, 0, 0, 0, 0, 0, 0]
        doc: |
          The geometry invariants of SPEC.md §3, except the one against the
          device length (see lds_volume.ksy), and zero reserved bytes.
        doc-ref: SPEC.md §3
