//! Taking a map out of the loaded eBPF object, typed: what the tracer and the agent's
//! aggregate readers share.
use anyhow::{Context as _, Result, anyhow};
use aya::Ebpf;

/// Takes map `name` out of `ebpf` as `T`; an error names the map when it is missing or of
/// another type.
pub(crate) fn take_map<T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>>(ebpf: &mut Ebpf, name: &str) -> Result<T> {
    let map = ebpf.take_map(name).ok_or_else(|| anyhow!("map {name} missing from the eBPF object"))?;
    T::try_from(map).with_context(|| format!("map {name} has an unexpected type"))
}
