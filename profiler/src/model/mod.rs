//! Plain data every stage may use: the run's metadata, loss counters and exit status
//! (`meta`), failures and exit codes (`failure`).
pub mod failure;
pub mod meta;
