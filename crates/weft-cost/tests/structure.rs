//! Loops found in hand-built code (x64 through iced's code assembler, arm64
//! through weft-a64), the nest matching, the execution-estimate rules and
//! the named refusals.

use iced_x86::code_asm::*;
use weft_cost::{bare_offer, CostError, CostModel, Priced, TableId};
use weft_kernel::{Isa, LoopTrip, NativeCode};

fn x64(build: impl FnOnce(&mut CodeAssembler) -> Result<(), IcedError>) -> NativeCode {
    let mut a = CodeAssembler::new(64).unwrap();
    build(&mut a).unwrap();
    NativeCode {
        isa: Isa::X86_64,
        bytes: a.assemble(0).unwrap(),
        pool: None,
        loops: Vec::new(),
    }
}

fn trip(name: &str, trips: u64, depth: u32) -> LoopTrip {
    LoopTrip {
        name: name.into(),
        trips,
        depth,
    }
}

fn zen4(code: &NativeCode, nest: &[LoopTrip]) -> Result<Priced, CostError> {
    CostModel::with_table(TableId::Zen4).price(code, nest, &bare_offer(0, 0))
}

/// `for i in 0..rcx { for j in 0..rdx { vaddps ymm0, ymm0, ymm1 } }`, both
/// loops tested at the bottom after a guard.
fn nested() -> NativeCode {
    x64(|a| {
        let mut outer = a.create_label();
        let mut inner = a.create_label();
        let mut done = a.create_label();
        let mut skip = a.create_label();
        a.test(rcx, rcx)?;
        a.je(done)?;
        a.set_label(&mut outer)?;
        a.mov(r8, rdx)?;
        a.test(r8, r8)?;
        a.je(skip)?;
        a.set_label(&mut inner)?;
        a.vaddps(ymm0, ymm0, ymm1)?;
        a.vaddps(ymm2, ymm2, ymm1)?;
        a.dec(r8)?;
        a.jne(inner)?;
        a.set_label(&mut skip)?;
        a.dec(rcx)?;
        a.jne(outer)?;
        a.set_label(&mut done)?;
        a.ret()
    })
}

#[test]
fn nested_loops_are_found_and_multiplied_down_the_nest() {
    let p = zen4(&nested(), &[trip("i", 10, 0), trip("j", 100, 1)]).unwrap();
    assert_eq!(p.loops.len(), 2);
    assert_eq!(p.loops[0].name, "i");
    assert_eq!(p.loops[1].depth, 1);
    assert_eq!(p.loops[0].iterations, 10.0);
    assert_eq!(p.loops[1].entries, 10.0);
    assert_eq!(p.loops[1].iterations, 1000.0);
    // Two independent 3-cycle add chains: the latency bounds an iteration.
    assert!(
        (p.loops[1].cycles_per_iteration - 3.0).abs() < 1e-9,
        "{p:?}"
    );
}

#[test]
fn a_nest_of_the_wrong_shape_is_refused_as_nest_mismatch() {
    let code = nested();
    for nest in [
        vec![trip("i", 10, 0)],
        vec![trip("i", 10, 0), trip("j", 100, 0)],
        vec![trip("i", 10, 0), trip("j", 100, 1), trip("k", 1, 2)],
    ] {
        let e = zen4(&code, &nest).unwrap_err();
        assert_eq!(e.name(), "nest-mismatch", "{e}");
        assert!(e.to_string().starts_with("nest-mismatch"));
    }
}

#[test]
fn a_zero_trip_guard_skips_the_inner_loop() {
    let p = zen4(&nested(), &[trip("i", 10, 0), trip("j", 0, 1)]).unwrap();
    assert_eq!(p.loops[1].entries, 0.0);
    assert_eq!(p.loops[1].cycles, 0.0);
    let p = zen4(&nested(), &[trip("i", 0, 0), trip("j", 100, 1)]).unwrap();
    assert_eq!(p.loops[0].iterations, 0.0);
    assert_eq!(p.loops[1].iterations, 0.0);
}

