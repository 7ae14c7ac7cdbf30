//! The memtable's skiplist, with its nodes in an arena.
//!
//! 1. Order: user key ascending (`lds_format::codec::compare_keys`), then sequence number
//!    descending (SPEC.md §8.1).
//! 2. A node is one piece of arena memory: a `Header`, its `height` links, the key, the
//!    value. Nodes are packed into blocks of `BLOCK_BYTES`; one larger than
//!    `OWN_BLOCK_BYTES_MIN` gets a block of its own. Nothing is freed before the list is
//!    dropped, so a put costs no allocation of its own and no free, and the memtable holds
//!    about 40 bytes per entry besides its key and value (a skiplist node and a separate
//!    key-and-value allocation from the global allocator took 100).
//! 3. One writer at a time (the arena's lock); readers take no lock (LevelDB's skiplist). A
//!    node is written whole before the release store of the first link to it, and readers
//!    follow links with acquire loads: a reader that reaches a node sees all of it. Links
//!    are only ever changed from null or from one node to a new node inserted after it, so a
//!    reader walking a level never skips a node that was linked before it started.

#![expect(unsafe_code, reason = "an arena of raw blocks and links read without locks (the module's overview)")]

use std::alloc::{self, Layout};
use std::cmp::Ordering as Order;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use lds_format::entry::EntryKind;

/// Levels of the list. With a quarter of each level's nodes reaching the next, searches stay
/// logarithmic up to 4^12 (16 million) entries; a memtable holds about
/// `write_buffer_size / 150` (28,000 for the default 4 MiB).
const HEIGHT_MAX: usize = 12;
/// Bytes of a shared arena block: a 4 MiB memtable takes 16 of them.
const BLOCK_BYTES: usize = 256 << 10;
/// A node above this many bytes gets a block of its own, so that no large value leaves most
/// of a shared block's tail unused.
const OWN_BLOCK_BYTES_MIN: usize = BLOCK_BYTES / 4;
/// Alignment of every node (of its header and links).
const NODE_ALIGN: usize = 8;

/// The fixed part of a node. Its links, key and value follow it in the same piece of memory.
#[repr(C)]
struct Header {
    sequence: u64,
    key_len: u32,
    value_len: u32,
    kind: u8,
    height: u8,
}

const HEADER_BYTES: usize = size_of::<Header>();
const LINK_BYTES: usize = size_of::<AtomicPtr<Header>>();
const _: () = assert!(HEADER_BYTES % NODE_ALIGN == 0);
const _: () = assert!(align_of::<Header>() <= NODE_ALIGN);
const _: () = assert!(align_of::<AtomicPtr<Header>>() <= NODE_ALIGN);
const _: () = assert!(HEIGHT_MAX <= u8::MAX as usize);

/// Bytes of a node with `height` links, a key of `key_len` and a value of `value_len` bytes.
fn node_bytes(height: usize, key_len: usize, value_len: usize) -> usize {
    (HEADER_BYTES + height * LINK_BYTES + key_len + value_len).next_multiple_of(NODE_ALIGN)
}

/// The bytes an entry takes on average: a node with the mean height (4/3 links) and half an
/// alignment's padding.
pub(super) const fn mean_entry_bytes(key_len: usize, value_len: usize) -> usize {
    HEADER_BYTES + LINK_BYTES * 4 / 3 + key_len + value_len + NODE_ALIGN / 2
}

/// A fully written node of a list that lives for `'a`.
#[derive(Clone, Copy)]
pub(super) struct Node<'a> {
    pointer: NonNull<Header>,
    list: PhantomData<&'a List>,
}

impl<'a> Node<'a> {
    fn new(pointer: NonNull<Header>) -> Self {
        Self { pointer, list: PhantomData }
    }

