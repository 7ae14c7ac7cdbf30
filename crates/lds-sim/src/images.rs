//! Building crash images cheaply. A crash image is the durable image at a crash point plus
//! some of the writes not yet flushed, one of them possibly torn. The enumerators build
//! thousands per run, most of them equal to one built before, so an image is described by a
//! [`Recipe`], built in place in one scratch buffer, identified by a digest kept per sector
//! (only the sectors the recipe touches are hashed), and restored afterwards: no image is
//! copied or hashed whole.

use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_128_with_seed;

use crate::sim_device::{apply, sectors_touched, Event, History, Write};
use crate::workload::{Random, Run};

/// Limits of the crash states tried at each point.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Up to this many unflushed writes, every subset is tried.
    pub exhaustive_max: usize,
    /// Past it, this many random subsets (plus none, all, and each one left out).
    pub samples: usize,
    /// Also tear each unflushed multi-sector write at each sector boundary.
    pub tears: bool,
    /// Seed for sampling.
    pub seed: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Self { exhaustive_max: 6, samples: 16, tears: true, seed: 1 }
    }
}

/// One crash state at a point: the unflushed writes that landed, in the order they are
/// applied, each whole (`None`) or torn after its first `Some(sectors)` sectors.
#[derive(Debug, Clone)]
pub(crate) struct Recipe {
    /// For messages and reproducers.
    pub(crate) state: String,
    /// `(write, sectors)` in order.
    pub(crate) steps: Vec<(usize, Option<u64>)>,
}

/// The crash states at one point: subsets of the pending writes (all of them up to
/// `exhaustive_max`, else none, all, each one left out, each prefix and random samples), then
/// every tear of each pending write, with the earlier ones landed, and again with the later
/// ones landed too (unflushed writes land in any order).
pub(crate) fn recipes(
    pending: &[usize],
    writes: &[Write],
    sector_size: u64,
    bounds: &Bounds,
    random: &mut Random,
) -> Vec<Recipe> {
    let count = pending.len();
    let all = if count >= 64 { u64::MAX } else { (1u64 << count) - 1 };
    let mut masks: Vec<u64> = Vec::new();
    if count <= bounds.exhaustive_max {
        masks.extend(0..=all);
    } else {
        masks.push(0);
        masks.push(all);
        masks.extend((0..count.min(63)).map(|left_out| all & !(1 << left_out)));
        masks.extend((1..count.min(63)).map(|prefix| (1u64 << prefix) - 1));
        masks.extend((0..bounds.samples).map(|_| random.next_u64() & all));
    }
    let mut recipes: Vec<Recipe> = masks
        .into_iter()
        .map(|mask| Recipe {
            state: format!("unflushed writes {pending:?} with mask {mask:#x}"),
            steps: pending
                .iter()
                .take(64)
                .enumerate()
                .filter(|(bit, _)| mask & (1 << bit) != 0)
                .map(|(_, &index)| (index, None))
                .collect(),
        })
        .collect();
    if bounds.tears {
        for (position, &index) in pending.iter().enumerate() {
            let sectors = sectors_touched(&writes[index], sector_size);
            for torn in 1..sectors {
                let mut steps: Vec<(usize, Option<u64>)> =
                    pending[..position].iter().map(|&earlier| (earlier, None)).collect();
                steps.push((index, Some(torn)));
                let later = &pending[position + 1..];
                if !later.is_empty() {
                    recipes.push(Recipe {
                        state: format!(
                            "write {index} torn after {torn} of {sectors} sectors, later writes {later:?} landed"
                        ),
                        steps: steps.iter().copied().chain(later.iter().map(|&after| (after, None))).collect(),
                    });
                }
                recipes.push(Recipe { state: format!("write {index} torn after {torn} of {sectors} sectors"), steps });
            }
        }
    }
    recipes
}

/// The durable image of a run as its events advance, with a scratch copy to build crash
/// images in and a digest of each sector.
pub(crate) struct Builder<'a> {
    history: &'a History,
    sector_size: u64,
    durable: Vec<u8>,
    /// Shared with the device a check recovers it on (which does not copy it), then unique
    /// again when restored.
    scratch: Arc<Vec<u8>>,
    sector_digests: Vec<u128>,
    digest: u128,
    pending: Vec<usize>,
    next_event: usize,
}

fn sector_digest(sector: &[u8], index: usize) -> u128 {
    xxh3_128_with_seed(sector, index as u64)
}

impl<'a> Builder<'a> {
    /// At the run's first crash point (no event yet).
    pub(crate) fn new(run: &'a Run) -> Self {
        Self::of_history(&run.history, run.sector_size)
    }

