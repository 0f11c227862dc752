//! weft-kernels: the kernel families.
//!
//! One job: for each family, its contract, its scalar reference, its arm(s)
//! (CLIF built through weft-managed) and, added by their authors, its x64 and
//! a64 twins — one module per family.
//!
//! Invariants: a reference is the definition of the family's results; an
//! arm computes exactly the bits the contract fixes; every kernel is a leaf
//! `extern "C" fn(*const Args)` with the family's `#[repr(C)]` args.

pub mod arm_build;
pub mod attention;
pub mod elementwise;
pub mod q8_0;
pub mod testing;
