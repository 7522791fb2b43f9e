//! The agent's in-kernel aggregates as user space reads them: every entry of `AGGREGATES`,
//! the `other` slots, the counters of what did not fit, and the removal of entries that
//! have been read for the last time.
use anyhow::{Context as _, Result};
use aya::{
    Ebpf,
    maps::{Array, HashMap, MapData, PerCpuArray, StackTraceMap},
};
use profiler_common::{
    AggKey, AggValue, MissKey, MissValue, StackKey,
    aggregate::{OTHER_SLOTS, agg_counter},
    names,
};

use crate::kernel::maps::take_map;

/// What one read of the kernel's aggregates found.
pub(crate) struct KernelSnapshot {
    pub entries: Vec<(AggKey, AggValue)>,
    /// `OTHER_AGGREGATES`, by slot.
    pub other: Vec<AggValue>,
    /// `AGG_COUNTERS`, summed over CPUs.
    pub counters: [u64; agg_counter::COUNT as usize],
    /// `MISSES`: ENOENT attempts per caller cgroup and name.
    pub misses: Vec<(MissKey, MissValue)>,
    /// `STACK_COUNTS`: samples per stack, call and outcome.
    pub stack_counts: Vec<(StackKey, u64)>,
}

/// Every entry of a hash map as it is now; an entry the kernel side removes meanwhile is
/// skipped.
fn every_entry<K: aya::Pod, V: aya::Pod>(map: &HashMap<MapData, K, V>, what: &str) -> Result<Vec<(K, V)>> {
    let mut out = Vec::new();
    for key in map.keys() {
        let key = key.with_context(|| format!("walking {what}"))?;
        match map.get(&key, 0) {
            Ok(v) => out.push((key, v)),
            Err(aya::maps::MapError::KeyNotFound) => {}
            Err(e) => return Err(e).with_context(|| format!("reading an entry of {what}")),
        }
    }
    Ok(out)
}

pub(crate) struct AggregateMaps {
    series: HashMap<MapData, AggKey, AggValue>,
    other: Array<MapData, AggValue>,
    counters: PerCpuArray<MapData, u64>,
    misses: HashMap<MapData, MissKey, MissValue>,
    stack_counts: HashMap<MapData, StackKey, u64>,
    stacks: StackTraceMap<MapData>,
    /// The capacity of `AGGREGATES`, for the agent's own figures.
    pub capacity: u32,
}

impl AggregateMaps {
    /// `capacity`: the series map's, as the loader sized it.
    pub(crate) fn take(ebpf: &mut Ebpf, capacity: u32) -> Result<Self> {
        Ok(Self {
            series: take_map(ebpf, names::MAP_AGGREGATES)?,
            other: take_map(ebpf, names::MAP_OTHER_AGGREGATES)?,
            counters: take_map(ebpf, names::MAP_AGG_COUNTERS)?,
            misses: take_map(ebpf, names::MAP_MISSES)?,
            stack_counts: take_map(ebpf, names::MAP_STACK_COUNTS)?,
            stacks: take_map(ebpf, names::MAP_STACKS)?,
            capacity,
        })
    }

    /// Every entry as it is now. An entry removed by the kernel side meanwhile is skipped.
    pub(crate) fn read(&self) -> Result<KernelSnapshot> {
        let entries = every_entry(&self.series, "the aggregates map")?;
        let mut other = Vec::with_capacity(OTHER_SLOTS as usize);
        for slot in 0..OTHER_SLOTS {
            other.push(self.other.get(&slot, 0).context("reading the other aggregates")?);
        }
        let mut counters = [0; agg_counter::COUNT as usize];
        for (i, c) in counters.iter_mut().enumerate() {
            *c = self.counters.get(&(i as u32), 0).context("reading the aggregates' counters")?.iter().sum();
        }
        let misses = every_entry(&self.misses, "the misses map")?;
        let stack_counts = every_entry(&self.stack_counts, "the stack counts map")?;
        Ok(KernelSnapshot { entries, other, counters, misses, stack_counts })
    }

    /// Removes an entry that has been read for the last time (gone or idle). A call folded
    /// into it between that read and this removal is lost: entries are removed only after
    /// they stayed unchanged for a while, or their cgroup is gone.
    /// The frames of stack `id`, innermost first; empty when the kernel has no such stack
    /// (removed, or never stored).
    pub(crate) fn frames(&self, id: u32) -> Vec<u64> {
        self.stacks.get(&id, 0).map(|s| s.frames().iter().map(|f| f.ip).collect()).unwrap_or_default()
    }

    /// Removes a `STACK_COUNTS` entry read for the last time, and its stack when `last_use`.
    pub(crate) fn remove_stack_count(&mut self, key: &StackKey, last_use: bool) {
        let _ = self.stack_counts.remove(key);
        if last_use {
            let _ = self.stacks.remove(&key.stack_id);
        }
    }

    /// Removes a `MISSES` entry read for the last time (as [`AggregateMaps::remove`]).
    pub(crate) fn remove_miss(&mut self, key: &MissKey) {
        if let Err(e) = self.misses.remove(key) {
            log::debug!("removing a misses entry: {e}");
        }
    }

    pub(crate) fn remove(&mut self, key: &AggKey) {
        if let Err(e) = self.series.remove(key) {
            log::debug!("removing an aggregates entry: {e}");
        }
    }
}
