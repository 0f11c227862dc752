//! The route a nest with `exp` takes to native code: a nest that is an
//! exp-based elementwise map over the layout of
//! [`MapArgs`](weft_elementwise::map::MapArgs) is read back as a
//! [`MapExpr`] and emitted by weft-elementwise's map lowerings, whose exp
//! is the correctly rounded one the arm calls (its steps recorded once,
//! never re-typed).
//!
//! One job: decide whether a nest is such a map and, if so, give the map.
//! Both native lowerings ([`crate::native_x64`], [`crate::native_a64`])
//! call [`exp_map`] first; a nest without `exp` goes their own way, and a
//! nest with `exp` that is not a map is refused by name.
//!
//! What a map is, here (anything else with `exp` is refused, never
//! approximated):
//!
//! - **The map's argument layout**: buffers `a` and `b` (f32, read) at
//!   offsets 0 and 8, `out` (f32, written) at 16, the `ExpTable` at 24 and
//!   the `Index` parameters `len`, `start`, `end` at 32, 40 and 48; the
//!   guards `start ≤ end` and `end ≤ len`, which a map body also checks
//!   (it does nothing otherwise). A nest without `b` is a one-stream map:
//!   its bodies never read offset 8.
//! - **One loop** from `start` to `end` whose body binds values (`Let`)
//!   and ends in one store `out[i] = e`, every load `a[i]` or `b[i]` of
//!   f32 (unit stride, no pair swap).
//! - **`e` in the map language**: constants, `−x`, `exp`, `⊕`, `⊗`, `⊘`,
//!   with exactly one `exp` after bound values are substituted. A bound
//!   value used twice is computed twice: the same operations on the same
//!   loaded bits, so the same bits.
//!
//! Why the bits are the arm's: the map's contract is one IEEE binary32
//! operation per node in the written order, no FMA, `−x` a sign flip,
//! `exp` the elementwise family's, which is exactly what the IR fixes
//! for these constructs (the interpreter is the definition); the map
//! bodies are judged against the arm like any twin.

use std::collections::HashMap;

use weft_elementwise::map::{ExpMap, MapExpr, MAP_ARGS_OFFSETS};

use crate::ir::{
    Affine, Binary, Elem, Expr, Extent, Guard, Kernel, Loop, Param, ParamId, ParamKind, Stmt,
    Storage, Unary, ValId, VarId,
};

/// Whether any expression of `kernel` takes an `exp`.
pub fn uses_exp(kernel: &Kernel) -> bool {
    fn expr(e: &Expr) -> bool {
        match e {
            Expr::Unary(Unary::Exp, _) => true,
            Expr::Unary(_, x) => expr(x),
            Expr::Binary(_, x, y) => expr(x) || expr(y),
            Expr::Load { .. } | Expr::Const(_) | Expr::Param(_) | Expr::Val(_) => false,
        }
    }
    fn stmts(body: &[Stmt]) -> bool {
        body.iter().any(|s| match s {
            Stmt::Loop(l) => stmts(&l.body),
            Stmt::Let { value, .. } | Stmt::Store { value, .. } => expr(value),
            Stmt::Reduce(r) => expr(&r.value) || stmts(&r.body),
            Stmt::Gather { .. } => false,
        })
    }
    stmts(&kernel.body)
}

