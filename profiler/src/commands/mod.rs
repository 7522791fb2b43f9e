//! The commands: each wires a source to the pipeline and a renderer, nothing else.
pub mod agent;
pub mod bench;
pub mod doctor;
pub mod manual;
pub mod repeat;
pub mod run;
pub mod spawn;
pub mod top;
