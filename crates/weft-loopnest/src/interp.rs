//! The scalar interpreter: the reference every lowering is checked against.
//!
//! It runs a checked [`Kernel`] on owned buffers, one element at a time, in
//! exactly the order the IR's semantics fix (see [`crate::ir`]): guards,
//! statements in order, innermost loops by tiles of `granule` iterations
//! whose loads see memory as of the tile's start, reductions lane by lane
//! then [`Fold::Halving`]. f32 arithmetic is Rust's (IEEE binary32, round
//! to nearest even, never fused); `exp` is the elementwise family's
//! correctly rounded reference. Every access is bounds-checked and an
//! access outside a buffer is an [`IrError::OutOfBounds`], never a panic.

use weft_libm::reference::exp_f32;

use crate::ir::{
    f16_bits_to_f32, Affine, Binary, Elem, Expr, Extent, Fold, Guard, IrError, Kernel, Loop,
    ParamId, ParamKind, Reduce, ReduceOp, Stmt, Storage, Term, Unary, ValId, VarId,
};

/// A buffer argument, owned.
#[derive(Clone, Debug, PartialEq)]
pub enum Buffer {
    /// f32 elements.
    F32(Vec<f32>),
    /// u32 elements.
    U32(Vec<u32>),
    /// Raw bytes.
    Bytes(Vec<u8>),
}

impl Buffer {
    fn storage(&self) -> Storage {
        match self {
            Buffer::F32(_) => Storage::F32,
            Buffer::U32(_) => Storage::U32,
            Buffer::Bytes(_) => Storage::Bytes,
        }
    }

    /// Length in elements of `elem`.
    fn len_as(&self, elem: Elem) -> u64 {
        let bytes = match self {
            Buffer::F32(v) => v.len() * 4,
            Buffer::U32(v) => v.len() * 4,
            Buffer::Bytes(v) => v.len(),
        } as u64;
        bytes / elem.size()
    }
}

/// One argument, matching one [`crate::ir::Param`].
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// For a `Buffer` parameter.
    Buffer(Buffer),
    /// For an `Index` parameter.
    Index(u64),
    /// For an `F32` parameter.
    F32(f32),
    /// For the `ExpTable` parameter (the interpreter calls the reference).
    ExpTable,
}

impl Arg {
    /// The f32 buffer's contents, if this is one.
    pub fn f32s(&self) -> Option<&[f32]> {
        match self {
            Arg::Buffer(Buffer::F32(v)) => Some(v),
            _ => None,
        }
    }

    /// The u32 buffer's contents, if this is one.
    pub fn u32s(&self) -> Option<&[u32]> {
        match self {
            Arg::Buffer(Buffer::U32(v)) => Some(v),
            _ => None,
        }
    }
}

/// A value: one f32 or one i32.
#[derive(Clone, Copy, Debug, PartialEq)]
enum V {
    F(f32),
    I(i32),
}

impl V {
    fn f(self) -> f32 {
        match self {
            V::F(x) => x,
            V::I(i) => f32::from_bits(i as u32),
        }
    }
    fn i(self) -> i32 {
        match self {
            V::I(i) => i,
            V::F(x) => x.to_bits() as i32,
        }
    }
}

/// A deferred store of a tile.
struct Pending {
    buf: ParamId,
    index: u64,
    value: V,
}

/// Whether the rest of a body runs.
#[derive(PartialEq)]
enum Flow {
    Next,
    Skip,
}

struct Machine<'k, 'a> {
    k: &'k Kernel,
    args: &'a mut [Arg],
    vars: Vec<Option<u64>>,
    vals: Vec<Option<V>>,
}

/// Run `kernel` on `args` (one per parameter, in order). Checks the kernel
/// first; a binding of the wrong kind or an out-of-bounds access is an
/// error (the buffers may then be partly written).
pub fn run(kernel: &Kernel, args: &mut [Arg]) -> Result<(), IrError> {
    kernel.check()?;
    if args.len() != kernel.params.len() {
        return Err(IrError::Binding(format!(
            "{} arguments for {} parameters",
            args.len(),
            kernel.params.len()
        )));
    }
    for (p, a) in kernel.params.iter().zip(args.iter()) {
        let ok = match (p.kind, a) {
            (ParamKind::Buffer { storage, .. }, Arg::Buffer(b)) => b.storage() == storage,
            (ParamKind::Index, Arg::Index(_))
            | (ParamKind::F32, Arg::F32(_))
            | (ParamKind::ExpTable, Arg::ExpTable) => true,
            _ => false,
        };
        if !ok {
            return Err(IrError::Binding(format!("`{}` bound to {a:?}", p.name)));
        }
    }
    let mut m = Machine {
        k: kernel,
        args,
        vars: Vec::new(),
        vals: Vec::new(),
    };
    for g in &kernel.guards {
        if !m.guard(g) {
            return Ok(());
        }
    }
    m.body(&kernel.body)?;
    Ok(())
}

