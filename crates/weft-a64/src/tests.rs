use super::*;

#[test]
fn table_is_indexed_by_op() {
    for (i, f) in FORMS.iter().enumerate() {
        assert_eq!(f.op as usize, i, "{}", f.name);
    }
}

#[test]
fn variant_bits_never_overlap_operand_fields() {
    for f in FORMS {
        for v in f.variants {
            assert_eq!(v.bits & !f.fixed_mask(), 0, "{}", f.name);
            assert_eq!(
                f.base & !f.fixed_mask(),
                0,
                "{} base has field bits",
                f.name
            );
        }
    }
}

#[test]
fn at_least_150_forms() {
    assert!(FORMS.len() >= 150, "{}", FORMS.len());
}

#[test]
fn out_of_range_immediates_are_errors_not_truncation() {
    assert!(matches!(
        Inst::new(Op::ADD_IMM_X, (x(0), x(1), 4096)),
        Err(EncodeError::ImmOutOfRange { .. })
    ));
    assert!(matches!(
        Inst::new(Op::LDR_X_UOFF, (x(0), mem(x(1)).off(4))),
        Err(EncodeError::Misaligned { .. })
    ));
    assert!(matches!(
        Inst::new(Op::LDR_X_UOFF, (x(0), mem(x(1)).off(32768))),
        Err(EncodeError::ImmOutOfRange { .. })
    ));
    assert!(matches!(
        Inst::new(Op::EXT_V, (v(0).b8(), v(1).b8(), v(2).b8(), 8)),
        Err(EncodeError::ImmOutOfRange { .. })
    ));
    assert!(matches!(
        Inst::new(Op::AND_IMM_X, (x(0), x(1), 0)),
        Err(EncodeError::NotABitmask { .. })
    ));
}

#[test]
fn unallocated_arrangements_are_errors() {
    assert!(matches!(
        Inst::new(Op::FADD_V, (v(0).b8(), v(1).b8(), v(2).b8())),
        Err(EncodeError::Arrangement { .. })
    ));
    assert!(matches!(
        Inst::new(Op::MUL_V, (v(0).d2(), v(1).d2(), v(2).d2())),
        Err(EncodeError::Arrangement { .. })
    ));
    assert!(matches!(
        Inst::new(Op::FADD_V, (v(0).s4(), v(1).s2(), v(2).s4())),
        Err(EncodeError::Arrangement { .. })
    ));
}

#[test]
fn register_class_mix_ups_are_errors() {
    assert!(matches!(
        Inst::new(Op::ADD_IMM_X, (w(0), x(1), 1)),
        Err(EncodeError::RegisterClass { slot: 0, .. })
    ));
    assert!(matches!(
        Inst::new(Op::ADD_SREG_X, (x(0), SP, x(2))),
        Err(EncodeError::RegisterClass { slot: 1, .. })
    ));
    assert!(matches!(
        Inst::new(Op::ADD_IMM_X, (XZR, x(1), 1)),
        Err(EncodeError::RegisterClass { .. })
    ));
    assert!(matches!(
        Inst::new(Op::FADD_S, (d(0), s(1), s(2))),
        Err(EncodeError::RegisterClass { .. })
    ));
    assert!(matches!(
        Inst::new(Op::LDR_X_UOFF, (x(0), mem(w(1)))),
        Err(EncodeError::RegisterClass { .. })
    ));
}

#[test]
fn ldp_with_equal_registers_is_an_error() {
    assert!(matches!(
        Inst::new(Op::LDP_X_OFF, (x(1), x(1), mem(SP))),
        Err(EncodeError::LdpSameRegisters { .. })
    ));
    assert!(Inst::new(Op::STP_X_OFF, (x(1), x(1), mem(SP))).is_ok());
}

#[test]
fn writeback_into_a_transfer_register_is_an_error() {
    assert!(matches!(
        Inst::new(Op::LDR_X_POST, (x(1), mem(x(1)).post(8))),
        Err(EncodeError::WritebackOverlap { .. })
    ));
    assert!(Inst::new(Op::LDR_X_POST, (x(1), mem(SP).post(8))).is_ok());
}

