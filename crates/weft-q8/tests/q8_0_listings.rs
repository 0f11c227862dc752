//! The listings of the Q8_0 twins, snapshotted: a change to any emitted
//! byte shows up in review as a diff of instructions. Emission needs no
//! particular host (the bodies are only decoded here, never run), and the
//! x64 bodies are emitted for SysV so every host sees the same bytes.

use weft_kernel::Twin;
use weft_q8::arm::offer_for;
use weft_q8::quantize::{self, twin_a64::QuantizeNeon, twin_x64::QuantizeX64};
use weft_q8::twin_x64::{Q8MatvecX64, Tier};
use weft_x64::Abi;

#[test]
fn quantize_x64_twin_listings() {
    for twin in quantize::twin_x64::TWINS {
        let (emitted, _) = twin.with_abi(Abi::SysV).emit_body().expect("emits");
        let name = QuantizeX64::name(&twin).replace('.', "_");
        insta::assert_snapshot!(name, emitted.listing.to_string());
    }
}

#[test]
fn quantize_neon_twin_listing() {
    let code = QuantizeNeon.body().expect("emits");
    insta::assert_snapshot!("q8_0_quantize_twin_neon", weft_managed::listing(&code));
}

#[test]
fn matvec_one_row_twin_listings() {
    let offer = offer_for(4, 64, 1).expect("offer");
    for tier in [Tier::Avx2, Tier::Avx512Bw, Tier::Avx512Vnni] {
        let twin = Q8MatvecX64::new(tier, 1).with_abi(Abi::SysV);
        let emitted = twin.emit_body().expect("emits");
        // The offer is accepted too (same body: it is geometry-free).
        assert_eq!(twin.emit(&offer).expect("emit").bytes, emitted.bytes);
        insta::assert_snapshot!(twin.name().replace('.', "_"), emitted.listing.to_string());
    }
}

#[test]
fn matmul_x64_twin_listings() {
    for twin in weft_q8::matmul::twin_x64::TWINS {
        let twin = twin.with_abi(Abi::SysV);
        let emitted = twin.emit_body().expect("emits");
        insta::assert_snapshot!(twin.name().replace('.', "_"), emitted.listing.to_string());
    }
}
