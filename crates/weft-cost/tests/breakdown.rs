//! The Zen 4 price breakdown of two twins (Weft's own bytes, so only a
//! model or table change moves it): loops found, their trips, entries,
//! iterations, cycles per iteration and what bounds them. A change here is
//! a change of every price the planner sees: review it.

use std::fmt::Write;

use weft_cost::{CostModel, Priced, TableId};
use weft_elementwise::arm::ElementwiseArm;
use weft_elementwise::{twin_x64::x64_twins, Func};
use weft_kernel::{Arm, Family, Geometry, Host, Site, Twin};
use weft_q8::arm::Q8MatvecArm;
use weft_q8::twin_x64::TWINS;

fn render(p: &Priced) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "cycles {:.1} (model {:.1}, floor {:.1}, {:?}), outside loops {:.1}, instructions {:.0}, rare blocks {}, unknown {}",
        p.price.cycles,
        p.model_cycles,
        p.price.floor,
        p.level,
        p.outside_loops,
        p.instructions,
        p.rare_blocks,
        p.unknown_instructions
    );
    for l in &p.loops {
        let _ = writeln!(
            s,
            "{:<10} depth {} head {:#06x} trips {:>4} entries {:>6.2} iterations {:>7.1} per-iteration {:>6.2} ({:?}) per-entry {:>5.2}",
            l.name,
            l.depth,
            l.head,
            l.trips,
            l.entries,
            l.iterations,
            l.cycles_per_iteration,
            l.bound,
            l.cycles_per_entry
        );
    }
    s
}

#[test]
fn q8_0_avx512_two_row_twin_at_17_rows_of_35_blocks_batch_2() {
    let host = Host::detect();
    let arm = Q8MatvecArm;
    let site = Site::new(
        Family("q8_0.matvec"),
        Geometry::new()
            .with("rows", 17)
            .with("cols", 1024 + 96)
            .with("batch", 2),
    );
    let offer = arm.offer(&site, &host).unwrap();
    let twin = TWINS
        .iter()
        .find(|t| t.name().ends_with("avx512vnni.r2"))
        .unwrap();
    let p = CostModel::with_table(TableId::Zen4)
        .price(&twin.emit(&offer).unwrap(), &twin.nest(&offer), &offer)
        .unwrap();
    insta::assert_snapshot!(render(&p));
}

#[test]
fn exp_avx2_twin_at_an_odd_length() {
    let host = Host::detect();
    let arm = ElementwiseArm::new(Func::Exp);
    let site = Site::new(arm.family(), Geometry::new().with("len", 1003));
    let offer = arm.offer(&site, &host).unwrap();
    let twin = x64_twins()
        .into_iter()
        .find(|t| t.name() == "exp.twin.avx2")
        .unwrap();
    let p = CostModel::with_table(TableId::Zen4)
        .price(&twin.emit(&offer).unwrap(), &twin.nest(&offer), &offer)
        .unwrap();
    insta::assert_snapshot!(render(&p));
}
