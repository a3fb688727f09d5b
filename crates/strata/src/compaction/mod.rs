//! Compaction: deciding what to merge ([`policy`], a pure function of the current version) and
//! doing it ([`exec`], which reads inputs, collapses versions and writes new files).

pub mod exec;
pub mod policy;
pub(crate) mod supersede;
pub mod tiering;