/// Two early outs (an empty range, a degenerate argument: each returns
/// without reaching a loop), then setup, then a loop with trips: the
/// geometry says the call has work, so the loop is priced in full, not at
/// the quarter two half-and-half splits would leave. An early out of a
/// loop whose trip count is zero still takes the loop's guard.
#[test]
fn early_outs_before_a_loop_that_runs_are_not_taken() {
    let code = x64(|a| {
        let mut exit = a.create_label();
        let mut top = a.create_label();
        a.cmp(rdi, rsi)?;
        a.jae(exit)?;
        a.test(rdx, rdx)?;
        a.je(exit)?;
        a.mov(rcx, rsi)?;
        a.sub(rcx, rdi)?;
        a.set_label(&mut top)?;
        a.vaddps(ymm0, ymm0, ymm1)?;
        a.dec(rcx)?;
        a.jne(top)?;
        a.set_label(&mut exit)?;
        a.ret()
    });
    let p = zen4(&code, &[trip("i", 100, 0)]).unwrap();
    assert_eq!(p.loops[0].entries, 1.0, "{p:?}");
    assert_eq!(p.loops[0].iterations, 100.0);
    let none = zen4(&code, &[trip("i", 0, 0)]).unwrap();
    assert_eq!(none.loops[0].iterations, 0.0);
}

#[test]
fn pricing_is_deterministic_bit_for_bit() {
    let code = nested();
    let nest = [trip("i", 37, 0), trip("j", 1001, 1)];
    let a = zen4(&code, &nest).unwrap();
    let b = zen4(&code, &nest).unwrap();
    assert_eq!(a.price.cycles.to_bits(), b.price.cycles.to_bits());
    assert_eq!(a, b);
}

proptest::proptest! {
    #[test]
    fn more_trips_never_price_lower(i in 0u64..200, j in 0u64..2000, more_i in 0u64..50, more_j in 0u64..500) {
        let code = nested();
        let a = zen4(&code, &[trip("i", i, 0), trip("j", j, 1)]).unwrap();
        let b = zen4(&code, &[trip("i", i + more_i, 0), trip("j", j + more_j, 1)]).unwrap();
        proptest::prop_assert!(b.price.cycles >= a.price.cycles);
    }
}

#[test]
fn a_loop_with_two_entries_is_refused_as_irreducible() {
    // if rdi { goto b } a: ...; b: ...; if rcx goto a
    let code = x64(|a| {
        let mut la = a.create_label();
        let mut lb = a.create_label();
        a.test(rdi, rdi)?;
        a.jne(lb)?;
        a.set_label(&mut la)?;
        a.add(rax, 1)?;
        a.set_label(&mut lb)?;
        a.add(rdx, 1)?;
        a.dec(rcx)?;
        a.jne(la)?;
        a.ret()
    });
    let e = zen4(&code, &[trip("l", 4, 0)]).unwrap_err();
    assert_eq!(e.name(), "irreducible", "{e}");
}

#[test]
fn code_that_is_not_a_leaf_cfg_is_refused_by_name() {
    let indirect = x64(|a| a.jmp(rax));
    assert_eq!(zen4(&indirect, &[]).unwrap_err().name(), "indirect-branch");
    let call = x64(|a| {
        let mut f = a.create_label();
        a.call(f)?;
        a.ret()?;
        a.set_label(&mut f)?;
        a.ret()
    });
    assert_eq!(zen4(&call, &[]).unwrap_err().name(), "call");
    let off_end = x64(|a| a.add(rax, 1));
    assert_eq!(zen4(&off_end, &[]).unwrap_err().name(), "falls-off-end");
    let empty = NativeCode {
        isa: Isa::X86_64,
        bytes: vec![],
        pool: None,
        loops: vec![],
    };
    assert_eq!(zen4(&empty, &[]).unwrap_err().name(), "empty-code");
    // 0x06 (push es) does not exist in 64-bit mode.
    let invalid = NativeCode {
        bytes: vec![0x06, 0xc3],
        ..empty.clone()
    };
    assert_eq!(zen4(&invalid, &[]).unwrap_err().name(), "undecodable");
    // jmp rel32 far past the end.
    let outside = NativeCode {
        bytes: vec![0xe9, 0x00, 0x10, 0x00, 0x00],
        ..empty.clone()
    };
    assert_eq!(
        zen4(&outside, &[]).unwrap_err().name(),
        "branch-outside-code"
    );
    let a64 = NativeCode {
        isa: Isa::Aarch64,
        bytes: vec![0xc0, 0x03, 0x5f, 0xd6],
        ..empty
    };
    assert_eq!(zen4(&a64, &[]).unwrap_err().name(), "wrong-isa");
}