    fn header(self) -> &'a Header {
        // SAFETY: `pointer` is a node of the list, written before it was published (or the
        // head, written at construction); the list outlives 'a and frees nothing before it
        // is dropped; the header is never written again.
        unsafe { self.pointer.as_ref() }
    }

    /// The link at `level` (below the node's height).
    fn link(self, level: usize) -> &'a AtomicPtr<Header> {
        assert!(level < usize::from(self.header().height), "a link above the node's height");
        // SAFETY: a node's `height` links follow its header, each initialised before the
        // node was published; `pointer` carries the provenance of the whole node (it came
        // from the arena block, not from a reference to the header).
        unsafe { &*self.pointer.as_ptr().cast::<u8>().add(HEADER_BYTES + level * LINK_BYTES).cast() }
    }

    /// The node after this one at `level`.
    fn next(self, level: usize) -> Option<Self> {
        NonNull::new(self.link(level).load(Ordering::Acquire)).map(Self::new)
    }

    /// The node after this one in order.
    pub(super) fn successor(self) -> Option<Self> {
        self.next(0)
    }

    fn bytes(self, offset: usize, len: usize) -> &'a [u8] {
        let header = self.header();
        let start = HEADER_BYTES + usize::from(header.height) * LINK_BYTES;
        assert!(offset + len <= header.key_len as usize + header.value_len as usize, "beyond the node");
        // SAFETY: the key and value (`key_len + value_len` bytes) follow the links and were
        // copied in before the node was published; they are never written again.
        unsafe { std::slice::from_raw_parts(self.pointer.as_ptr().cast::<u8>().add(start + offset), len) }
    }

    pub(super) fn key(self) -> &'a [u8] {
        self.bytes(0, self.header().key_len as usize)
    }

    pub(super) fn value(self) -> &'a [u8] {
        let header = self.header();
        self.bytes(header.key_len as usize, header.value_len as usize)
    }

    pub(super) fn sequence(self) -> u64 {
        self.header().sequence
    }

    pub(super) fn kind(self) -> EntryKind {
        EntryKind::from_code(self.header().kind).unwrap_or(EntryKind::Put)
    }

    /// Where this node lies against the position (`key`, `sequence`).
    fn compare(self, key: &[u8], sequence: u64) -> Order {
        lds_format::codec::compare_keys(self.key(), key).then_with(|| sequence.cmp(&self.sequence()))
    }
}

/// The writer's side: the arena's blocks and the height generator.
struct Arena {
    /// Every block, with the layout it was allocated with (freed on drop).
    blocks: Vec<(NonNull<u8>, Layout)>,
    /// The shared block nodes are packed into and its unused bytes (at its end).
    current: Option<NonNull<u8>>,
    free_bytes: usize,
    /// Bytes of all blocks.
    blocks_bytes: usize,
    /// xorshift state for node heights (deterministic: LevelDB's fixed seed).
    random: u64,
}

impl Arena {
    fn block(&mut self, bytes: usize) -> NonNull<u8> {
        let layout = match Layout::from_size_align(bytes, NODE_ALIGN) {
            Ok(layout) => layout,
            Err(_) => panic!("a memtable node of {bytes} bytes"),
        };
        // SAFETY: the layout's size is non-zero (a header at least).
        let block = unsafe { alloc::alloc(layout) };
        let Some(block) = NonNull::new(block) else { alloc::handle_alloc_error(layout) };
        self.blocks.push((block, layout));
        self.blocks_bytes += bytes;
        block
    }

    /// `bytes` (a multiple of `NODE_ALIGN`) of fresh memory, aligned to `NODE_ALIGN`.
    fn allocate(&mut self, bytes: usize) -> NonNull<u8> {
        assert!(bytes % NODE_ALIGN == 0, "an unaligned node size");
        if bytes > OWN_BLOCK_BYTES_MIN {
            return self.block(bytes);
        }
        let current = match self.current {
            Some(current) if self.free_bytes >= bytes => current,
            _ => {
                // The old block's tail stays unused (and counted).
                let current = self.block(BLOCK_BYTES);
                self.current = Some(current);
                self.free_bytes = BLOCK_BYTES;
                current
            }
        };
        let offset = BLOCK_BYTES - self.free_bytes;
        self.free_bytes -= bytes;
        // SAFETY: offset + bytes <= BLOCK_BYTES, within the block.
        unsafe { current.add(offset) }
    }

    /// Bytes of the blocks, less the shared block's unused tail and the list's head.
    fn used_bytes(&self) -> usize {
        self.blocks_bytes - self.free_bytes - node_bytes(HEIGHT_MAX, 0, 0)
    }

    /// A height from 1 to `HEIGHT_MAX`, each next one a quarter as likely.
    fn random_height(&mut self) -> usize {
        self.random ^= self.random << 13;
        self.random ^= self.random >> 7;
        self.random ^= self.random << 17;
        let mut bits = self.random;
        let mut height = 1;
        while height < HEIGHT_MAX && bits & 3 == 0 {
            height += 1;
            bits >>= 2;
        }
        height
    }
}

/// A sorted list of entries: one writer at a time, any number of readers without locks.
pub(super) struct List {
    /// A node of `HEIGHT_MAX` links and no entry, before every other.
    head: NonNull<Header>,
    /// The tallest node's height (at least 1): searches start there.
    height: AtomicUsize,
    /// `Arena::used_bytes`, for readers.
    used_bytes: AtomicUsize,
    writer: Mutex<Arena>,
}

// SAFETY: the list owns its blocks (freed only by `drop`, with `&mut self`); a node is
// immutable once published except for its links, which are atomics; every change goes
// through the writer's lock.
unsafe impl Send for List {}
// SAFETY: as for `Send`: shared references read only published nodes and atomics.
unsafe impl Sync for List {}