#[test]
fn sp_and_zr_stay_distinct() {
    let mov_sp = Inst::new(Op::ADD_IMM_X, (SP, x(1), 0)).unwrap();
    assert_eq!(mov_sp.to_string(), "mov sp, x1");
    let cmp = Inst::new(Op::SUBS_IMM_X, (XZR, x(1), 4)).unwrap();
    assert_eq!(cmp.to_string(), "cmp x1, #4");
    assert_eq!(cmp.encode(), Ok(0xf100103f));
}

#[test]
fn labels_resolve_forward_and_backward() {
    let mut a = Assembler::new();
    let back = a.new_label();
    let fwd = a.new_label();
    a.bind(back).unwrap();
    a.cbz(x(0), fwd).unwrap();
    a.nop().unwrap();
    a.b(back).unwrap();
    a.bind(fwd).unwrap();
    a.ret().unwrap();
    let w = a.finish().unwrap();
    assert_eq!(decode(w[0]).unwrap().to_string(), "cbz x0, #12");
    assert_eq!(decode(w[2]).unwrap().to_string(), "b #-8");
    assert_eq!(w[3], 0xd65f03c0);
}

#[test]
fn out_of_range_branch_is_an_error_at_finish() {
    let mut a = Assembler::new();
    let far = a.new_label();
    a.tbz(x(0), 40, far).unwrap();
    for _ in 0..(1 << 13) {
        a.nop().unwrap();
    }
    a.bind(far).unwrap();
    assert!(matches!(
        a.finish(),
        Err(EncodeError::BranchOutOfRange { .. })
    ));
}

#[test]
fn unbound_and_rebound_labels_are_errors() {
    let mut a = Assembler::new();
    let l = a.new_label();
    a.b(l).unwrap();
    assert_eq!(a.finish(), Err(EncodeError::UnresolvedLabel));
    let mut a = Assembler::new();
    let l = a.new_label();
    a.bind(l).unwrap();
    assert_eq!(a.bind(l), Err(EncodeError::LabelRebound));
}

#[test]
fn mov_picks_the_encoding_llvm_would() {
    let mut a = Assembler::new();
    a.mov(x(0), x(1)).unwrap();
    a.mov(x(0), SP).unwrap();
    a.mov(x(0), 0x10000i64).unwrap();
    a.mov(x(0), -1i64).unwrap();
    a.mov(x(0), 0x5555_5555_5555_5555u64).unwrap();
    a.mov(v(0).b16(), v(1).b16()).unwrap();
    a.mov(v(0).s(1), w(2)).unwrap();
    a.mov(s(0), w(3)).unwrap();
    let text: Vec<String> = a
        .finish()
        .unwrap()
        .iter()
        .map(|w| decode(*w).unwrap().to_string())
        .collect();
    assert_eq!(
        text,
        [
            "mov x0, x1",
            "mov x0, sp",
            "mov x0, #65536",
            "mov x0, #-1",
            "mov x0, #6148914691236517205",
            "mov v0.16b, v1.16b",
            "mov v0.s[1], w2",
            "fmov s0, w3",
        ]
    );
}

#[test]
fn bitmask_immediates_round_trip() {
    let mut n = 0;
    for f in 0..(1u32 << 13) {
        if let Some(v) = decode_bitmask(f, true) {
            let e = encode_bitmask(v, true).unwrap();
            assert_eq!(decode_bitmask(e, true), Some(v));
            n += 1;
        }
    }
    assert_eq!(encode_bitmask(0xff, true), Some(0x1007));
    assert!(n >= 5334);
}

