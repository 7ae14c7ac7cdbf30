//! Guards that the code and SPEC.md agree: the footer byte table of SPEC.md §8.3 is parsed and
//! every row's offset and length is checked against the footer encoder's output, and the
//! fixed sizes the spec states are the code's constants.

use lds_format::chunk::footer::{Footer, FOOTER_LEN};
use lds_format::geometry::GEOMETRY_LEN;
use lds_format::label::LABEL_LEN;
use lds_format::log::HEADER_LEN;

fn spec() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../SPEC.md");
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn footer() -> Footer {
    Footer {
        version_major: 1,
        level: 3,
        flags: 1,
        instance: 0x0404_0404,
        chunk_id: 0x0505_0505_0505_0505,
        sub_chunk_index: 0x0606,
        num_sub_chunks: 0x0707,
        num_blocks: 0x0808_0808,
        num_entries: 0x0909_0909_0909_0909,
        smallest_seq: 0x0a0a_0a0a_0a0a_0a0a,
        largest_seq: 0x0b0b_0b0b_0b0b_0b0b,
        len_body: 0x0c0c_0c0c,
        ofs_index: 0x0d0d_0d0d,
        len_index: 0x0e0e_0e0e,
        index_crc32c: 0x0f0f_0f0f,
        ofs_filter: 0x1010_1010,
        len_filter: 0x1111_1111,
        filter_crc32c: 0x1212_1212,
        slot_size: 0x1313_1313,
        volume_uuid: [0x14; 16],
        digest: [0x15; 32],
        ofs_sketch: 0x1616_1616,
        len_sketch: 0x1717_1717,
        sketch_crc32c: 0x1818_1818,
        footer_crc32c: 0,
    }
}

fn field_bytes(footer: &Footer, name: &str) -> Option<Vec<u8>> {
    Some(match name {
        "magic" => b"LDSCHUNK".to_vec(),
        "version_major" => footer.version_major.to_le_bytes().to_vec(),
        "level" => vec![footer.level],
        "flags" => vec![footer.flags],
        "instance" => footer.instance.to_le_bytes().to_vec(),
        "chunk_id" => footer.chunk_id.to_le_bytes().to_vec(),
        "sub_chunk_index" => footer.sub_chunk_index.to_le_bytes().to_vec(),
        "num_sub_chunks" => footer.num_sub_chunks.to_le_bytes().to_vec(),
        "num_blocks" => footer.num_blocks.to_le_bytes().to_vec(),
        "num_entries" => footer.num_entries.to_le_bytes().to_vec(),
        "smallest_seq" => footer.smallest_seq.to_le_bytes().to_vec(),
        "largest_seq" => footer.largest_seq.to_le_bytes().to_vec(),
        "len_body" => footer.len_body.to_le_bytes().to_vec(),
        "ofs_index" => footer.ofs_index.to_le_bytes().to_vec(),
        "len_index" => footer.len_index.to_le_bytes().to_vec(),
        "index_crc32c" => footer.index_crc32c.to_le_bytes().to_vec(),
        "ofs_filter" => footer.ofs_filter.to_le_bytes().to_vec(),
        "len_filter" => footer.len_filter.to_le_bytes().to_vec(),
        "filter_crc32c" => footer.filter_crc32c.to_le_bytes().to_vec(),
        "slot_size" => footer.slot_size.to_le_bytes().to_vec(),
        "volume_uuid" => footer.volume_uuid.to_vec(),
        "digest" => footer.digest.to_vec(),
        "ofs_sketch" => footer.ofs_sketch.to_le_bytes().to_vec(),
        "len_sketch" => footer.len_sketch.to_le_bytes().to_vec(),
        "sketch_crc32c" => footer.sketch_crc32c.to_le_bytes().to_vec(),
        _ => return None,
    })
}

#[test]
fn footer_table_matches_the_encoder() {
    let spec = spec();
    let section = spec.split("### 8.3").nth(1).unwrap_or_else(|| panic!("SPEC.md has no §8.3"));
    let footer = footer();
    let encoded = footer.encode();
    let mut covered = 0usize;
    let mut rows = 0;
    for line in section.lines().take_while(|line| !line.starts_with("### ")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 5 {
            continue;
        }
        let (Ok(offset), Ok(len)) = (cells[1].parse::<usize>(), cells[2].parse::<usize>()) else { continue };
        let name = cells[3].trim_matches('`');
        rows += 1;
        assert_eq!(offset, covered, "SPEC.md §8.3: `{name}` starts at {offset}, the previous row ended at {covered}");
        covered = offset + len;
        let stored = &encoded[offset..offset + len];
        match (name, field_bytes(&footer, name)) {
            ("reserved", _) => assert!(stored.iter().all(|&byte| byte == 0), "reserved bytes at {offset}"),
            ("footer_crc32c", _) => {
                let crc = lds_format::codec::crc32c(&encoded[..offset]);
                assert_eq!(stored, crc.to_le_bytes(), "footer_crc32c covers bytes 0..{offset}");
            }
            (_, Some(expected)) => {
                assert_eq!(
                    len,
                    expected.len(),
                    "SPEC.md §8.3: `{name}` is {len} bytes, the code writes {}",
                    expected.len()
                );
                assert_eq!(stored, expected.as_slice(), "SPEC.md §8.3: `{name}` at offset {offset}");
            }
            (_, None) => panic!("SPEC.md §8.3 names a field `{name}` the test does not know"),
        }
    }
    assert_eq!(rows, 27, "SPEC.md §8.3 lists 27 rows");
    assert_eq!(covered, FOOTER_LEN, "the table covers the whole footer");
}

#[test]
fn stated_sizes_are_the_constants() {
    let spec = spec();
    assert!(spec.contains("The label is 512 bytes") && LABEL_LEN == 512);
    assert!(spec.contains("The same 96-byte structure") && GEOMETRY_LEN == 96);
    assert!(spec.contains("Header, 64 bytes") && HEADER_LEN == 64);
    assert!(spec.contains("The footer is the last 160 bytes of the slot") && FOOTER_LEN == 160);
}
