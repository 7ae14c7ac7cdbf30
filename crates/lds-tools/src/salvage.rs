//! The volume `lds salvage --output` writes: formatted with the source's layout (as far as
//! salvage found it), every live key salvage kept written into it through the engine. A
//! source with value chunks (SPEC.md §8.6) gives an output with them, written with key-value
//! separation (technique `kv-separation`), so that a value of any size the source held is
//! written whole.

use std::path::{Path, PathBuf};

use lds_engine::{Db, Options, WriteBatch, WriteOptions};
use lds_format::entry::EntryKind;
use lds_repair::salvage::Salvaged;

use crate::mkfs::{format, plan, MkfsError, Request};

/// Why the output volume could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SalvageOutputError {
    /// It could not be formatted.
    #[error("cannot create the output volume: lds mkfs: {0}")]
    Create(MkfsError),
    /// The engine refuses the techniques the output needs.
    #[error("{0}")]
    Techniques(String),
    /// The engine could not open or write it.
    #[error("{}: {source}", path.display())]
    Write {
        /// The output.
        path: PathBuf,
        /// Why.
        source: lds_engine::Error,
    },
}

/// Entries per write batch (fewer when the backup log is small).
const BATCH_ENTRIES: usize = 1024;

/// Formats `output` (`size` bytes, replacing what it holds only with `force`) with the layout
/// salvage found, and writes every live key of `salvaged` into it; `progress` hears the keys
/// written so far. Returns the keys written.
pub fn write_volume(
    output: &Path,
    size: u64,
    force: bool,
    salvaged: &Salvaged,
    progress: &mut dyn FnMut(u64),
) -> Result<u64, SalvageOutputError> {
    let geometry = salvaged.geometry;
    let instances = salvaged.keys.keys().max().map_or(1, |&last| last + 1);
    let request = Request {
        size: Some(size),
        slot_size: Some(salvaged.slots.0),
        version_log_size: geometry.map(|geometry| geometry.len_version_log),
        backup_log_size: geometry.map(|geometry| geometry.len_backup_log),
        sector_size: geometry.map(|geometry| geometry.sector() as u32),
        instances: Some(geometry.map_or(instances, |geometry| geometry.instance_count.max(instances))),
        name: "salvaged".into(),
        force,
        // What mkfs writes (SPEC.md §17), with value chunks where the source has them.
        value_chunks: salvaged.has_value_chunks,
        ..Request::new(output)
    };
    let label = plan(&request).map_err(SalvageOutputError::Create)?;
    format(&request, &label).map_err(SalvageOutputError::Create)?;
    let techniques = if salvaged.has_value_chunks { "kv-separation" } else { "" };
    let failed = |source| SalvageOutputError::Write { path: output.to_path_buf(), source };
    let mut written = 0u64;
    for (&instance, keys) in &salvaged.keys {
        let options = Options { instance, ..Options::default() }
            .with_techniques(techniques)
            .map_err(SalvageOutputError::Techniques)?;
        let (db, _) = Db::open_with_report(output, options).map_err(failed)?;
        let limit = db.batch_len_max() / 2;
        let mut batch = WriteBatch::new();
        let options = WriteOptions { sync: false };
        for (key, (_, kind, value)) in keys {
            if *kind != EntryKind::Put {
                continue;
            }
            batch.put(key, value);
            if batch.len() >= BATCH_ENTRIES || batch.encoded_len() as u64 >= limit {
                db.write(&batch, options).map_err(failed)?;
                written += batch.len() as u64;
                progress(written);
                batch = WriteBatch::new();
            }
        }
        db.write(&batch, options).and_then(|()| db.flush()).map_err(failed)?;
        written += batch.len() as u64;
        db.close().map_err(failed)?;
    }
    Ok(written)
}
