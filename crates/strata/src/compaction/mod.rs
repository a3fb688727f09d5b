//! Compaction: deciding what to merge ([`pick`] over [`policy`] and [`tiering`], pure functions
//! of the current version) and doing it ([`exec`], which reads inputs, collapses versions and
//! writes new files).

pub mod exec;
pub(crate) mod job;
pub mod pick;
pub mod policy;
pub(crate) mod supersede;
pub mod tiering;
