//! The C shim's functions (arm64 only), declared once for the Rust side.
//!
//! With `cfg(weft_shim)` (set by build.rs when it compiled
//! `shim/weft_jitmem_shim.c`) these are the real C functions. Without it (a
//! check-only cross build with no C compiler for the target) Rust stand-ins
//! with the same signatures are compiled instead, so every call site still
//! type-checks and links; the probe refuses with `ProbeError::ShimMissing`
//! before any stand-in could matter.

#![allow(dead_code)] // Each OS uses a different subset.

/// True when the C shim is linked in.
pub(crate) const PRESENT: bool = cfg!(weft_shim);

macro_rules! shim_fns {
    ($( $(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)? = $absent:expr; )*) => {
        #[cfg(weft_shim)]
        extern "C" {
            $( $(#[$doc])* pub(crate) fn $name($($arg: $ty),*) $(-> $ret)?; )*
        }
        $(
            #[cfg(not(weft_shim))]
            $(#[$doc])*
            pub(crate) unsafe extern "C" fn $name($(_: $ty),*) $(-> $ret)? { $absent }
        )*
    };
}

shim_fns! {
    /// Reads CTR_EL0 (cache line sizes, IDC/DIC).
    fn weft_jitmem_ctr_el0() -> u64 = 0;
    /// Linux/Android: `dc cvau` / `ic ivau` over `[start, start+len)`, `dsb ish`, `isb`.
    fn weft_jitmem_sync_icache(start: *mut u8, len: usize) = ();
    /// macOS: lifts JIT write protection, copies `len` bytes, zeroes the rest
    /// of `map_len`, restores protection, invalidates the icache. Returns 0 on success.
    fn weft_jitmem_macos_write(dst: *mut u8, src: *const u8, len: usize, map_len: usize) -> i32 = -1;
}
