//! Plain data every stage may use: the run's metadata, loss counters and exit status
//! (`meta`), the built-in chain's shape (`chain`), failures and exit codes (`failure`), the
//! names of what the kernel reports (`names`), which processes a run traces (`scope`).
pub mod chain;
pub mod failure;
pub mod meta;
pub mod names;
pub mod scope;