impl Default for List {
    fn default() -> Self {
        let mut arena =
            Arena { blocks: Vec::new(), current: None, free_bytes: 0, blocks_bytes: 0, random: 0xdead_beef };
        let head = arena.allocate(node_bytes(HEIGHT_MAX, 0, 0)).cast::<Header>();
        // SAFETY: fresh memory of a node with HEIGHT_MAX links, aligned for the header and
        // its links.
        unsafe {
            head.write(Header { sequence: 0, key_len: 0, value_len: 0, kind: 0, height: HEIGHT_MAX as u8 });
            for level in 0..HEIGHT_MAX {
                head.cast::<u8>()
                    .add(HEADER_BYTES + level * LINK_BYTES)
                    .cast::<AtomicPtr<Header>>()
                    .write(AtomicPtr::new(ptr::null_mut()));
            }
        }
        let used_bytes = AtomicUsize::new(arena.used_bytes());
        Self { head, height: AtomicUsize::new(1), used_bytes, writer: Mutex::new(arena) }
    }
}

impl std::fmt::Debug for List {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("List").field("used_bytes", &self.used_bytes()).finish_non_exhaustive()
    }
}

impl Drop for List {
    fn drop(&mut self) {
        let arena = self.writer.get_mut().unwrap_or_else(PoisonError::into_inner);
        for (block, layout) in arena.blocks.drain(..) {
            // SAFETY: allocated by `Arena::block` with this layout, freed once; no reader
            // remains (`&mut self`).
            unsafe { alloc::dealloc(block.as_ptr(), layout) };
        }
    }
}