/// A loop whose body skips a slow region when every lane passed a vector
/// test (`vptest` then `je`): the slow region is priced as never run.
#[test]
fn a_region_behind_an_all_lanes_test_is_rare() {
    let with_slow = |slow: bool| {
        x64(move |a| {
            let mut top = a.create_label();
            let mut join = a.create_label();
            a.set_label(&mut top)?;
            a.vaddpd(ymm0, ymm0, ymm1)?;
            a.vptest(ymm0, ymm2)?;
            a.je(join)?;
            if slow {
                for _ in 0..40 {
                    a.vdivpd(ymm3, ymm3, ymm4)?;
                }
            }
            a.set_label(&mut join)?;
            a.dec(rcx)?;
            a.jne(top)?;
            a.ret()
        })
    };
    let nest = [trip("l", 1000, 0)];
    let fast = zen4(&with_slow(false), &nest).unwrap();
    let slow = zen4(&with_slow(true), &nest).unwrap();
    assert_eq!(slow.rare_blocks, 1);
    assert_eq!(
        fast.loops[0].cycles_per_iteration,
        slow.loops[0].cycles_per_iteration
    );
}

/// An ordinary forward branch in a loop splits half and half.
#[test]
fn a_plain_forward_branch_is_taken_half_the_time() {
    let code = x64(|a| {
        let mut top = a.create_label();
        let mut join = a.create_label();
        a.set_label(&mut top)?;
        a.cmp(rdx, 3)?;
        a.jbe(join)?;
        for _ in 0..24 {
            a.vdivpd(ymm3, ymm3, ymm4)?;
        }
        a.set_label(&mut join)?;
        a.dec(rcx)?;
        a.jne(top)?;
        a.ret()
    });
    let p = zen4(&code, &[trip("l", 1000, 0)]).unwrap();
    let row = TableId::Zen4
        .table()
        .row(weft_cost::Class::FpDiv, weft_cost::Width::V256);
    let divider = row.usage[0].1;
    // Twelve divides an iteration on average, on one divider.
    assert!(
        (p.loops[0].cycles_per_iteration - 12.0 * divider).abs() < 1e-9,
        "{p:?}"
    );
}

/// A top-tested loop with a tail pass reached from its header: the tail
/// runs once per entry, the body once per iteration (the x64 elementwise
/// twins' shape).
#[test]
fn a_tail_reached_from_the_header_runs_once_per_entry() {
    let code = x64(|a| {
        let mut top = a.create_label();
        let mut body = a.create_label();
        let mut tail = a.create_label();
        let mut out = a.create_label();
        let mut exit = a.create_label();
        let mut copy = a.create_label();
        a.xor(edx, edx)?;
        a.set_label(&mut top)?;
        a.cmp(r10, 8)?;
        a.jb(tail)?;
        a.set_label(&mut body)?;
        for _ in 0..8 {
            a.vmulpd(ymm0, ymm0, ymm1)?;
        }
        a.test(rdx, rdx)?;
        a.jne(out)?;
        a.sub(r10, 8)?;
        a.jmp(top)?;
        a.set_label(&mut tail)?;
        a.test(r10, r10)?;
        a.je(exit)?;
        a.xor(ecx, ecx)?;
        a.set_label(&mut copy)?;
        a.inc(rcx)?;
        a.cmp(rcx, r10)?;
        a.jb(copy)?;
        a.mov(edx, 1)?;
        a.jmp(body)?;
        a.set_label(&mut out)?;
        a.nop()?;
        a.set_label(&mut exit)?;
        a.ret()
    });
    let p = zen4(&code, &[trip("steps", 100, 0), trip("copy", 5, 1)]).unwrap();
    assert_eq!(p.loops[0].iterations, 100.0);
    // The copy loop is entered once per entry of the step loop, not 100 times.
    assert!(p.loops[1].entries <= 1.0, "{p:?}");
    assert!(p.loops[1].entries > 0.0, "{p:?}");
}

mod a64 {
    use super::*;
    use weft_a64::*;

    fn code(
        build: impl FnOnce(&mut Assembler) -> Result<(), EncodeError>,
        pool: &[u32],
    ) -> NativeCode {
        let mut a = Assembler::new();
        build(&mut a).unwrap();
        let mut words = a.finish().unwrap();
        words.extend_from_slice(pool);
        NativeCode {
            isa: Isa::Aarch64,
            bytes: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
            pool: None,
            loops: Vec::new(),
        }
    }

