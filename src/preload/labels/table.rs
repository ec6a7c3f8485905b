//! The shared table of labels: a fixed array of `advlock.max_labels` slots and a lock-free
//! free list (a Treiber stack whose head carries an ABA tag). Only the backend that claimed a
//! slot writes it, under a per-slot sequence counter (a seqlock) that readers use to take
//! consistent snapshots. Nothing here waits: claiming is a bounded CAS loop.
use crate::backend;
use crate::lock_request::Mode;
use crate::preload::shmem;
use core::sync::atomic::{fence, AtomicI32, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
use pgrx::pg_sys;
use std::sync::atomic::AtomicPtr;

/// Labels are truncated to this many bytes (at a character boundary).
pub const LABEL_BYTES: usize = 127;

pub(super) const NIL: u32 = u32::MAX;
pub(super) const FLAG_SHARED: u32 = 1;
pub(super) const FLAG_SESSION: u32 = 2;
/// Bound on CAS retries on the free list; reaching it counts a dropped entry.
pub(super) const MAX_CAS_RETRIES: u32 = 10_000;

#[repr(C)]
pub(super) struct Header {
    /// Free-list head: (ABA tag << 32) | slot index, NIL when empty.
    pub(super) free: AtomicU64,
    pub(super) dropped: AtomicU64,
    pub(super) capacity: u32,
}

#[repr(C)]
pub(super) struct Slot {
    /// Even: stable; odd: the owner is writing. Bumped twice per change.
    pub(super) seq: AtomicU32,
    /// Next free slot while on the free list.
    pub(super) next: AtomicU32,
    /// Owner's pid; 0 when free.
    pub(super) pid: AtomicI32,
    pub(super) procno: AtomicI32,
    pub(super) key: AtomicI64,
    pub(super) since: AtomicI64,
    pub(super) database: AtomicU32,
    pub(super) role: AtomicU32,
    pub(super) flags: AtomicU32,
    /// The fencing token of the latest `advlock_try_with_token` acquisition; 0 when none.
    pub(super) token: AtomicI64,
    /// Bytes of the label before the ':' (the namespace, possibly clipped with the label).
    pub(super) ns_len: AtomicU32,
    pub(super) len: AtomicU32,
    pub(super) label: [AtomicU8; LABEL_BYTES],
}

pub(super) struct Table {
    pub(super) header: &'static Header,
    pub(super) slots: &'static [Slot],
    /// Bit i of word i / 64: slot i is (or is about to be, or just was) published. A hint for
    /// readers, who still validate every slot they visit with its seqlock.
    occupied: &'static [AtomicU64],
}

pub(super) static TABLE: AtomicPtr<Header> = AtomicPtr::new(core::ptr::null_mut());

/// The shared memory of this feature, for `shmem::install_hooks`.
pub const SEGMENT: shmem::Segment = shmem::Segment {
    size: shmem_size,
    attach: shmem_attach,
};

/// Words of the occupancy bitmap for `capacity` slots.
fn bitmap_words(capacity: usize) -> usize {
    capacity.div_ceil(64)
}

/// The header, the slots, then the occupancy bitmap (one bit per slot, set while it is
/// published): readers scan the bitmap, a few bytes per 64 slots, instead of every slot, so
/// reading costs what is recorded, not what `advlock.max_labels` allows.
pub fn shmem_size() -> usize {
    let capacity = crate::gucs::MAX_LABELS.get().max(1) as usize;
    size_of::<Header>()
        + capacity * size_of::<Slot>()
        + bitmap_words(capacity) * size_of::<AtomicU64>()
}

/// # Safety
/// Only from `shmem::shmem_startup`, under AddinShmemInitLock.
pub unsafe fn shmem_attach() {
    let capacity = crate::gucs::MAX_LABELS.get().max(1) as u32;
    // SAFETY: the size was requested in shmem_request; alignment of ShmemInitStruct results
    // is at least MAXALIGN (8), enough for Header and Slot (all fields align <= 8).
    unsafe {
        let (ptr, found) = shmem::init_struct(c"advlock labels", shmem_size());
        let header = ptr.cast::<Header>();
        if !found {
            // Fresh shared memory: zero it, then chain every slot onto the free list.
            core::ptr::write_bytes(ptr, 0, shmem_size());
            (*header).capacity = capacity;
            let slots = ptr.add(size_of::<Header>()).cast::<Slot>();
            for i in 0..capacity {
                let next = if i + 1 < capacity { i + 1 } else { NIL };
                (*slots.add(i as usize)).next.store(next, Ordering::Relaxed);
            }
            (*header).free.store(0, Ordering::Relaxed); // tag 0, index 0
        }
        TABLE.store(header, Ordering::Release);
    }
}

pub(super) fn table() -> Option<Table> {
    let header = TABLE.load(Ordering::Acquire);
    if header.is_null() {
        return None;
    }
    // SAFETY: set once in shmem_attach to shared memory that lives as long as this process;
    // `capacity` slots follow the header.
    unsafe {
        let capacity = (*header).capacity as usize;
        let slots = header.cast::<u8>().add(size_of::<Header>()).cast::<Slot>();
        // The bitmap follows the slots; size_of::<Slot>() is a multiple of its alignment (8).
        let occupied = slots.add(capacity).cast::<AtomicU64>();
        Some(Table {
            header: &*header,
            slots: core::slice::from_raw_parts(slots, capacity),
            occupied: core::slice::from_raw_parts(occupied, bitmap_words(capacity)),
        })
    }
}

/// How much of the label `Table::read_part` copies.
#[derive(Clone, Copy)]
pub(super) enum LabelPart {
    Nothing,
    /// The bytes before the ':' (`ns_len`).
    Namespace,
    Whole,
}

/// A consistent copy of one slot.
pub(super) struct Snapshot {
    pub(super) seq: u32,
    pub(super) pid: i32,
    pub(super) procno: i32,
    pub(super) key: i64,
    pub(super) since: i64,
    pub(super) database: u32,
    pub(super) role: u32,
    pub(super) flags: u32,
    pub(super) token: i64,
    /// The part of the label the read asked for (`LabelPart`).
    pub(super) label: Vec<u8>,
}

impl Table {
    pub(super) fn pop_free(&self) -> Option<u32> {
        for _ in 0..MAX_CAS_RETRIES {
            let head = self.header.free.load(Ordering::Acquire);
            let index = head as u32;
            if index == NIL {
                return None;
            }
            // May read a stale `next` if another backend pops concurrently; the tag makes the
            // CAS below fail in that case.
            let next = self.slots[index as usize].next.load(Ordering::Relaxed);
            let tag = (head >> 32).wrapping_add(1);
            let new = (tag << 32) | next as u64;
            if self
                .header
                .free
                .compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Some(index);
            }
            core::hint::spin_loop();
        }
        None
    }

    pub(super) fn push_free(&self, index: u32) {
        loop {
            let head = self.header.free.load(Ordering::Acquire);
            self.slots[index as usize]
                .next
                .store(head as u32, Ordering::Relaxed);
            let tag = (head >> 32).wrapping_add(1);
            let new = (tag << 32) | index as u64;
            if self
                .header
                .free
                .compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            core::hint::spin_loop();
        }
    }

    /// Writes a claimed slot and publishes it (pid != 0 under an even sequence number).
    pub(super) fn fill(
        &self,
        index: u32,
        key: i64,
        flags: u32,
        since: i64,
        label: &[u8],
        ns_len: usize,
    ) {
        let slot = &self.slots[index as usize];
        slot.seq.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        // SAFETY: backend-local globals, set at backend start.
        let (pid, procno, database, role) = unsafe {
            (
                crate::backend::pid(),
                crate::backend::proc_number(),
                crate::backend::database(),
                pg_sys::GetSessionUserId().to_u32(),
            )
        };
        slot.procno.store(procno, Ordering::Relaxed);
        slot.key.store(key, Ordering::Relaxed);
        slot.since.store(since, Ordering::Relaxed);
        slot.database.store(database, Ordering::Relaxed);
        slot.role.store(role, Ordering::Relaxed);
        slot.flags.store(flags, Ordering::Relaxed);
        slot.token.store(0, Ordering::Relaxed);
        slot.ns_len
            .store(ns_len.min(label.len()) as u32, Ordering::Relaxed);
        slot.len.store(label.len() as u32, Ordering::Relaxed);
        for (dst, &b) in slot.label.iter().zip(label) {
            dst.store(b, Ordering::Relaxed);
        }
        slot.pid.store(pid, Ordering::Relaxed);
        slot.seq.fetch_add(1, Ordering::Release);
        self.mark(index as usize, true);
    }

    /// Sets (published) or clears (unpublished) slot `index`'s bit.
    fn mark(&self, index: usize, published: bool) {
        let bit = 1u64 << (index % 64);
        let word = &self.occupied[index / 64];
        if published {
            word.fetch_or(bit, Ordering::Release);
        } else {
            word.fetch_and(!bit, Ordering::Release);
        }
    }

    /// The slots whose bit is set, in index order: the only ones a reader needs to visit.
    pub(super) fn occupied_slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.occupied.iter().enumerate().flat_map(|(w, word)| {
            let mut bits = word.load(Ordering::Acquire);
            core::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    w * 64 + b
                })
            })
        })
    }

    pub(super) fn set_flags(&self, index: u32, flags: u32) {
        let slot = &self.slots[index as usize];
        slot.seq.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        slot.flags.store(flags, Ordering::Relaxed);
        slot.seq.fetch_add(1, Ordering::Release);
    }

    pub(super) fn set_token(&self, index: u32, token: i64) {
        let slot = &self.slots[index as usize];
        slot.seq.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        slot.token.store(token, Ordering::Relaxed);
        slot.seq.fetch_add(1, Ordering::Release);
    }

    /// Unpublishes an owned slot and returns it to the free list.
    pub(super) fn free(&self, index: u32) {
        let slot = &self.slots[index as usize];
        slot.seq.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        slot.pid.store(0, Ordering::Relaxed);
        slot.seq.fetch_add(1, Ordering::Release);
        self.mark(index as usize, false);
        self.push_free(index);
    }

    /// Seqlock read of the whole slot; None when free or when the owner kept changing it.
    pub(super) fn read(&self, index: usize) -> Option<Snapshot> {
        self.read_part(index, LabelPart::Whole)
    }

    /// Seqlock read copying only `part` of the label (readers that match entries by identity
    /// first copy no label at all).
    pub(super) fn read_part(&self, index: usize, part: LabelPart) -> Option<Snapshot> {
        let slot = &self.slots[index];
        for _ in 0..8 {
            let seq = slot.seq.load(Ordering::Acquire);
            if seq % 2 == 1 {
                core::hint::spin_loop();
                continue;
            }
            let pid = slot.pid.load(Ordering::Relaxed);
            if pid == 0 {
                fence(Ordering::Acquire);
                if slot.seq.load(Ordering::Relaxed) == seq {
                    return None;
                }
                continue;
            }
            let len = (slot.len.load(Ordering::Relaxed) as usize).min(LABEL_BYTES);
            let ns_len = (slot.ns_len.load(Ordering::Relaxed) as usize).min(len);
            let copied = match part {
                LabelPart::Nothing => 0,
                LabelPart::Namespace => ns_len,
                LabelPart::Whole => len,
            };
            let snapshot = Snapshot {
                seq,
                pid,
                procno: slot.procno.load(Ordering::Relaxed),
                key: slot.key.load(Ordering::Relaxed),
                since: slot.since.load(Ordering::Relaxed),
                database: slot.database.load(Ordering::Relaxed),
                role: slot.role.load(Ordering::Relaxed),
                flags: slot.flags.load(Ordering::Relaxed),
                token: slot.token.load(Ordering::Relaxed),
                label: slot.label[..copied]
                    .iter()
                    .map(|b| b.load(Ordering::Relaxed))
                    .collect(),
            };
            fence(Ordering::Acquire);
            if slot.seq.load(Ordering::Relaxed) == seq {
                return Some(snapshot);
            }
        }
        None
    }

    /// Frees slots whose owner backend no longer exists (defensive; see the module comment).
    /// Claims each with a CAS on its sequence number so concurrent sweepers cannot both free it.
    pub(super) fn reclaim_dead(&self) -> usize {
        let mut reclaimed = 0;
        let occupied: Vec<usize> = self.occupied_slots().collect();
        for index in occupied {
            let Some(s) = self.read_part(index, LabelPart::Nothing) else {
                continue;
            };
            if backend::backend_alive(s.procno, s.pid) {
                continue;
            }
            let slot = &self.slots[index];
            if slot
                .seq
                .compare_exchange(
                    s.seq,
                    s.seq.wrapping_add(1),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                slot.pid.store(0, Ordering::Relaxed);
                slot.seq.fetch_add(1, Ordering::Release);
                self.mark(index, false);
                self.push_free(index as u32);
                reclaimed += 1;
            }
        }
        reclaimed
    }

    pub(super) fn in_use(&self) -> i64 {
        self.occupied_slots()
            .filter(|&i| self.slots[i].pid.load(Ordering::Relaxed) != 0)
            .count() as i64
    }
}

pub(super) fn mode_flag(mode: Mode) -> u32 {
    match mode {
        Mode::Exclusive => 0,
        Mode::Shared => FLAG_SHARED,
    }
}

pub(super) fn mode_of(flag: u32) -> Mode {
    if flag & FLAG_SHARED != 0 {
        Mode::Shared
    } else {
        Mode::Exclusive
    }
}

/// `ns:id`, truncated to LABEL_BYTES at a character boundary of the server encoding.
pub(super) fn compose(ns: &[u8], id: &[u8], out: &mut [u8; LABEL_BYTES + 8]) -> usize {
    let mut n = 0;
    for &b in ns.iter().chain(b":").chain(id) {
        if n == out.len() {
            break;
        }
        out[n] = b;
        n += 1;
    }
    if ns.len() + 1 + id.len() <= LABEL_BYTES {
        return n;
    }
    // SAFETY: `out[..n]` is initialised; pg_mbcliplen reads at most `n` bytes (the first byte
    // of each character decides its length) and returns a length <= LABEL_BYTES.
    let clipped =
        unsafe { pg_sys::pg_mbcliplen(out.as_ptr().cast(), n as i32, LABEL_BYTES as i32) };
    (clipped.max(0) as usize).min(LABEL_BYTES)
}