impl Machine<'_, '_> {
    fn index_arg(&self, p: ParamId) -> u64 {
        match self.args[usize::from(p.0)] {
            Arg::Index(v) => v,
            _ => unreachable!("checked: Index parameters are bound to Index"),
        }
    }

    fn extent(&self, e: Extent) -> u64 {
        match e {
            Extent::Const(c) => c,
            Extent::Param(p) => self.index_arg(p),
        }
    }

    fn guard(&self, g: &Guard) -> bool {
        match g {
            Guard::SumLe(terms, limit) => {
                let sum: u128 = terms.iter().map(|t| u128::from(self.extent(*t))).sum();
                sum <= u128::from(self.extent(*limit))
            }
            Guard::Eq(a, b) => self.extent(*a) == self.extent(*b),
        }
    }

    fn var(&self, v: VarId) -> u64 {
        self.vars
            .get(usize::from(v.0))
            .copied()
            .flatten()
            .expect("checked: variables are in scope")
    }

    fn set_var(&mut self, v: VarId, x: u64) {
        let i = usize::from(v.0);
        if self.vars.len() <= i {
            self.vars.resize(i + 1, None);
        }
        self.vars[i] = Some(x);
    }

    fn set_val(&mut self, v: ValId, x: V) {
        let i = usize::from(v.0);
        if self.vals.len() <= i {
            self.vals.resize(i + 1, None);
        }
        self.vals[i] = Some(x);
    }

    fn affine(&self, a: &Affine) -> i128 {
        let mut s = i128::from(a.constant);
        for (c, t) in &a.terms {
            let v = match t {
                Term::Var(v) => self.var(*v),
                Term::Param(p) => self.index_arg(*p),
            };
            s += i128::from(*c) * i128::from(v);
        }
        s
    }

    fn buffer(&self, p: ParamId) -> &Buffer {
        match &self.args[usize::from(p.0)] {
            Arg::Buffer(b) => b,
            _ => unreachable!("checked: buffer parameters are bound to buffers"),
        }
    }

    fn in_bounds(&self, p: ParamId, elem: Elem, index: i128) -> Result<u64, IrError> {
        let len = self.buffer(p).len_as(elem);
        if index < 0 || index >= i128::from(len) {
            return Err(IrError::OutOfBounds {
                buffer: self.k.params[usize::from(p.0)].name,
                index,
                len,
            });
        }
        Ok(index as u64)
    }

    fn load(&self, p: ParamId, elem: Elem, index: i128) -> Result<V, IrError> {
        let i = self.in_bounds(p, elem, index)? as usize;
        Ok(match (self.buffer(p), elem) {
            (Buffer::F32(v), Elem::F32) => V::F(v[i]),
            (Buffer::U32(v), Elem::U32) => V::I(v[i] as i32),
            (Buffer::Bytes(v), Elem::I8) => V::I(i32::from(v[i] as i8)),
            (Buffer::Bytes(v), Elem::U16) => {
                V::I(i32::from(u16::from_le_bytes([v[2 * i], v[2 * i + 1]])))
            }
            _ => unreachable!("checked: loads read what their buffer holds"),
        })
    }

    fn store(&mut self, p: ParamId, index: u64, value: V) {
        match &mut self.args[usize::from(p.0)] {
            Arg::Buffer(Buffer::F32(v)) => v[index as usize] = value.f(),
            Arg::Buffer(Buffer::U32(v)) => v[index as usize] = value.i() as u32,
            _ => unreachable!("checked: stores go to f32 or u32 buffers"),
        }
    }

    fn store_index(&self, p: ParamId, at: &Affine) -> Result<u64, IrError> {
        let elem = match self.buffer(p) {
            Buffer::U32(_) => Elem::U32,
            _ => Elem::F32,
        };
        self.in_bounds(p, elem, self.affine(at))
    }