#[test]
fn neon_kernel_path_encodes_like_llvm() {
    // Words from llvm-mc 14 -show-encoding.
    let cases: [(Inst, u32); 6] = [
        (
            Inst::with_mnemonic("ld1", (v(0).list(1, Arr::S4), mem(x(0)).post(16))).unwrap(),
            0x4cdf7800,
        ),
        (
            Inst::with_mnemonic("fmla", (v(0).s4(), v(1).s4(), v(2).s(3))).unwrap(),
            0x4fa21820,
        ),
        (
            Inst::with_mnemonic("sdot", (v(0).s4(), v(1).b16(), v(2).b4(3))).unwrap(),
            0x4fa2e820,
        ),
        (
            Inst::with_mnemonic("dup", (v(0).s4(), v(1).s(1))).unwrap(),
            0x4e0c0420,
        ),
        (
            Inst::with_mnemonic("movz", (x(0), 1, 16)).unwrap(),
            0xd2a00020,
        ),
        (
            Inst::with_mnemonic("ldp", (x(0), x(1), mem(SP).pre(-16))).unwrap(),
            0xa9ff07e0,
        ),
    ];
    for (i, w) in cases {
        assert_eq!(i.encode(), Ok(w), "{i}");
    }
}

#[test]
fn unknown_words_decode_to_none() {
    assert_eq!(decode(0), None);
    assert_eq!(decode(0xffff_ffff), None);
}

#[test]
fn kernel_helpers_pick_the_right_forms() {
    let mut a = Assembler::new();
    a.mul(x(0), x(1), x(2)).unwrap();
    a.mul(v(0).s4(), v(1).s4(), v(2).s4()).unwrap();
    a.neg(x(0), x(1)).unwrap();
    a.cmp(w(3), 7).unwrap();
    a.tst(x(1), 0xff).unwrap();
    a.cset(w(0), Cond::Eq).unwrap();
    a.sxtl(v(0).h8(), v(1).b8()).unwrap();
    a.ldr(x(0), mem(x(1)).off(-8)).unwrap();
    a.ldr(q(0), mem(x(1)).off(32)).unwrap();
    a.add(x(0), SP, x(2)).unwrap();
    a.lsl(x(0), x(1), 3).unwrap();
    a.lsl(x(0), x(1), x(2)).unwrap();
    a.fmla(v(0).s4(), v(1).s4(), v(2).s(3)).unwrap();
    a.ld1(v(0).s(1), mem(x(0)).post(4)).unwrap();
    let text: Vec<String> = a
        .finish()
        .unwrap()
        .iter()
        .map(|w| decode(*w).unwrap().to_string())
        .collect();
    assert_eq!(
        text,
        [
            "mul x0, x1, x2",
            "mul v0.4s, v1.4s, v2.4s",
            "neg x0, x1",
            "cmp w3, #7",
            "tst x1, #0xff",
            "cset w0, eq",
            "sshll v0.8h, v1.8b, #0",
            "ldur x0, [x1, #-8]",
            "ldr q0, [x1, #32]",
            "add x0, sp, x2",
            "lsl x0, x1, #3",
            "lsl x0, x1, x2",
            "fmla v0.4s, v1.4s, v2.s[3]",
            "ld1 { v0.s }[1], [x0], #4",
        ]
    );
}

#[test]
fn forms_are_tagged_with_the_feature_they_need() {
    let f = |op: Op| FORMS[op as usize].feature;
    assert_eq!(f(Op::SDOT_ELEM), Feature::Dotprod);
    assert_eq!(f(Op::USDOT_V), Feature::I8mm);
    assert_eq!(f(Op::SMMLA), Feature::I8mm);
    assert_eq!(f(Op::BFMMLA), Feature::Bf16);
    assert_eq!(f(Op::FADD_VH), Feature::Fp16);
    assert_eq!(f(Op::FCVTL), Feature::Base);
    assert_eq!(
        Inst::new(Op::FMLA_V, (v(0).s4(), v(1).s4(), v(2).s4()))
            .unwrap()
            .feature(),
        Feature::Base
    );
}

#[test]
fn fp_immediates_are_checked() {
    assert_eq!(fimm(1.0), Some(Operand::FImm(0x70)));
    assert_eq!(fimm(0.1), None);
    let i = Inst::new(Op::FMOV_S_IMM, (s(0), fimm(-0.125).unwrap())).unwrap();
    assert_eq!(i.to_string(), "fmov s0, #-0.12500000");
    assert_eq!(i.encode(), Ok(0x1e381000));
}