    /// At the first crash point of a device history (of any tool, not only a workload).
    pub(crate) fn of_history(history: &'a History, sector_size: u64) -> Self {
        let durable = history.initial.as_ref().clone();
        let sector_digests: Vec<u128> = durable
            .chunks(sector_size as usize)
            .enumerate()
            .map(|(index, sector)| sector_digest(sector, index))
            .collect();
        let digest = sector_digests.iter().fold(0, |digest, sector| digest ^ sector);
        Self {
            history,
            sector_size,
            scratch: Arc::new(durable.clone()),
            durable,
            sector_digests,
            digest,
            pending: Vec::new(),
            next_event: 0,
        }
    }

    /// The writes not yet flushed at this point.
    pub(crate) fn pending(&self) -> &[usize] {
        &self.pending
    }

    /// Moves to the next crash point; false after the last event.
    pub(crate) fn advance(&mut self) -> bool {
        let Some(event) = self.history.events.get(self.next_event) else { return false };
        self.next_event += 1;
        match event {
            Event::Write(index) => self.pending.push(*index),
            Event::Flush(made) => {
                let flushed: Vec<usize> = self.pending.iter().copied().filter(|index| made.contains(index)).collect();
                for index in flushed {
                    let write = &self.history.writes[index];
                    apply(&mut self.durable, write, self.sector_size, None);
                    apply(Arc::<Vec<u8>>::make_mut(&mut self.scratch), write, self.sector_size, None);
                    for sector in self.sectors_of(write, None) {
                        let bytes = self.sector(&self.durable, sector);
                        let new = sector_digest(bytes, sector);
                        self.digest ^= self.sector_digests[sector] ^ new;
                        self.sector_digests[sector] = new;
                    }
                }
                self.pending.retain(|index| !made.contains(index));
            }
        }
        true
    }

    fn sector<'b>(&self, image: &'b [u8], sector: usize) -> &'b [u8] {
        let size = self.sector_size as usize;
        &image[sector * size..(sector + 1) * size]
    }

    /// The sectors a write (or its first `sectors` sectors) touches.
    fn sectors_of(&self, write: &Write, sectors: Option<u64>) -> std::ops::Range<usize> {
        let first = write.offset / self.sector_size;
        let touched = sectors_touched(write, self.sector_size);
        let count = sectors.map_or(touched, |sectors| sectors.min(touched));
        first as usize..(first + count) as usize
    }

    /// Builds the crash image of `recipe` in the scratch buffer and passes it, with its
    /// digest, to `check`; then restores the scratch buffer to the durable image.
    pub(crate) fn with_image<R>(&mut self, recipe: &Recipe, check: impl FnOnce(u128, &Arc<Vec<u8>>) -> R) -> R {
        let writes = &self.history.writes;
        let mut touched: Vec<usize> = Vec::new();
        for &(index, sectors) in &recipe.steps {
            let write = &writes[index];
            apply(Arc::<Vec<u8>>::make_mut(&mut self.scratch), write, self.sector_size, sectors);
            touched.extend(self.sectors_of(write, sectors));
        }
        touched.sort_unstable();
        touched.dedup();
        let digest = touched.iter().fold(self.digest, |digest, &sector| {
            digest ^ self.sector_digests[sector] ^ sector_digest(self.sector(&self.scratch, sector), sector)
        });
        let result = check(digest, &self.scratch);
        let size = self.sector_size as usize;
        let scratch = Arc::make_mut(&mut self.scratch);
        for sector in touched {
            let range = sector * size..(sector + 1) * size;
            scratch[range.clone()].copy_from_slice(&self.durable[range]);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{formatted_image, named, run};

    #[test]
    fn a_built_image_and_its_digest_equal_the_image_built_whole() {
        let Ok(image) = formatted_image() else { panic!("formatted image") };
        let Some(workload) = named("basic") else { panic!("basic workload") };
        let recorded = run(&workload, image, true);
        assert!(recorded.is_ok(), "{:?}", recorded.as_ref().err());
        let Ok(recorded) = recorded else { return };
        let mut builder = Builder::new(&recorded);
        let mut random = Random(7);
        let mut checked = 0;
        loop {
            let pending = builder.pending().to_vec();
            let durable = builder.durable.clone();
            let recipes =
                recipes(&pending, &recorded.history.writes, recorded.sector_size, &Bounds::default(), &mut random);
            for recipe in &recipes {
                let mut whole = durable.clone();
                for &(index, sectors) in &recipe.steps {
                    apply(&mut whole, &recorded.history.writes[index], recorded.sector_size, sectors);
                }
                let whole_digest = whole
                    .chunks(recorded.sector_size as usize)
                    .enumerate()
                    .fold(0u128, |digest, (index, sector)| digest ^ sector_digest(sector, index));
                let (digest, equal) =
                    builder.with_image(recipe, |digest, image| (digest, image.as_slice() == whole.as_slice()));
                assert!(equal, "{}", recipe.state);
                assert_eq!(digest, whole_digest, "{}", recipe.state);
                checked += 1;
            }
            assert!(*builder.scratch == builder.durable, "the scratch image is restored");
            if !builder.advance() {
                break;
            }
        }
        assert!(checked > 20, "only {checked} images");
    }
}
