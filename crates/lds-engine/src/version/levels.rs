//! A version's chunks by level, in read order: level 0 newest last, deeper levels by key.
//! Built once per version, when it is installed, not per read.

use lds_format::version::meta::ChunkMeta;
use lds_format::version::Version;

/// The chunks of each level of one version.
pub(crate) struct Levels {
    pub(crate) levels: Vec<Vec<ChunkMeta>>,
}

impl Levels {
    /// The levels of `version`.
    pub(crate) fn of(version: &Version) -> Self {
        let levels =
            (0..version.num_levels as u8).map(|level| version.level(level).into_iter().cloned().collect()).collect();
        Self { levels }
    }

    /// Two neighbouring chunks of a level from 1 down that overlap, if any: reads assume
    /// levels 1 and deeper are sorted and disjoint (SPEC.md §11), so a recovered version
    /// with an overlap is refused and a committed one is a bug.
    pub(crate) fn overlap(&self) -> Option<(&ChunkMeta, &ChunkMeta)> {
        self.levels
            .iter()
            .skip(1)
            .flat_map(|chunks| chunks.windows(2))
            .find(|pair| pair[0].largest_key >= pair[1].smallest_key)
            .map(|pair| (&pair[0], &pair[1]))
    }

    /// The chunks of a level at or above level 1 whose range may hold keys from `start` on:
    /// they are sorted and disjoint, so a binary search finds the first.
    pub(crate) fn starting_at(&self, level: usize, start: &[u8]) -> &[ChunkMeta] {
        let chunks = &self.levels[level];
        &chunks[chunks.partition_point(|chunk| chunk.largest_key.as_slice() < start)..]
    }
}
