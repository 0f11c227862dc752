//! Hand-written machine code for the probe, as constant bytes: this crate must
//! not depend on weft's own encoders (it is what they are tested against).
//! Encodings checked with `llvm-mc -show-encoding`.

/// Room for the longest body below.
pub(crate) const MAX_BODY: usize = 16;

/// What a tiny probe function does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Body {
    /// `extern "C" fn() -> u32` returning this value.
    Return(u32),
    /// Traps at once (x86-64 `ud2` -> SIGILL, A64 `brk #0` -> SIGTRAP).
    #[cfg_attr(windows, allow(dead_code))] // Windows has no child to contain it.
    Trap,
    /// Branches to itself forever.
    #[cfg_attr(windows, allow(dead_code))]
    Hang,
}

/// Machine code for `body` on this CPU, or `None` where this crate has no encoding.
pub(crate) fn encode(body: Body) -> Option<([u8; MAX_BODY], usize)> {
    let mut out = [0u8; MAX_BODY];
    let len = encode_into(body, &mut out)?;
    Some((out, len))
}

#[cfg(target_arch = "x86_64")]
fn encode_into(body: Body, out: &mut [u8; MAX_BODY]) -> Option<usize> {
    let bytes: &[u8] = match body {
        Body::Return(v) => {
            let [a, b, c, d] = v.to_le_bytes();
            // mov eax, imm32 ; ret
            &[0xB8, a, b, c, d, 0xC3]
        }
        Body::Trap => &[0x0F, 0x0B], // ud2
        Body::Hang => &[0xEB, 0xFE], // jmp .
    };
    out[..bytes.len()].copy_from_slice(bytes);
    Some(bytes.len())
}

#[cfg(target_arch = "aarch64")]
fn encode_into(body: Body, out: &mut [u8; MAX_BODY]) -> Option<usize> {
    const RET: u32 = 0xD65F_03C0; // ret
    let (words, n): ([u32; 3], usize) = match body {
        Body::Return(v) => {
            let lo = v & 0xFFFF;
            let hi = v >> 16;
            // movz w0, #lo ; movk w0, #hi, lsl #16 ; ret
            ([0x5280_0000 | (lo << 5), 0x72A0_0000 | (hi << 5), RET], 3)
        }
        Body::Trap => ([0xD420_0000, 0, 0], 1), // brk #0
        Body::Hang => ([0x1400_0000, 0, 0], 1), // b .
    };
    for (i, w) in words[..n].iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    Some(4 * n)
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn encode_into(_body: Body, _out: &mut [u8; MAX_BODY]) -> Option<usize> {
    None
}

/// One no-op instruction, for padding in tests.
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn nop() -> &'static [u8] {
    if cfg!(target_arch = "aarch64") {
        &[0x1F, 0x20, 0x03, 0xD5] // nop
    } else {
        &[0x90] // nop
    }
}

/// A whole function returning `v`, as bytes (tests).
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn return_u32(v: u32) -> Vec<u8> {
    let (buf, len) = encode(Body::Return(v)).expect("tests run on x86-64 or arm64");
    buf[..len].to_vec()
}
