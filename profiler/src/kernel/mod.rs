//! What touches aya and the running kernel: loading and attaching (`tracer`, the `probes`
//! table, the `exact_plan`), `privileges`, kernel `facts`, struct `layout`s from BTF, kernel
//! symbols (`ksyms`) and stack symbolization.
pub mod exact_plan;
pub mod facts;
pub mod ksyms;
pub mod layout;
pub mod privileges;
pub mod probes;
pub mod symbolize;
pub mod tracer;
