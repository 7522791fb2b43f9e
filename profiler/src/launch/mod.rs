//! What execprof launches: the traced command, held until the probes are attached
//! (`child`), what its ELF file says (`elf`), and the built-in exec-chain workload.
pub(crate) mod child;
pub(crate) mod elf;
pub(crate) mod workload;