    fn eval(&self, e: &Expr) -> Result<V, IrError> {
        Ok(match e {
            Expr::Load {
                buf,
                elem,
                at,
                swap_pairs,
            } => {
                let mut i = self.affine(at);
                if *swap_pairs {
                    i ^= 1;
                }
                self.load(*buf, *elem, i)?
            }
            Expr::Const(bits) => V::F(f32::from_bits(*bits)),
            Expr::Param(p) => match self.args[usize::from(p.0)] {
                Arg::F32(x) => V::F(x),
                _ => unreachable!("checked: F32 parameters are bound to F32"),
            },
            Expr::Val(v) => self.vals[usize::from(v.0)].expect("checked: values are bound"),
            Expr::Unary(op, x) => {
                let x = self.eval(x)?;
                V::F(match op {
                    Unary::Neg => -x.f(),
                    Unary::Sqrt => x.f().sqrt(),
                    Unary::Exp => exp_f32(x.f()),
                    Unary::IntToF32 => x.i() as f32,
                    Unary::F16ToF32 => f16_bits_to_f32(x.i() as u32),
                })
            }
            Expr::Binary(op, a, b) => {
                let (a, b) = (self.eval(a)?.f(), self.eval(b)?.f());
                V::F(match op {
                    Binary::Add => a + b,
                    Binary::Sub => a - b,
                    Binary::Mul => a * b,
                    Binary::Div => a / b,
                })
            }
        })
    }

    fn body(&mut self, body: &[Stmt]) -> Result<Flow, IrError> {
        for s in body {
            match s {
                Stmt::Loop(l) => self.run_loop(l)?,
                Stmt::Let { val, value } => {
                    let v = self.eval(value)?;
                    self.set_val(*val, v);
                }
                Stmt::Store { buf, at, value } => {
                    let v = self.eval(value)?;
                    let i = self.store_index(*buf, at)?;
                    self.store(*buf, i, v);
                }
                Stmt::Reduce(r) => self.reduce(r)?,
                Stmt::Gather {
                    var,
                    buf,
                    at,
                    below,
                } => {
                    let id = self.load(*buf, Elem::U32, self.affine(at))?.i() as u32;
                    if u64::from(id) >= self.extent(*below) {
                        return Ok(Flow::Skip);
                    }
                    self.set_var(*var, u64::from(id));
                }
            }
        }
        Ok(Flow::Next)
    }

    fn run_loop(&mut self, l: &Loop) -> Result<(), IrError> {
        let (start, end) = (self.extent(l.start), self.extent(l.end));
        let innermost = l
            .body
            .iter()
            .all(|s| matches!(s, Stmt::Let { .. } | Stmt::Store { .. }));
        if !innermost {
            for i in start..end {
                self.set_var(l.var, i);
                self.body(&l.body)?;
            }
            return Ok(());
        }
        let g = u64::from(l.granule);
        let mut tile = start;
        while tile < end {
            let mut pending = Vec::new();
            for i in tile..(tile + g).min(end) {
                self.set_var(l.var, i);
                for s in &l.body {
                    match s {
                        Stmt::Let { val, value } => {
                            let v = self.eval(value)?;
                            self.set_val(*val, v);
                        }
                        Stmt::Store { buf, at, value } => {
                            let value = self.eval(value)?;
                            let index = self.store_index(*buf, at)?;
                            pending.push(Pending {
                                buf: *buf,
                                index,
                                value,
                            });
                        }
                        _ => unreachable!("innermost"),
                    }
                }
            }
            for p in pending {
                self.store(p.buf, p.index, p.value);
            }
            tile += g;
        }
        Ok(())
    }

    fn reduce(&mut self, r: &Reduce) -> Result<(), IrError> {
        let lanes = r.lanes as usize;
        let result = match r.op {
            ReduceOp::Sum => {
                let mut acc = vec![0f32; lanes];
                for i in r.start..r.end {
                    self.set_var(r.var, i);
                    self.body(&r.body)?;
                    let v = self.eval(&r.value)?.f();
                    let l = ((i - r.start) % r.lanes as u64) as usize;
                    acc[l] += v;
                }
                match r.fold {
                    Fold::Halving => {
                        let mut n = lanes;
                        while n > 1 {
                            for l in 0..n / 2 {
                                acc[l] += acc[l + n / 2];
                            }
                            n /= 2;
                        }
                    }
                }
                V::F(acc[0])
            }
            ReduceOp::ArgMax => {
                let mut acc: Vec<(f32, u64)> = (0..lanes as u64)
                    .map(|l| (f32::NEG_INFINITY, r.start + l))
                    .collect();
                for i in r.start..r.end {
                    self.set_var(r.var, i);
                    self.body(&r.body)?;
                    let v = self.eval(&r.value)?.f();
                    let l = ((i - r.start) % r.lanes as u64) as usize;
                    acc[l] = argmax_combine(acc[l], (v, i));
                }
                match r.fold {
                    Fold::Halving => {
                        let mut n = lanes;
                        while n > 1 {
                            for l in 0..n / 2 {
                                acc[l] = argmax_combine(acc[l], acc[l + n / 2]);
                            }
                            n /= 2;
                        }
                    }
                }
                V::I(acc[0].1 as i32)
            }
        };
        self.set_val(r.result, result);
        Ok(())
    }
}

