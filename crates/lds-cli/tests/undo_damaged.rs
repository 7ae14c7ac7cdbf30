//! Guards `lds undo` against undo files damaged or truncated after `lds repair -y` wrote them
//! (LDS issue 39, case 6): every truncation and byte flip tried is refused with exit 1 and the
//! volume's bytes unchanged; the intact file then restores the damaged original byte for byte;
//! `undo -n` writes nothing and reports what it would restore; `--force` on a damaged file
//! restores only the records that verify, and exits 1 saying what it did not restore.

use std::path::{Path, PathBuf};

use lds_cli::repair::{run, RepairArgs};
use lds_cli::undo::{run as run_undo, UndoArgs};
use lds_volume::undo::UndoFile;

/// The layout of an LDSUNDO2 file (docs/undo-file.md): header, state block, then batches of
/// records; the first record of the first batch starts here.
const FIRST_RECORD: usize = 128 + 68 + 60;
/// Bytes of a record before its payload.
const RECORD_HEADER: usize = 16;

/// A damaged fixture volume repaired with an undo file.
struct Repaired {
    image: lds_fixtures::Unpacked,
    undo: PathBuf,
    /// The damaged volume, before the repair.
    damaged: Vec<u8>,
    /// The volume after the repair.
    repaired: Vec<u8>,
    /// The undo file the repair left.
    undo_bytes: Vec<u8>,
}

impl Drop for Repaired {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.undo);
        let _ = std::fs::remove_file(self.scratch());
    }
}

impl Repaired {
    fn new(tag: &str) -> Self {
        let image = lds_fixtures::unpack("f_block_checksum", tag);
        let undo = std::env::temp_dir().join(format!("lds-undo-damaged-{}-{tag}.lds-undo", std::process::id()));
        let _ = std::fs::remove_file(&undo);
        let damaged = read(&image);
        let args =
            RepairArgs { path: image.to_path_buf(), yes: true, undo_file: Some(undo.clone()), ..Default::default() };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(&args, &mut out, &mut err);
        assert_eq!(code, 1, "repair -y: {}{}", String::from_utf8_lossy(&out), String::from_utf8_lossy(&err));
        let repaired = read(&image);
        assert!(repaired != damaged, "repair wrote nothing");
        let undo_bytes = read(&undo);
        Self { image, undo, damaged, repaired, undo_bytes }
    }

    /// Where damaged copies of the undo file go.
    fn scratch(&self) -> PathBuf {
        PathBuf::from(format!("{}.damaged", self.undo.display()))
    }

