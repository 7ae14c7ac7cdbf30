//! Guards the session every writing tool runs in: the volume is opened exclusive (a second
//! session is refused while one holds it), the undo file saves what the tool overwrites and
//! restores it, `finish` records the final state and `abandon` does not, and the device may
//! be changed only before the undo file is kept.

use std::path::PathBuf;
use std::time::Duration;

use lds_tools::mkfs::{format, plan, Request};
use lds_tools::session::{default_undo_path, metadata_regions};
use lds_tools::{Session, SessionError, UndoChoice};
use lds_volume::undo::{undo, volume_uuid_of, UndoFile};
use lds_volume::{BlockDevice, DeviceKind, VolumeError};

fn scratch(name: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("lds-tools-session-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&directory);
    let path = directory.join(name);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(default_undo_path(&path, DeviceKind::ImageFile));
    path
}

fn formatted(name: &str) -> PathBuf {
    let path = scratch(name);
    let mut request = Request::new(&path);
    request.size = Some(8 << 20);
    let label = plan(&request);
    assert!(label.is_ok(), "{label:?}");
    let Ok(label) = label else { return path };
    let formatted = format(&request, &label);
    assert!(formatted.is_ok(), "{formatted:?}");
    path
}

/// Writes one sector of ones over the primary label's sector through the session.
fn scribble(session: &Session<impl BlockDevice>) {
    let written = session.target().write_at(0, &[1u8; 4096]).and_then(|()| session.target().flush());
    assert!(written.is_ok(), "{written:?}");
}

#[test]
fn a_second_session_is_refused_while_one_holds_the_volume() {
    let path = formatted("held.img");
    let first = Session::open(&path, "test", Duration::ZERO);
    assert!(first.is_ok(), "{:?}", first.as_ref().err());
    let second = Session::open(&path, "test", Duration::ZERO);
    assert!(matches!(second, Err(SessionError::InUse(VolumeError::Device(_)))), "{:?}", second.err());
    drop(first);
    assert!(Session::open(&path, "test", Duration::ZERO).is_ok());
}

#[test]
fn the_undo_file_restores_what_the_tool_wrote_and_records_the_final_state() {
    let path = formatted("undo.img");
    let before = std::fs::read(&path).unwrap_or_default();
    let session = Session::open(&path, "test", Duration::ZERO);
    assert!(session.is_ok(), "{:?}", session.as_ref().err());
    let Ok(mut session) = session else { return };
    assert_eq!(session.devices(), None, "a volume on one device names none");
    assert!(session.keep_undo(&UndoChoice::default()).is_ok());
    scribble(&session);
    let finished = session.finish();
    assert!(finished.error.is_none(), "{:?}", finished.error);
    let kept = finished.written().cloned();
    assert!(kept.is_some(), "nothing saved: {:?}", finished.undo_file);
    let Some(kept) = kept else { return };
    assert_eq!(kept.path, default_undo_path(&path, DeviceKind::ImageFile));
    assert!(kept.bytes >= 4096, "{kept:?}");
    drop(finished);
    let file = UndoFile::read(&kept.path);
    assert!(file.is_ok(), "{:?}", file.as_ref().err());
    let Ok(file) = file else { return };
    assert!(file.finished, "finish records the final state");
    assert_eq!(file.header.tool, "test");
    let session = Session::open(&path, "undo", Duration::ZERO);
    let Ok(session) = session else { return };
    let restored = undo(&file, session.device(), volume_uuid_of(session.device()), false);
    assert!(restored.is_ok(), "{restored:?}");
    drop(session);
    assert!(std::fs::read(&path).unwrap_or_default() == before, "the volume is not as it was");
}

#[test]
fn an_abandoned_session_leaves_its_undo_file_unfinished() {
    let path = formatted("abandoned.img");
    let undo_path = scratch("abandoned.undo");
    let Ok(mut session) = Session::open(&path, "test", Duration::ZERO) else { return };
    assert!(session.keep_undo(&UndoChoice { file: Some(undo_path.clone()), none: false }).is_ok());
    scribble(&session);
    let finished = session.abandon();
    assert_eq!(finished.written().map(|kept| kept.path.clone()), Some(undo_path.clone()));
    let file = UndoFile::read(&undo_path);
    assert!(matches!(&file, Ok(file) if !file.finished), "{:?}", file.as_ref().map(|file| file.finished));
}

#[test]
fn without_an_undo_file_nothing_is_kept() {
    let path = formatted("no-undo.img");
    let Ok(mut session) = Session::open(&path, "test", Duration::ZERO) else { return };
    assert!(session.keep_undo(&UndoChoice { file: None, none: true }).is_ok());
    scribble(&session);
    let finished = session.finish();
    assert!(finished.undo_file.is_none());
    assert!(!default_undo_path(&path, DeviceKind::ImageFile).exists());
}

#[test]
fn the_device_changes_only_before_the_undo_file_is_kept() {
    let path = formatted("single.img");
    let Ok(session) = Session::open(&path, "test", Duration::ZERO) else { return };
    let single = session.into_single();
    assert!(single.is_ok(), "a volume on one device is its device");
    let Ok(mut single) = single else { return };
    assert!(single.device_mut().is_some());
    assert!(single.keep_undo(&UndoChoice::default()).is_ok());
    assert!(single.device_mut().is_none(), "the undo log holds the device");
    let finished = single.finish();
    assert!(finished.written().is_none(), "nothing was written: {:?}", finished.undo_file);
    assert!(finished.into_device().is_some(), "the device is the caller's again");
}

#[test]
fn the_final_state_covers_both_labels_and_every_log_area() {
    let path = formatted("regions.img");
    let Ok(session) = Session::open(&path, "test", Duration::ZERO) else { return };
    let regions = metadata_regions(session.device());
    // Two label sectors, and a version and a backup log for the one instance.
    assert_eq!(regions.len(), 4, "{regions:?}");
    assert_eq!(regions[0].0, 0);
    assert!(regions.iter().all(|&(_, len)| len > 0), "{regions:?}");
    let zeros = scratch("zeros.img");
    assert!(std::fs::write(&zeros, vec![0u8; 1 << 20]).is_ok());
    let Ok(device) = lds_volume::Device::open(&zeros, lds_volume::OpenMode::ReadOnly) else { return };
    assert!(metadata_regions(&device).is_empty(), "a device without a label has no state to record");
}