/// [`ReduceOp::ArgMax`]'s combine: `b` wins if it ranks higher (NaN above
/// every number) or ranks the same with a smaller index.
pub fn argmax_combine(a: (f32, u64), b: (f32, u64)) -> (f32, u64) {
    let higher = b.0 > a.0 || (b.0.is_nan() && !a.0.is_nan());
    let same = b.0 == a.0 || (b.0.is_nan() && a.0.is_nan());
    if higher || (same && b.1 < a.1) {
        b
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Param, Storage};

    fn sum_kernel(n: u64, lanes: u32) -> Kernel {
        Kernel {
            name: "sum".into(),
            params: vec![
                Param {
                    name: "x",
                    offset: 0,
                    kind: ParamKind::Buffer {
                        storage: Storage::F32,
                        written: false,
                    },
                },
                Param {
                    name: "out",
                    offset: 8,
                    kind: ParamKind::Buffer {
                        storage: Storage::F32,
                        written: true,
                    },
                },
            ],
            guards: vec![],
            body: vec![
                Stmt::Reduce(Reduce {
                    result: ValId(0),
                    op: ReduceOp::Sum,
                    name: "i",
                    var: VarId(0),
                    start: 0,
                    end: n,
                    width: 1,
                    lanes,
                    fold: Fold::Halving,
                    body: Vec::new(),
                    value: Expr::load_f32(ParamId(0), Affine::var(VarId(0))),
                }),
                Stmt::Store {
                    buf: ParamId(1),
                    at: Affine::constant(0),
                    value: Expr::Val(ValId(0)),
                },
            ],
        }
    }

    #[test]
    fn sum_follows_the_declared_lanes_and_fold() {
        // 1e8 + 1 - 1e8 ... depends on the order: check against the
        // order written out by hand for 4 lanes over 6 elements.
        let x = [1e8f32, 1.0, -1e8, 3.0, 0.5, 0.25];
        let mut args = vec![
            Arg::Buffer(Buffer::F32(x.to_vec())),
            Arg::Buffer(Buffer::F32(vec![0.0])),
        ];
        run(&sum_kernel(6, 4), &mut args).expect("runs");
        let lanes = [x[0] + x[4], x[1] + x[5], x[2], x[3]];
        let want = (lanes[0] + lanes[2]) + (lanes[1] + lanes[3]);
        assert_eq!(args[1].f32s().unwrap()[0].to_bits(), want.to_bits());
        let mut seq = vec![
            Arg::Buffer(Buffer::F32(x.to_vec())),
            Arg::Buffer(Buffer::F32(vec![0.0])),
        ];
        run(&sum_kernel(6, 1), &mut seq).expect("runs");
        let s = x.iter().fold(0f32, |a, v| a + v);
        assert_eq!(seq[1].f32s().unwrap()[0].to_bits(), s.to_bits());
    }

    #[test]
    fn out_of_bounds_is_an_error_not_a_panic() {
        let mut args = vec![
            Arg::Buffer(Buffer::F32(vec![1.0; 3])),
            Arg::Buffer(Buffer::F32(vec![0.0])),
        ];
        let e = run(&sum_kernel(4, 1), &mut args).unwrap_err();
        assert_eq!(
            e,
            IrError::OutOfBounds {
                buffer: "x",
                index: 3,
                len: 3
            }
        );
    }

    #[test]
    fn wrong_bindings_are_refused() {
        let mut args = vec![Arg::Index(3), Arg::Buffer(Buffer::F32(vec![0.0]))];
        assert!(matches!(
            run(&sum_kernel(1, 1), &mut args),
            Err(IrError::Binding(_))
        ));
    }

    #[test]
    fn argmax_combine_takes_first_of_max_and_first_nan() {
        let c = argmax_combine;
        assert_eq!(c((1.0, 3), (2.0, 5)), (2.0, 5));
        assert_eq!(c((2.0, 3), (2.0, 1)), (2.0, 1));
        assert_eq!(c((2.0, 1), (2.0, 3)), (2.0, 1));
        assert_eq!(c((0.0, 4), (-0.0, 2)).1, 2);
        assert_eq!(c((f32::INFINITY, 0), (f32::NAN, 7)).1, 7);
        assert_eq!(c((f32::NAN, 9), (f32::NAN, 7)).1, 7);
        assert_eq!(c((f32::NAN, 2), (f32::INFINITY, 1)).1, 2);
    }
}