    fn v2(code: &NativeCode, nest: &[LoopTrip]) -> Result<Priced, CostError> {
        CostModel::with_table(TableId::NeoverseV2).price(code, nest, &bare_offer(0, 0))
    }

    #[test]
    fn nested_a64_loops_and_a_trailing_pool_are_handled() {
        // The pool words after `ret` are not instructions (0xffffffff
        // decodes as nothing); traversal never reaches them.
        let c = code(
            |a| {
                let outer = a.new_label();
                let inner = a.new_label();
                a.bind(outer)?;
                a.mov(x(2), x(1))?;
                a.bind(inner)?;
                a.fadd(v(0).s4(), v(0).s4(), v(1).s4())?;
                a.subs(x(2), x(2), 1)?;
                a.b_cond(Cond::Ne, inner)?;
                a.subs(x(0), x(0), 1)?;
                a.b_cond(Cond::Ne, outer)?;
                a.ret()
            },
            &[0xffff_ffff, 0x0000_0000],
        );
        let p = v2(&c, &[trip("i", 4, 0), trip("j", 50, 1)]).unwrap();
        assert_eq!(p.unknown_instructions, 0);
        assert_eq!(p.loops[1].iterations, 200.0);
        // The fadd chain (2 cycles on Neoverse V2) bounds the inner loop.
        assert!(
            (p.loops[1].cycles_per_iteration - 2.0).abs() < 1e-9,
            "{p:?}"
        );
        let e = v2(&c, &[trip("i", 4, 0)]).unwrap_err();
        assert_eq!(e.name(), "nest-mismatch");
    }

    #[test]
    fn an_a64_word_no_form_decodes_is_counted_and_priced_conservatively() {
        // 0x6eb4a694 (umaxp v20.4s) is outside weft-a64's table.
        let plain = code(|a| a.ret(), &[]);
        let mut with_unknown = plain.clone();
        with_unknown.bytes = [0x6eb4_a694u32, 0xd65f_03c0]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let p0 = v2(&plain, &[]).unwrap();
        let p1 = v2(&with_unknown, &[]).unwrap();
        assert_eq!(p1.unknown_instructions, 1);
        assert!(p1.price.cycles > p0.price.cycles);
    }
}

/// One chain of `links` dependent `vaddps zmm` an iteration, started afresh
/// from zmm31 (iterations independent), as cost-calibrate's scheduler probe.
fn independent_chains(links: usize) -> NativeCode {
    x64(|a| {
        let mut top = a.create_label();
        a.set_label(&mut top)?;
        a.vmovaps(zmm0, zmm31)?;
        for _ in 0..links {
            a.vaddps(zmm0, zmm0, zmm30)?;
        }
        a.dec(rcx)?;
        a.jne(top)?;
        a.ret()
    })
}

#[test]
fn a_measured_scheduler_exposes_the_part_of_a_chain_it_cannot_hold() {
    let code = independent_chains(256);
    let nest = [trip("chain", 100, 0)];
    let zen5 = CostModel::with_table(TableId::Zen5);
    let s = zen5.table().unwrap().scheduler;
    assert!(s > 0.0, "the Zen 5 table states its measured scheduler");
    let priced = zen5.price(&code, &nest, &bare_offer(0, 0)).unwrap();
    let lp = &priced.loops[0];
    // 256 links of 2 cycles; 259 µops (with the move, dec and jne) of which
    // all but `s` wait for the chain.
    let want = 512.0 * (259.0 - s) / 259.0;
    assert!(
        (lp.cycles_per_iteration - want).abs() < 1e-6,
        "{} cycles, want {want}",
        lp.cycles_per_iteration
    );
    assert_eq!(lp.bound, weft_cost::Bound::Window);
    // Without the statement the reorder window alone hides the chain:
    // 448 / 259 iterations in flight, 512 · 259 / 448 cycles.
    let mut table = zen5.table().unwrap().clone();
    table.scheduler = 0.0;
    let bare = CostModel::with_port_table(Box::leak(Box::new(table)));
    let lp = &bare.price(&code, &nest, &bare_offer(0, 0)).unwrap().loops[0];
    assert!((lp.cycles_per_iteration - 512.0 * 259.0 / 448.0).abs() < 1e-6);
}