/// The map `kernel` computes: `Ok(None)` when it takes no `exp` (the
/// lowerings' own way), `Ok(Some(map))` when it is an exp-based map, and
/// `Err(why)` when it takes an `exp` but is not a map this route serves.
pub fn exp_map(kernel: &Kernel) -> Result<Option<ExpMap>, String> {
    if !uses_exp(kernel) {
        return Ok(None);
    }
    let roles = Roles::of(kernel)?;
    let wants = [
        Guard::SumLe(vec![Extent::Param(roles.start)], Extent::Param(roles.end)),
        Guard::SumLe(vec![Extent::Param(roles.end)], Extent::Param(roles.len)),
    ];
    if kernel.guards[..] != wants[..] {
        return Err("a map's guards are start <= end and end <= len, nothing else".into());
    }
    let [Stmt::Loop(l)] = &kernel.body[..] else {
        return Err("a map is one loop".into());
    };
    if l.start != Extent::Param(roles.start) || l.end != Extent::Param(roles.end) {
        return Err(format!(
            "the map's loop `{}` runs from start to end",
            l.name
        ));
    }
    let Some((Stmt::Store { buf, at, value }, lets)) = l.body.split_last() else {
        return Err("a map's loop ends in its store".into());
    };
    let unit = Affine::var(l.var);
    if *buf != roles.out || *at != unit {
        return Err("a map stores out[i] and nothing else".into());
    }
    let mut bound: HashMap<ValId, MapExpr> = HashMap::new();
    let translate = |e: &Expr, bound: &HashMap<ValId, MapExpr>| roles.expr(e, &unit, bound);
    for s in lets {
        let Stmt::Let { val, value } = s else {
            return Err("a map's loop binds values, then stores once".into());
        };
        let v = translate(value, &bound)?;
        bound.insert(*val, v);
    }
    let expr = translate(value, &bound)?;
    ExpMap::new(expr).map(Some).map_err(|e| e.to_string())
}

/// The parameters in their map roles.
struct Roles {
    a: ParamId,
    b: Option<ParamId>,
    out: ParamId,
    len: ParamId,
    start: ParamId,
    end: ParamId,
}

impl Roles {
    /// Every parameter must sit at its role's offset with its role's kind.
    fn of(kernel: &Kernel) -> Result<Roles, String> {
        let [a, b, out, table, len, start, end] = MAP_ARGS_OFFSETS.map(|o| o as u32);
        let mut found: [Option<ParamId>; 7] = [None; 7];
        for (i, p) in kernel.params.iter().enumerate() {
            let id = ParamId(i as u16);
            let read = ParamKind::Buffer {
                storage: Storage::F32,
                written: false,
            };
            let slot = match (p.offset, p.kind) {
                (o, k) if o == a && k == read => 0,
                (o, k) if o == b && k == read => 1,
                (
                    o,
                    ParamKind::Buffer {
                        storage: Storage::F32,
                        written: true,
                    },
                ) if o == out => 2,
                (o, ParamKind::ExpTable) if o == table => 3,
                (o, ParamKind::Index) if o == len => 4,
                (o, ParamKind::Index) if o == start => 5,
                (o, ParamKind::Index) if o == end => 6,
                _ => {
                    return Err(format!(
                        "parameter `{}` at offset {} is not a field of the map's arguments",
                        p.name, p.offset
                    ))
                }
            };
            if found[slot].replace(id).is_some() {
                return Err(format!("two parameters at offset {}", p.offset));
            }
        }
        let need = |slot: usize, what: &str| {
            found[slot].ok_or_else(|| format!("a map has {what}; this nest has none"))
        };
        need(3, "an exp table")?;
        Ok(Roles {
            a: need(0, "an input `a` at offset 0")?,
            b: found[1],
            out: need(2, "an output at offset 16")?,
            len: need(4, "`len` at offset 32")?,
            start: need(5, "`start` at offset 40")?,
            end: need(6, "`end` at offset 48")?,
        })
    }

    /// `e` in the map language, values substituted.
    fn expr(
        &self,
        e: &Expr,
        unit: &Affine,
        bound: &HashMap<ValId, MapExpr>,
    ) -> Result<MapExpr, String> {
        let go = |x: &Expr| self.expr(x, unit, bound);
        Ok(match e {
            Expr::Load {
                buf,
                elem: Elem::F32,
                at,
                swap_pairs: false,
            } if at == unit => {
                if *buf == self.a {
                    MapExpr::a()
                } else if Some(*buf) == self.b {
                    MapExpr::b()
                } else {
                    return Err("a map reads a[i] and b[i] only".into());
                }
            }
            Expr::Load { .. } => return Err("a map reads a[i] and b[i] only".into()),
            Expr::Const(bits) => MapExpr::c(f32::from_bits(*bits)),
            Expr::Val(v) => bound
                .get(v)
                .cloned()
                .ok_or_else(|| format!("value {} is not bound in the loop", v.0))?,
            Expr::Unary(Unary::Neg, x) => -go(x)?,
            Expr::Unary(Unary::Exp, x) => go(x)?.exp(),
            Expr::Binary(Binary::Add, x, y) => go(x)?.plus(go(y)?),
            Expr::Binary(Binary::Mul, x, y) => go(x)?.times(go(y)?),
            Expr::Binary(Binary::Div, x, y) => go(x)?.over(go(y)?),
            Expr::Param(_) => return Err("a map has no scalar parameters".into()),
            Expr::Unary(op, _) => return Err(format!("{op:?} is not in the map language")),
            Expr::Binary(op, _, _) => return Err(format!("{op:?} is not in the map language")),
        })
    }
}

