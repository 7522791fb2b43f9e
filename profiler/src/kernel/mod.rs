//! What touches aya and the running kernel: loading and attaching (`tracer`, the `probes`
//! table, the `exact_plan`), `privileges`, kernel `facts` and BPF `features`, struct `layout`s from BTF, kernel
//! symbols (`ksyms`), stack symbolization, and the running-system `scope`s.
pub(crate) mod aggregates;
pub(crate) mod boundaries;
pub(crate) mod exact_plan;
pub(crate) mod facts;
pub(crate) mod features;
pub(crate) mod ksyms;
pub(crate) mod layout;
pub(crate) mod maps;
pub(crate) mod privileges;
pub(crate) mod probes;
pub(crate) mod return_probes;
pub(crate) mod scope;
pub(crate) mod symbolize;
pub(crate) mod tracer;
pub(crate) mod vmlinux;
