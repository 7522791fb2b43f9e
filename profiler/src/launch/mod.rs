//! What execprof launches: the traced command, held until the probes are attached
//! (`child`), and the built-in exec-chain workload.
pub(crate) mod child;
pub(crate) mod workload;