/// The exp nest, `y[i] = exp(x[i])` for `i` in `start..end`, in the map's
/// layout (`x` at `a`'s offset, no `b`): what `cargo xtask bench loopnest`
/// lowers to set the generated exp beside weft-elementwise's hand twin
/// (`exp_generated_vs_hand`), and what the tests route.
pub fn exp_nest() -> Kernel {
    let p = |name, offset: usize, kind| Param {
        name,
        offset: offset as u32,
        kind,
    };
    let [a, _, out, table, len, start, end] = MAP_ARGS_OFFSETS;
    let buf = |written| ParamKind::Buffer {
        storage: Storage::F32,
        written,
    };
    let i = VarId(0);
    Kernel {
        name: "exp".into(),
        params: vec![
            p("x", a, buf(false)),
            p("y", out, buf(true)),
            p("table", table, ParamKind::ExpTable),
            p("len", len, ParamKind::Index),
            p("start", start, ParamKind::Index),
            p("end", end, ParamKind::Index),
        ],
        guards: vec![
            Guard::SumLe(vec![Extent::Param(ParamId(4))], Extent::Param(ParamId(5))),
            Guard::SumLe(vec![Extent::Param(ParamId(5))], Extent::Param(ParamId(3))),
        ],
        body: vec![Stmt::Loop(Loop {
            name: "elements",
            var: i,
            start: Extent::Param(ParamId(4)),
            end: Extent::Param(ParamId(5)),
            width: 4,
            granule: 1,
            body: vec![Stmt::Store {
                buf: ParamId(1),
                at: Affine::var(i),
                value: Expr::load_f32(ParamId(0), Affine::var(i)).unary(Unary::Exp),
            }],
        })],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::NestOp;
    use crate::SiluMul;

    #[test]
    fn the_silu_mul_nest_reads_back_as_its_contracts_formula() {
        let nest = SiluMul::new(64).unwrap().nest();
        let map = exp_map(&nest).unwrap().expect("a map");
        // The contract: e = exp(−g), s = g ⊘ (1 ⊕ e), h = s ⊗ u.
        let g = MapExpr::a;
        let want = g()
            .over(MapExpr::c(1.0).plus((-g()).exp()))
            .times(MapExpr::b());
        assert_eq!(map.expr(), &want);
    }

    /// The host's lowerings of the exp nest.
    fn exp_bodies() -> Vec<(String, weft_kernel::NativeCode)> {
        let host = weft_kernel::Host::detect();
        let mut out = Vec::new();
        #[cfg(target_arch = "x86_64")]
        for tier in [
            crate::native_x64::Tier::Avx512,
            crate::native_x64::Tier::Avx2,
        ] {
            if weft_kernel::require_features(&host, tier.requires()).is_ok() {
                let code = crate::native_x64::emit(&exp_nest(), tier, weft_x64::Abi::host())
                    .expect("the exp nest lowers");
                out.push((format!("{tier:?}"), code));
            }
        }
        #[cfg(target_arch = "aarch64")]
        if weft_kernel::require_features(&host, crate::native_a64::REQUIRES).is_ok() {
            let code = crate::native_a64::emit(&exp_nest()).expect("the exp nest lowers");
            out.push(("neon".to_owned(), code));
        }
        out
    }

    #[test]
    fn the_generated_exp_is_the_correctly_rounded_exp_in_every_tail() {
        use weft_elementwise::map::MapArgs;
        let mut x: Vec<f32> = [
            0.0f32,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::from_bits(0xffa0_0001),
            f32::from_bits(1),
            f32::MIN_POSITIVE,
            88.72283,
            88.72284,
            -103.97208,
            -103.97209,
            -87.33655,
            f32::MAX,
        ]
        .to_vec();
        let mut s = 0x9e37_79b9u32;
        while x.len() < 100 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            x.push(f32::from_bits(s));
        }
        let bodies = exp_bodies();
        assert!(
            !bodies.is_empty() || cfg!(not(any(target_arch = "x86_64", target_arch = "aarch64")))
        );
        for (what, code) in &bodies {
            // SAFETY: a map body honours the leaf ABI for `MapArgs` (the
            // map contract); every call passes `len` live f32s.
            let k = unsafe { weft_kernel::Kernel::<MapArgs>::from_native(code) }.expect("places");
            for start in [0usize, 1, 3] {
                for end in start..=x.len() {
                    let mut y = vec![-7.0f32; x.len()];
                    let args = MapArgs {
                        a: x.as_ptr(),
                        b: std::ptr::null(),
                        out: y.as_mut_ptr(),
                        table: weft_libm::ELEMENTWISE_TABLE.as_ptr(),
                        len: x.len(),
                        start,
                        end,
                    };
                    // SAFETY: as above; a one-stream map never reads `b`.
                    unsafe { k.call(&args) };
                    for i in 0..x.len() {
                        let want = if (start..end).contains(&i) {
                            weft_libm::reference::exp_f32(x[i])
                        } else {
                            -7.0
                        };
                        let same =
                            y[i].to_bits() == want.to_bits() || (y[i].is_nan() && want.is_nan());
                        assert!(
                            same,
                            "{what} {start}..{end} [{i}]: exp({:#010x}) gave {:#010x}, want {:#010x}",
                            x[i].to_bits(),
                            y[i].to_bits(),
                            want.to_bits()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_one_stream_exp_nest_is_a_map_of_a_alone() {
        let map = exp_map(&exp_nest()).unwrap().expect("a map");
        assert_eq!(map.expr(), &MapExpr::a().exp());
    }

    #[test]
    fn nests_without_exp_take_the_lowerings_own_way() {
        let mut nest = exp_nest();
        let Stmt::Loop(l) = &mut nest.body[0] else {
            unreachable!()
        };
        let Stmt::Store { value, .. } = &mut l.body[0] else {
            unreachable!()
        };
        *value = Expr::load_f32(ParamId(0), Affine::var(VarId(0))).unary(Unary::Neg);
        assert!(exp_map(&nest).unwrap().is_none());
    }

    #[test]
    fn nests_with_exp_that_are_not_maps_are_refused_by_name() {
        let edit = |f: &dyn Fn(&mut Kernel)| {
            let mut k = exp_nest();
            f(&mut k);
            exp_map(&k).expect_err("refused")
        };
        let store = |k: &mut Kernel, v: Expr| {
            let Stmt::Loop(l) = &mut k.body[0] else {
                unreachable!()
            };
            let Stmt::Store { value, .. } = &mut l.body[0] else {
                unreachable!()
            };
            *value = v;
        };
        let x = || Expr::load_f32(ParamId(0), Affine::var(VarId(0)));
        // Two exps.
        let why = edit(&|k| store(k, x().unary(Unary::Exp).unary(Unary::Exp)));
        assert!(why.contains("exp"), "{why}");
        // A subtraction, a square root: outside the map language.
        let why = edit(&|k| {
            store(
                k,
                Expr::Binary(Binary::Sub, Box::new(x().unary(Unary::Exp)), Box::new(x())),
            )
        });
        assert!(why.contains("Sub"), "{why}");
        let why = edit(&|k| store(k, x().unary(Unary::Sqrt).unary(Unary::Exp)));
        assert!(why.contains("Sqrt"), "{why}");
        // A neighbour's element.
        let why = edit(&|k| {
            store(
                k,
                Expr::load_f32(ParamId(0), Affine::var(VarId(0)).plus(1)).unary(Unary::Exp),
            )
        });
        assert!(why.contains("a[i]"), "{why}");
        // A field where the map's arguments have none, missing guards.
        let why = edit(&|k| k.params[0].offset = 4);
        assert!(why.contains("offset"), "{why}");
        let why = edit(&|k| {
            k.guards.pop();
        });
        assert!(why.contains("guards"), "{why}");
    }
}
