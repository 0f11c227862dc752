//! Sets `weft_host_has="…"` for the CPU features of the host the tests run
//! on, so tests needing a missing feature report themselves as ignored.

fn main() {
    weft_testcfg::emit();
}
