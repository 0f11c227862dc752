//! The x64 twins' bodies as listings (insta snapshots): a change to what
//! the emitter writes shows up in review as a diff of instructions. The
//! panels arm's three twins, at one small offer; the bodies do not depend
//! on the geometry (every extent is read from the arguments).

use weft_gemm::arm::{offer, ArmKind};
use weft_gemm::{site, BLayout};

#[test]
fn panels_twin_listings() {
    let b = vec![0.5f32; 40 * 48];
    let offer = offer(ArmKind::Panels, &site(64, 48, 40, BLayout::Rows, Some(&b))).unwrap();
    for twin in weft_gemm::twin_x64::twins(ArmKind::Panels) {
        let code = twin.emit(&offer).unwrap();
        insta::assert_snapshot!(twin.name().replace(".", "_"), weft_managed::listing(&code));
    }
}