    /// Runs `lds undo` with `undo_file`: exit code, stdout, stderr.
    fn undo(&self, undo_file: &Path, force: bool, dry_run: bool) -> (i32, String, String) {
        let args = UndoArgs { undo_file: undo_file.to_path_buf(), path: self.image.to_path_buf(), force, dry_run };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run_undo(&args, &mut out, &mut err);
        (code, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
    }

    /// Writes `bytes` as the undo file and runs `lds undo` without --force: it must refuse,
    /// name the file and the offset of the damage (at most `limit`: where the bytes were cut
    /// or flipped), and leave the volume as the repair left it.
    fn refused(&self, bytes: &[u8], limit: usize, what: &str) {
        let path = self.scratch();
        assert!(std::fs::write(&path, bytes).is_ok());
        let (code, out, err) = self.undo(&path, false, false);
        assert_eq!(code, 1, "{what}: lds undo exits {code}\n{out}{err}");
        assert!(read(&self.image) == self.repaired, "{what}: a refused undo changed the volume");
        assert!(err.contains(&path.display().to_string()), "{what}: the message does not name the file: {err}");
        // The offset named is a place in the file given: at or before the damage.
        let offset = damaged_at(&err).unwrap_or_else(|| panic!("{what}: the message names no byte offset: {err}"));
        assert!(offset <= limit, "{what}: the message names byte {offset}, past the damage at {limit}: {err}");
        assert!(err.contains("nothing was written"), "{what}: {err}");
    }
}

/// The offset in "at byte N" (or "bytes N..M") of an undo error message.
fn damaged_at(message: &str) -> Option<usize> {
    message.split(" byte").skip(1).find_map(|rest| {
        let rest = rest.strip_prefix("s ").or_else(|| rest.strip_prefix(' '))?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

#[test]
fn a_truncated_or_flipped_undo_file_is_refused_and_the_intact_one_restores() {
    let repaired = Repaired::new("undo-damaged");
    let bytes = &repaired.undo_bytes;
    let len = bytes.len();
    assert!(len > 4096, "the undo file is only {len} bytes");
    // Truncations: inside the header, the state block, the first batch header, then through
    // every batch, and the last bytes.
    let mut cuts: Vec<usize> = vec![0, 1, 7, 8, 100, 127, 128, 150, 195, 196, 197, 255, 256, 300];
    cuts.extend((301..len).step_by(97));
    cuts.extend(len - 40..len);
    for cut in cuts {
        repaired.refused(&bytes[..cut], cut, &format!("cut to {cut} bytes"));
    }
    // Byte flips: every byte of the header and state block, then one byte in 41 through the
    // batches, and the last bytes.
    let mut flips: Vec<usize> = (0..256).collect();
    flips.extend((256..len).step_by(41));
    flips.extend(len - 40..len);
    for at in flips {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x10;
        repaired.refused(&damaged, at, &format!("byte {at} flipped"));
    }
    // Bytes added after a finished file.
    let mut longer = bytes.clone();
    longer.extend_from_slice(&[0; 512]);
    repaired.refused(&longer, longer.len(), "512 bytes appended");

    let (code, out, err) = repaired.undo(&repaired.undo, false, false);
    assert_eq!(code, 0, "{out}{err}");
    assert!(read(&repaired.image) == repaired.damaged, "undo did not restore the damaged original byte for byte");
}

#[test]
fn a_dry_run_writes_nothing_and_says_what_it_would_restore() {
    let repaired = Repaired::new("undo-dry-run");
    let file = UndoFile::read(&repaired.undo);
    let file = file.unwrap_or_else(|error| panic!("{error}"));
    // What undo would write, from the images: the saved sectors the repair changed.
    let changed = file
        .originals
        .iter()
        .filter(|&(&offset, original)| {
            let range = offset as usize..offset as usize + original.len();
            repaired.repaired[range.clone()] != repaired.damaged[range]
        })
        .count();
    assert!(changed > 0);
    let (code, out, err) = repaired.undo(&repaired.undo, false, true);
    assert_eq!(code, 0, "{out}{err}");
    assert!(read(&repaired.image) == repaired.repaired, "undo -n changed the volume");
    assert!(out.contains("written by repair at "), "{out}");
    assert!(out.contains("verified: the tool finished"), "{out}");
    assert!(
        out.contains(&format!("saved: {} sectors ({} bytes)", file.originals.len(), file.restored_bytes())),
        "{out}"
    );
    assert!(out.contains(&format!("would restore {changed} sectors")), "{out}");
    assert!(out.contains("nothing was written (-n)"), "{out}");
    let first = file.ranges()[0];
    assert!(out.contains(&format!("{}..{}", first.0, first.0 + first.1)), "{out}");

    // A damaged file: -n says so, exits 1, and writes nothing either.
    let mut damaged = repaired.undo_bytes.clone();
    damaged[FIRST_RECORD + RECORD_HEADER + 10] ^= 0x10;
    assert!(std::fs::write(repaired.scratch(), &damaged).is_ok());
    let (code, out, err) = repaired.undo(&repaired.scratch(), false, true);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("NOT verified"), "{out}");
    assert!(out.contains(&format!("byte {}", FIRST_RECORD)), "{out}");
    assert!(read(&repaired.image) == repaired.repaired, "undo -n changed the volume");
}

#[test]
fn forced_a_damaged_file_restores_only_the_records_that_verify() {
    let repaired = Repaired::new("undo-forced");
    // The first record of the first batch: the original bytes of the first sector repair wrote.
    let bytes = &repaired.undo_bytes;
    assert_eq!(bytes[FIRST_RECORD], 1, "the first record is not an original sector");
    let sector_len = u32::from_le_bytes([
        bytes[FIRST_RECORD + 4],
        bytes[FIRST_RECORD + 5],
        bytes[FIRST_RECORD + 6],
        bytes[FIRST_RECORD + 7],
    ]) as usize;
    let mut offset = [0u8; 8];
    offset.copy_from_slice(&bytes[FIRST_RECORD + 8..FIRST_RECORD + 16]);
    let sector = u64::from_le_bytes(offset) as usize..u64::from_le_bytes(offset) as usize + sector_len;
    assert!(repaired.repaired[sector.clone()] != repaired.damaged[sector.clone()], "repair left that sector as it was");
    let mut damaged = bytes.clone();
    damaged[FIRST_RECORD + RECORD_HEADER + 10] ^= 0x10;
    repaired.refused(&damaged, FIRST_RECORD + RECORD_HEADER + 10, "a flip in the first original sector");

    let (code, out, err) = repaired.undo(&repaired.scratch(), true, false);
    assert_eq!(code, 1, "--force with a damaged file must not claim success\n{out}{err}");
    assert!(err.contains("NOT verified"), "{err}");
    assert!(err.contains("--force restored only the records that verify"), "{err}");
    // The sector not restored is named by its device offset, not merely a number somewhere.
    let named = err.contains(&format!("device offset {}", sector.start))
        || err.lines().any(|line| {
            line.contains("not restorable")
                && line
                    .rsplit(": ")
                    .next()
                    .is_some_and(|list| list.split(", ").any(|offset| offset == sector.start.to_string()))
        });
    assert!(named, "the unrestored sector {} is not named: {err}", sector.start);
    let after = read(&repaired.image);
    // Every sector but that one is back as it was before the repair; that one is as the
    // repair left it.
    let mut expected = repaired.damaged.clone();
    expected[sector.clone()].copy_from_slice(&repaired.repaired[sector.clone()]);
    assert!(after == expected, "--force restored other than exactly the records that verified");

    // A truncated file, forced: the batches before the cut are restored, and the exit is 1.
    let image = std::fs::write(&*repaired.image, &repaired.repaired);
    assert!(image.is_ok());
    let cut = &repaired.undo_bytes[..repaired.undo_bytes.len() / 2];
    assert!(std::fs::write(repaired.scratch(), cut).is_ok());
    let (code, out, err) = repaired.undo(&repaired.scratch(), true, false);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("cut short"), "{err}");
    assert!(read(&repaired.image) != repaired.repaired, "--force restored nothing from the verified batches");
}
