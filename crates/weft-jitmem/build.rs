//! Compiles the C shim (`shim/weft_jitmem_shim.c`) for arm64 Linux/Android/macOS
//! and sets `cfg(weft_shim)` when it is linked in.
//!
//! A check-only cross build for macOS from a non-Apple host usually has no C
//! compiler that targets Apple: the shim is then skipped, `weft_shim` stays
//! unset, the Rust side still type-checks against stand-in functions, and
//! `probe()` reports `ProbeError::ShimMissing` with the note set here. On every
//! other target that needs the shim, a failed compile is a hard build error.

use std::env;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(weft_shim)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=shim/weft_jitmem_shim.c");

    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let host = env::var("HOST").unwrap_or_default();

    let needs_shim = arch == "aarch64" && matches!(os.as_str(), "linux" | "android" | "macos");
    let note = if !needs_shim {
        "not needed on this target".to_owned()
    } else {
        // Cross-checking macOS from elsewhere: the compiler is usually absent
        // or cannot target Apple. Keep its noise out of the build output.
        let apple_cross = os == "macos" && !host.contains("apple");
        let mut build = cc::Build::new();
        build
            .file("shim/weft_jitmem_shim.c")
            .warnings(true)
            .extra_warnings(true)
            .cargo_warnings(!apple_cross);
        match build.try_compile("weft_jitmem_shim") {
            Ok(()) => {
                println!("cargo::rustc-cfg=weft_shim");
                "compiled from shim/weft_jitmem_shim.c".to_owned()
            }
            Err(err) if apple_cross => {
                let note = format!(
                    "skipped: no C compiler for {} on host {host} (check-only build); \
                     placement is refused at run time",
                    env::var("TARGET").unwrap_or_default()
                );
                // Visible with `cargo build -vv`; deliberately not a cargo:warning.
                eprintln!("weft-jitmem shim {note}: {err}");
                note
            }
            Err(err) => panic!("weft-jitmem: compiling shim/weft_jitmem_shim.c failed: {err}"),
        }
    };
    println!("cargo::rustc-env=WEFT_JITMEM_SHIM_NOTE={note}");
}
