//! Following the log references of a log chunk (entry kind 3, SPEC.md §8.9) into the backup
//! log of its instance, for `lds dump IMAGE chunk ID --resolve`.

use std::collections::HashMap;
use std::sync::Arc;

use lds_format::geometry::{Geometry, LogKind};
use lds_format::log::{area_context, AreaContext};
use lds_format::logref::{LogBatch, LogRef};
use lds_format::FormatError;

use crate::DeviceError;
use crate::ReadAt;

/// Why a log reference does not resolve.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The reference itself does not decode.
    #[error("{0}")]
    Decode(FormatError),
    /// The chunk (a stale slot's footer) names an instance the volume does not have.
    #[error("the chunk names instance {instance}, which the volume does not have")]
    NoInstance {
        /// The instance named.
        instance: u32,
    },
    /// The backup log area cannot be read.
    #[error("{0}")]
    Area(Arc<DeviceError>),
    /// The object the reference names is not a write batch holding the entry.
    #[error(
        "the backup log object at offset {ofs_object} of instance {instance} (device offset {ofs_device}): {source}"
    )]
    Object {
        /// Its offset in the area.
        ofs_object: u64,
        /// The instance.
        instance: u32,
        /// Its device offset.
        ofs_device: u64,
        /// Why.
        source: FormatError,
    },
}

/// Follows the log references of one instance's chunks (SPEC.md §8.9): reads the backup log
/// area once, and checks and decodes each write batch once however many references name it.
pub struct LogResolver {
    /// The area of the instance's backup log.
    context: AreaContext,
    /// Its bytes, or why they cannot be read.
    area: Result<Vec<u8>, ResolveError>,
    /// The batches read so far, by offset, or why the object there is not one.
    batches: HashMap<u64, Result<LogBatch, FormatError>>,
}

impl LogResolver {
    /// A resolver for the references of `instance`'s chunks on `device`.
    pub fn new(device: &(impl ReadAt + ?Sized), geometry: &Geometry, instance: u32) -> Self {
        // A stale slot's footer may name any instance: where the area of one the volume does
        // not have would be is not computed (it may not fit in 64 bits).
        let context = area_context(geometry, LogKind::Backup, instance.min(geometry.instance_count.saturating_sub(1)));
        let area = if instance >= geometry.instance_count {
            Err(ResolveError::NoInstance { instance })
        } else {
            device.read_vec(context.ofs_area, context.len_area).map_err(|error| ResolveError::Area(Arc::new(error)))
        };
        Self { context, area, batches: HashMap::new() }
    }

    /// The value the log reference `value` of the entry (`key`, `sequence`) names, checked by
    /// SPEC.md §8.9; `Err` says why it does not resolve, naming the object's offset in the
    /// area and on the device.
    pub fn resolve(&mut self, key: &[u8], sequence: u64, value: &[u8]) -> Result<Vec<u8>, ResolveError> {
        let reference = LogRef::decode(value, 0).map_err(ResolveError::Decode)?;
        let area = self.area.as_ref().map_err(Clone::clone)?;
        let context = &self.context;
        let at = |source: FormatError| ResolveError::Object {
            ofs_object: reference.ofs_object,
            instance: context.instance,
            ofs_device: context.ofs_area.saturating_add(reference.ofs_object),
            source,
        };
        // The object's bytes: the area from the reference's offset on (empty past its end,
        // which the reader reports as a truncated object at that offset).
        let object = usize::try_from(reference.ofs_object).ok().and_then(|start| area.get(start..)).unwrap_or(&[]);
        let batch = self
            .batches
            .entry(reference.ofs_object)
            .or_insert_with(|| LogBatch::read(object, reference.ofs_object, context));
        let batch = batch.as_ref().map_err(|error| at(error.clone()))?;
        batch.value(object, &reference, context, key, sequence).map(<[u8]>::to_vec).map_err(at)
    }
}