impl List {
    fn head(&self) -> Node<'_> {
        Node::new(self.head)
    }

    /// The first node for which `before` is false, with the last node before it at each
    /// level in `previous` (the head where there is none).
    fn find<'a>(
        &'a self,
        before: impl Fn(Node<'a>) -> bool,
        mut previous: Option<&mut [Node<'a>; HEIGHT_MAX]>,
    ) -> Option<Node<'a>> {
        let mut node = self.head();
        let mut level = self.height.load(Ordering::Relaxed).clamp(1, HEIGHT_MAX) - 1;
        loop {
            let next = node.next(level);
            match next {
                Some(next) if before(next) => node = next,
                _ => {
                    if let Some(previous) = previous.as_deref_mut() {
                        previous[level] = node;
                    }
                    if level == 0 {
                        return next;
                    }
                    level -= 1;
                }
            }
        }
    }

    /// The first node at or after (`key`, `sequence`), or after it when `inclusive` is false.
    pub(super) fn seek(&self, key: &[u8], sequence: u64, inclusive: bool) -> Option<Node<'_>> {
        if inclusive {
            self.find(|node| node.compare(key, sequence).is_lt(), None)
        } else {
            self.find(|node| node.compare(key, sequence).is_le(), None)
        }
    }

    pub(super) fn first(&self) -> Option<Node<'_>> {
        self.head().next(0)
    }

    pub(super) fn last(&self) -> Option<Node<'_>> {
        let mut node = self.head();
        for level in (0..self.height.load(Ordering::Relaxed).clamp(1, HEIGHT_MAX)).rev() {
            while let Some(next) = node.next(level) {
                node = next;
            }
        }
        (node.pointer != self.head).then_some(node)
    }

    /// Bytes of the arena in use.
    pub(super) fn used_bytes(&self) -> usize {
        self.used_bytes.load(Ordering::Relaxed)
    }

    /// Inserts an entry; false (and nothing changes) when one with the same key and
    /// sequence number is there already.
    pub(super) fn insert(&self, key: &[u8], sequence: u64, kind: EntryKind, value: &[u8]) -> bool {
        let mut arena = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let mut previous = [self.head(); HEIGHT_MAX];
        let found = self.find(|node| node.compare(key, sequence).is_lt(), Some(&mut previous));
        if found.is_some_and(|node| node.compare(key, sequence).is_eq()) {
            return false;
        }
        let (Ok(key_len), Ok(value_len)) = (u32::try_from(key.len()), u32::try_from(value.len())) else {
            panic!("a memtable entry of a {}-byte key and a {}-byte value", key.len(), value.len());
        };
        let height = arena.random_height();
        let node = arena.allocate(node_bytes(height, key.len(), value.len())).cast::<Header>();
        // SAFETY: fresh memory of `node_bytes(height, ..)` bytes, aligned for the header and
        // links; nothing else refers to it until the stores below publish it. Each link
        // starts as its predecessor's (read under the writer's lock, which orders it after
        // every earlier insert).
        unsafe {
            node.write(Header { sequence, key_len, value_len, kind: kind.code(), height: height as u8 });
            let links = node.cast::<u8>().add(HEADER_BYTES);
            for (level, before) in previous.iter().enumerate().take(height) {
                let next = before.link(level).load(Ordering::Relaxed);
                links.add(level * LINK_BYTES).cast::<AtomicPtr<Header>>().write(AtomicPtr::new(next));
            }
            let data = links.add(height * LINK_BYTES);
            ptr::copy_nonoverlapping(key.as_ptr(), data.as_ptr(), key.len());
            ptr::copy_nonoverlapping(value.as_ptr(), data.add(key.len()).as_ptr(), value.len());
        }
        if height > self.height.load(Ordering::Relaxed) {
            // A reader that sees the new height before the links finds nulls there and goes
            // down (`previous` holds the head above the old height).
            self.height.store(height, Ordering::Relaxed);
        }
        for (level, before) in previous.iter().enumerate().take(height) {
            before.link(level).store(node.as_ptr(), Ordering::Release);
        }
        self.used_bytes.store(arena.used_bytes(), Ordering::Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries of the larger tests (fewer under Miri, which runs them about 1,000 times slower).
    const ENTRIES: u64 = if cfg!(miri) { 300 } else { 20_000 };

    fn entries(list: &List) -> Vec<(Vec<u8>, u64, EntryKind, Vec<u8>)> {
        let mut found = Vec::new();
        let mut node = list.first();
        while let Some(current) = node {
            found.push((current.key().to_vec(), current.sequence(), current.kind(), current.value().to_vec()));
            node = current.successor();
        }
        found
    }

    #[test]
    fn entries_come_back_in_order_whole_and_once() {
        let list = List::default();
        let mut expected = Vec::new();
        for number in 0..ENTRIES / 4 {
            let key = format!("key-{:05}", (number * 7_919) % (ENTRIES / 8)).into_bytes();
            let value = vec![number as u8; (number % 300) as usize];
            let kind = if number % 5 == 0 { EntryKind::Delete } else { EntryKind::Put };
            assert!(list.insert(&key, number, kind, &value));
            expected.push((key, number, kind, value));
        }
        // A large value takes a block of its own.
        let large = vec![7u8; 3 * OWN_BLOCK_BYTES_MIN];
        assert!(list.insert(b"large", 1, EntryKind::Put, &large));
        expected.push((b"large".to_vec(), 1, EntryKind::Put, large));
        assert!(!list.insert(b"key-00000", 0, EntryKind::Put, b"again"), "a second entry at one position");
        expected.sort_by(|a, b| lds_format::codec::compare_keys(&a.0, &b.0).then(b.1.cmp(&a.1)));
        assert_eq!(entries(&list), expected);
        assert_eq!(list.last().map(|node| node.key().to_vec()), Some(b"large".to_vec()));
        let seeked = list.seek(b"key-00001", u64::MAX, true).map(|node| (node.key().to_vec(), node.sequence()));
        let first_of_key =
            expected.iter().find(|entry| entry.0 == b"key-00001").map(|entry| (entry.0.clone(), entry.1));
        assert_eq!(seeked, first_of_key);
        let past = list.seek(b"key-00001", 0, false).map(|node| node.key().to_vec());
        assert_eq!(past, Some(b"key-00002".to_vec()));
        let payload: usize = expected.iter().map(|entry| entry.0.len() + entry.3.len()).sum();
        let overhead = (list.used_bytes() - payload) / expected.len();
        assert!(overhead < 50, "{overhead} bytes per entry besides its key and value");
    }

    #[test]
    fn an_empty_list_has_no_first_or_last_node() {
        let list = List::default();
        assert!(list.first().is_none());
        assert!(list.last().is_none());
        assert!(list.seek(b"", u64::MAX, true).is_none());
    }

    #[test]
    fn readers_see_whole_entries_in_order_while_a_writer_inserts() {
        let list = std::sync::Arc::new(List::default());
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (list, done) = (std::sync::Arc::clone(&list), std::sync::Arc::clone(&done));
                std::thread::spawn(move || {
                    let mut passes = 0;
                    while !done.load(Ordering::Acquire) || passes == 0 {
                        let seen = entries(&list);
                        for pair in seen.windows(2) {
                            assert!(lds_format::codec::compare_keys(&pair[0].0, &pair[1].0).is_lt(), "out of order");
                        }
                        for (key, sequence, _, value) in &seen {
                            // Each value repeats its key's number: a torn entry would not.
                            assert_eq!(value, &format!("{sequence}").repeat(3).into_bytes(), "{key:?}");
                        }
                        passes += 1;
                    }
                })
            })
            .collect();
        for number in 0..ENTRIES {
            let key = format!("{:08}", (number * 7_919) % ENTRIES);
            list.insert(key.as_bytes(), number, EntryKind::Put, format!("{number}").repeat(3).as_bytes());
        }
        done.store(true, Ordering::Release);
        for reader in readers {
            reader.join().expect("a reader");
        }
        assert_eq!(entries(&list).len() as u64, ENTRIES);
    }
}
