//! The loop-nest IR: what a generated kernel does, with nothing about how
//! a backend does it.
//!
//! A [`Kernel`] is an argument-struct layout ([`Param`]s at byte offsets),
//! entry [`Guard`]s, and a body of [`Stmt`]s: [`Loop`]s with explicit
//! extents, vector width and granule; [`Reduce`]s with explicit lanes and
//! fold; `Let` bindings; `Store`s; and `Gather`s that bind an index read
//! from memory. Indices are [`Affine`] in loop variables and integer
//! parameters. Values are 32-bit lanes, f32 or i32 ([`Ty`]). There are no
//! Cranelift types here, so a native emitter can lower the same kernel.
//!
//! # Semantics (what [`crate::interp`] implements and every lowering keeps)
//!
//! - **Guards.** Before anything else, every guard is evaluated on the
//!   arguments; if one fails the kernel returns having touched nothing.
//! - **Statements** run in order. A `Store` in a body that holds loops or
//!   reductions (an *outer* body) writes at once.
//! - **Innermost loops** (bodies of only `Let` and `Store`) run in *tiles*
//!   of `granule` consecutive iterations from `start`: every load of a tile
//!   sees memory as it was when the tile began, and the tile's stores land
//!   at its end. [`Kernel::check`] only admits innermost loops where this
//!   is equivalent to running `width` iterations at once (each stored
//!   buffer is loaded only at the store's own index, or at its pair
//!   partner under [`Expr::Load::swap_pairs`] with an even granule, and
//!   never after the store), which is what lets a lowering use vectors.
//! - **`Gather`** reads a `u32` from a buffer; if it is not below its bound
//!   the rest of the enclosing body is skipped for this iteration (at top
//!   level: the kernel returns), otherwise the value is bound to a
//!   variable usable in later indices.
//! - **Fusion** builds one kernel from several: [`sequence`] runs nests in
//!   order over one argument struct (their guards all checked on entry,
//!   their variables and values renumbered apart, their statements
//!   untouched); [`inline_producer`] replaces a buffer's loads by the
//!   expression that produced them; [`materialise`] binds such an
//!   expression once per element of a loop or a reduction, reads it where
//!   the element reads the buffer, and stores it there. Each
//!   keeps every element's operations and their order, so a fused kernel
//!   computes its chain's bits.
//! - **`Reduce`** over `start..end` (static): for each element its
//!   `body` (`Let`s and `Store`s under an innermost loop's rules: a pass
//!   that writes as it reduces) runs first, then its value goes to lane
//!   `(i - start) % lanes`, combined left to right per lane
//!   (`lane = lane ⊕ value`), lanes starting at the operation's identity;
//!   then [`Fold::Halving`]. Arithmetic is IEEE binary32, round to nearest
//!   even, no fused multiply-add anywhere.

use std::collections::HashSet;

use thiserror::Error;

/// A field of the argument struct (index into [`Kernel::params`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParamId(pub u16);

/// A loop variable or a gathered index: a pointer-width unsigned integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarId(pub u16);

/// A value bound by `Let` or `Reduce`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValId(pub u16);

/// What a buffer holds, as the argument struct's pointer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Storage {
    /// `f32` elements.
    F32,
    /// `u32` elements (token ids, argmax results).
    U32,
    /// Raw bytes read as [`Elem::I8`] and [`Elem::U16`] (Q8_0 blocks).
    Bytes,
}

/// What one load reads; indices count in units of its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    /// An `f32` (from [`Storage::F32`]), giving an f32.
    F32,
    /// A `u32` (from [`Storage::U32`]), giving its bits as an i32.
    U32,
    /// An `i8` (from [`Storage::Bytes`]), sign-extended to i32.
    I8,
    /// A little-endian `u16` (from [`Storage::Bytes`]), zero-extended to i32.
    U16,
}

impl Elem {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            Elem::F32 | Elem::U32 => 4,
            Elem::I8 => 1,
            Elem::U16 => 2,
        }
    }

    /// The type of the loaded value.
    pub fn ty(self) -> Ty {
        match self {
            Elem::F32 => Ty::F32,
            _ => Ty::I32,
        }
    }

    /// Whether a buffer of `storage` may be read as this element.
    pub fn reads(self, storage: Storage) -> bool {
        matches!(
            (self, storage),
            (Elem::F32, Storage::F32)
                | (Elem::U32, Storage::U32)
                | (Elem::I8 | Elem::U16, Storage::Bytes)
        )
    }
}

/// The type of a value: one 32-bit lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    /// IEEE binary32.
    F32,
    /// Two's-complement 32-bit integer.
    I32,
}

/// What a parameter is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// A pointer to a buffer; `written` if the kernel may store through it.
    Buffer {
        /// What it holds.
        storage: Storage,
        /// Whether stores go through it.
        written: bool,
    },
    /// A `usize` (extent, range bound, position).
    Index,
    /// An `f32` scalar (eps).
    F32,
    /// A pointer that must be `weft_libm::ELEMENTWISE_TABLE`
    /// (exp reads its constants through it, so code needs no relocations).
    ExpTable,
}

/// One field of the argument struct: its name, byte offset and kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Param {
    /// The field's name.
    pub name: &'static str,
    /// Its byte offset in the `#[repr(C)]` struct.
    pub offset: u32,
    /// What it is.
    pub kind: ParamKind,
}

/// A loop bound: a constant from the geometry, or an `Index` parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Extent {
    /// Known when the kernel is built.
    Const(u64),
    /// Read from the arguments at each call.
    Param(ParamId),
}

/// What an affine index is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Term {
    /// A loop variable or gathered index.
    Var(VarId),
    /// An `Index` parameter.
    Param(ParamId),
}

/// `Σ coefficient · term + constant`, in elements of the access.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Affine {
    /// The terms with their coefficients.
    pub terms: Vec<(i64, Term)>,
    /// The constant offset.
    pub constant: i64,
}

impl Affine {
    /// The index `v`.
    pub fn var(v: VarId) -> Self {
        Self::default().plus_var(1, v)
    }

    /// The constant index `c`.
    pub fn constant(c: i64) -> Self {
        Self {
            terms: Vec::new(),
            constant: c,
        }
    }

    /// This index plus `c · v`.
    pub fn plus_var(mut self, c: i64, v: VarId) -> Self {
        self.terms.push((c, Term::Var(v)));
        self
    }

    /// This index plus `c · p`.
    pub fn plus_param(mut self, c: i64, p: ParamId) -> Self {
        self.terms.push((c, Term::Param(p)));
        self
    }

    /// This index plus `c`.
    pub fn plus(mut self, c: i64) -> Self {
        self.constant += c;
        self
    }

    /// The summed coefficient of `v`.
    pub fn coefficient(&self, v: VarId) -> i64 {
        self.terms
            .iter()
            .filter(|(_, t)| *t == Term::Var(v))
            .map(|(c, _)| *c)
            .sum()
    }
}

/// One-operand operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unary {
    /// `-x` (flips the sign bit, NaN included).
    Neg,
    /// IEEE square root, correctly rounded.
    Sqrt,
    /// `e^x` correctly rounded (the elementwise family's algorithm).
    Exp,
    /// i32 → f32, round to nearest even.
    IntToF32,
    /// The low 16 bits of an i32 as binary16 → f32, exact; NaNs keep their
    /// payload (shifted) and are not quietened.
    F16ToF32,
}

/// Two-operand f32 operations, each one IEEE rounding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Binary {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
}

/// An expression: a tree of loads, constants and operations.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Expr {
    /// Element `at` (or `at ^ 1` when `swap_pairs`) of buffer `buf`.
    Load {
        /// The buffer parameter.
        buf: ParamId,
        /// What is read.
        elem: Elem,
        /// Where, in units of `elem`.
        at: Affine,
        /// Read the other element of the pair (`index ^ 1`).
        swap_pairs: bool,
    },
    /// An f32 constant, by bits.
    Const(u32),
    /// An `F32` parameter.
    Param(ParamId),
    /// A bound value.
    Val(ValId),
    /// A one-operand operation.
    Unary(Unary, Box<Expr>),
    /// A two-operand operation.
    Binary(Binary, Box<Expr>, Box<Expr>),
}

impl Expr {
    /// `buf[at]` as f32.
    pub fn load_f32(buf: ParamId, at: Affine) -> Self {
        Expr::Load {
            buf,
            elem: Elem::F32,
            at,
            swap_pairs: false,
        }
    }

    /// `buf[at]` read as `elem`.
    pub fn load(buf: ParamId, elem: Elem, at: Affine) -> Self {
        Expr::Load {
            buf,
            elem,
            at,
            swap_pairs: false,
        }
    }

    /// The f32 constant `v`.
    pub fn f32(v: f32) -> Self {
        Expr::Const(v.to_bits())
    }

    /// `self + o`.
    pub fn plus(self, o: Expr) -> Self {
        Expr::Binary(Binary::Add, Box::new(self), Box::new(o))
    }

    /// `self - o`.
    pub fn minus(self, o: Expr) -> Self {
        Expr::Binary(Binary::Sub, Box::new(self), Box::new(o))
    }

    /// `self * o`.
    pub fn times(self, o: Expr) -> Self {
        Expr::Binary(Binary::Mul, Box::new(self), Box::new(o))
    }

    /// `self / o`.
    pub fn over(self, o: Expr) -> Self {
        Expr::Binary(Binary::Div, Box::new(self), Box::new(o))
    }

    /// `op(self)`.
    pub fn unary(self, op: Unary) -> Self {
        Expr::Unary(op, Box::new(self))
    }
}

/// How a reduction combines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// f32 sum; identity `+0.0`; `lane = lane + value`.
    Sum,
    /// Index of the maximum: each lane holds `(value, index)`, starting at
    /// `(-inf, start + lane)`. `b` replaces `a` when `b` ranks higher
    /// (NaN ranks above every number, numbers by IEEE order, `-0 == +0`)
    /// or ranks the same with a smaller index. The result is the first
    /// index of the highest-ranked value (the first NaN if there is one),
    /// whatever the lanes, so any lane count gives the same answer.
    ArgMax,
}

/// How the lanes of a reduction are folded into one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fold {
    /// `n = lanes`; while `n > 1`: `lane[l] = lane[l] ⊕ lane[l + n/2]` for
    /// `l < n/2`, then `n /= 2`. For 16 lanes held as four f32x4
    /// `a0..a3`: `(a0 ⊕ a2) ⊕ (a1 ⊕ a3)`, then lanes `(0 ⊕ 2) ⊕ (1 ⊕ 3)`.
    Halving,
}

/// A reduction over `start..end` (static extents) of one expression.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reduce {
    /// Where the result is bound (f32 for `Sum`, the index as i32 for `ArgMax`).
    pub result: ValId,
    /// How values combine.
    pub op: ReduceOp,
    /// The loop's name (for [`Kernel::loop_trips`]).
    pub name: &'static str,
    /// The reduction variable.
    pub var: VarId,
    /// First index.
    pub start: u64,
    /// One past the last index.
    pub end: u64,
    /// Elements a step (1 or a power of two dividing `lanes`).
    pub width: u32,
    /// Accumulator lanes (a power of two).
    pub lanes: u32,
    /// How lanes fold.
    pub fold: Fold,
    /// Statements run for each element before its value is taken: only
    /// `Let` and `Store`, under an innermost loop's rules (each buffer
    /// stored once, at the element's own index with stride 1, and loaded
    /// only at that index and not after the store). Empty for a plain
    /// reduction; a fused kernel writes a producer's result out here, in
    /// the reduction's own pass. Its `Let`s may be used by `value`.
    pub body: Vec<Stmt>,
    /// The value of element `var`.
    pub value: Expr,
}

/// A counted loop `var = start, start+1, …, end-1`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Loop {
    /// The loop's name (for [`Kernel::loop_trips`]).
    pub name: &'static str,
    /// The loop variable.
    pub var: VarId,
    /// First value.
    pub start: Extent,
    /// One past the last value.
    pub end: Extent,
    /// Iterations a vector step (1, or a power of two for innermost loops).
    pub width: u32,
    /// Iterations a tile; divides `width`, and `end - start` must be a
    /// multiple of it (checked when both are constants; a granule above 1
    /// needs constant extents).
    pub granule: u32,
    /// The body.
    pub body: Vec<Stmt>,
}

/// A statement.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Stmt {
    /// A loop.
    Loop(Loop),
    /// Bind `val` to the value of an expression.
    Let {
        /// The bound value.
        val: ValId,
        /// Its expression.
        value: Expr,
    },
    /// `buf[at] = value` (f32 buffers take f32, u32 buffers an i32's bits).
    Store {
        /// The buffer parameter.
        buf: ParamId,
        /// Where, in elements.
        at: Affine,
        /// What.
        value: Expr,
    },
    /// A reduction.
    Reduce(Reduce),
    /// `var = buf[at]` (a `u32`); skip the rest of the body unless `var < below`.
    Gather {
        /// The bound variable.
        var: VarId,
        /// A `u32` buffer.
        buf: ParamId,
        /// Where.
        at: Affine,
        /// Exclusive upper bound.
        below: Extent,
    },
}

/// A condition on the arguments checked on entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Guard {
    /// The sum of the terms is at most the limit (no overflow).
    SumLe(Vec<Extent>, Extent),
    /// Two extents are equal.
    Eq(Extent, Extent),
}

/// A generated kernel: its argument layout, entry guards and body.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Kernel {
    /// Its name (the CLIF function's name).
    pub name: String,
    /// The argument struct's fields.
    pub params: Vec<Param>,
    /// Entry conditions.
    pub guards: Vec<Guard>,
    /// The body.
    pub body: Vec<Stmt>,
}

/// Why a kernel is not well formed, or could not run or lower.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum IrError {
    /// A parameter id that does not exist.
    #[error("unknown-param: {0:?}")]
    UnknownParam(ParamId),
    /// A parameter used as something it is not.
    #[error("param-kind: `{name}` is not {wanted}")]
    ParamKind {
        /// The parameter.
        name: &'static str,
        /// What the use needs.
        wanted: &'static str,
    },
    /// Two parameters overlap, or one is misaligned.
    #[error("param-layout: `{0}` overlaps another field or is misaligned")]
    ParamLayout(&'static str),
    /// A variable used outside its scope or bound twice.
    #[error("var-scope: {0:?}")]
    VarScope(VarId),
    /// A value used before it is bound, or bound twice.
    #[error("val-scope: {0:?}")]
    ValScope(ValId),
    /// An operation applied to the wrong type.
    #[error("type: {0}")]
    Type(String),
    /// A load of an element its buffer does not hold.
    #[error("elem: `{buffer}` cannot be read as {elem:?}")]
    Elem {
        /// The buffer.
        buffer: &'static str,
        /// The element asked for.
        elem: Elem,
    },
    /// A loop or reduction the lowering cannot vectorise as declared.
    #[error("not-vectorisable: {0}")]
    NotVectorisable(String),
    /// A store and a load that could see each other within a tile.
    #[error("hazard: {0}")]
    Hazard(String),
    /// A loop or reduction with impossible extents, lanes or granule.
    #[error("shape: {0}")]
    Shape(String),
    /// The interpreter was given arguments that do not match the params.
    #[error("binding: {0}")]
    Binding(String),
    /// The interpreter found an access outside its buffer.
    #[error("out-of-bounds: `{buffer}`[{index}] with {len} elements")]
    OutOfBounds {
        /// The buffer.
        buffer: &'static str,
        /// The index.
        index: i128,
        /// Its length in elements of the access.
        len: u64,
    },
}

/// What the checker learned, for lowerings.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// Whether any expression uses `exp`.
    pub uses_exp: bool,
    /// The `ExpTable` parameter, if any.
    pub exp_table: Option<ParamId>,
}

impl Kernel {
    /// The parameter `p`.
    pub fn param(&self, p: ParamId) -> Result<&Param, IrError> {
        self.params
            .get(usize::from(p.0))
            .ok_or(IrError::UnknownParam(p))
    }

    fn want(&self, p: ParamId, ok: bool, wanted: &'static str) -> Result<(), IrError> {
        if ok {
            Ok(())
        } else {
            Err(IrError::ParamKind {
                name: self.param(p)?.name,
                wanted,
            })
        }
    }

    fn index_param(&self, p: ParamId) -> Result<(), IrError> {
        let k = self.param(p)?.kind;
        self.want(p, k == ParamKind::Index, "an Index")
    }

    fn extent(&self, e: Extent) -> Result<(), IrError> {
        match e {
            Extent::Const(_) => Ok(()),
            Extent::Param(p) => self.index_param(p),
        }
    }

    /// Check that the kernel is well formed and that every innermost loop
    /// may run `width` iterations at once (see the module docs).
    pub fn check(&self) -> Result<Facts, IrError> {
        let mut facts = Facts::default();
        let mut spans: Vec<(u32, u32, &'static str)> = Vec::new();
        for (i, p) in self.params.iter().enumerate() {
            let size = match p.kind {
                ParamKind::F32 => 4,
                _ => 8,
            };
            if p.offset % size != 0 {
                return Err(IrError::ParamLayout(p.name));
            }
            spans.push((p.offset, p.offset + size, p.name));
            if p.kind == ParamKind::ExpTable {
                if facts.exp_table.is_some() {
                    return Err(IrError::ParamLayout(p.name));
                }
                facts.exp_table = Some(ParamId(i as u16));
            }
        }
        spans.sort();
        for w in spans.windows(2) {
            if w[1].0 < w[0].1 {
                return Err(IrError::ParamLayout(w[1].2));
            }
        }
        for g in &self.guards {
            match g {
                Guard::SumLe(terms, limit) => {
                    for t in terms {
                        self.extent(*t)?;
                    }
                    self.extent(*limit)?;
                }
                Guard::Eq(a, b) => {
                    self.extent(*a)?;
                    self.extent(*b)?;
                }
            }
        }
        let mut scope = Scope::default();
        self.check_body(&self.body, &mut scope, &mut facts)?;
        if facts.uses_exp && facts.exp_table.is_none() {
            return Err(IrError::ParamKind {
                name: "exp",
                wanted: "paired with an ExpTable parameter",
            });
        }
        Ok(facts)
    }

    fn check_affine(&self, a: &Affine, scope: &Scope) -> Result<(), IrError> {
        for (_, t) in &a.terms {
            match t {
                Term::Var(v) => {
                    if !scope.vars.contains(v) {
                        return Err(IrError::VarScope(*v));
                    }
                }
                Term::Param(p) => self.index_param(*p)?,
            }
        }
        Ok(())
    }

    fn check_expr(&self, e: &Expr, scope: &Scope, facts: &mut Facts) -> Result<Ty, IrError> {
        Ok(match e {
            Expr::Load { buf, elem, at, .. } => {
                let p = self.param(*buf)?;
                let ParamKind::Buffer { storage, .. } = p.kind else {
                    return Err(IrError::ParamKind {
                        name: p.name,
                        wanted: "a Buffer",
                    });
                };
                if !elem.reads(storage) {
                    return Err(IrError::Elem {
                        buffer: p.name,
                        elem: *elem,
                    });
                }
                self.check_affine(at, scope)?;
                elem.ty()
            }
            Expr::Const(_) => Ty::F32,
            Expr::Param(p) => {
                let k = self.param(*p)?.kind;
                self.want(*p, k == ParamKind::F32, "an F32")?;
                Ty::F32
            }
            Expr::Val(v) => *scope.vals.get(v).ok_or(IrError::ValScope(*v))?,
            Expr::Unary(op, x) => {
                let t = self.check_expr(x, scope, facts)?;
                let (want, out) = match op {
                    Unary::Neg | Unary::Sqrt | Unary::Exp => (Ty::F32, Ty::F32),
                    Unary::IntToF32 | Unary::F16ToF32 => (Ty::I32, Ty::F32),
                };
                if t != want {
                    return Err(IrError::Type(format!("{op:?} of {t:?}")));
                }
                if *op == Unary::Exp {
                    facts.uses_exp = true;
                }
                out
            }
            Expr::Binary(op, a, b) => {
                let ta = self.check_expr(a, scope, facts)?;
                let tb = self.check_expr(b, scope, facts)?;
                if ta != Ty::F32 || tb != Ty::F32 {
                    return Err(IrError::Type(format!("{op:?} of {ta:?}, {tb:?}")));
                }
                Ty::F32
            }
        })
    }

    fn check_body(
        &self,
        body: &[Stmt],
        scope: &mut Scope,
        facts: &mut Facts,
    ) -> Result<(), IrError> {
        // Names bound in this body go out of scope at its end.
        let (vars_before, vals_before) = (scope.vars.clone(), scope.vals.clone());
        for s in body {
            match s {
                Stmt::Loop(l) => {
                    self.extent(l.start)?;
                    self.extent(l.end)?;
                    if !scope.bound_vars.insert(l.var) {
                        return Err(IrError::VarScope(l.var));
                    }
                    scope.vars.insert(l.var);
                    self.check_body(&l.body, scope, facts)?;
                    scope.vars.remove(&l.var);
                    self.check_loop_shape(l)?;
                }
                Stmt::Let { val, value } => {
                    let t = self.check_expr(value, scope, facts)?;
                    if !scope.bound_vals.insert(*val) {
                        return Err(IrError::ValScope(*val));
                    }
                    scope.vals.insert(*val, t);
                }
                Stmt::Store { buf, at, value } => {
                    self.check_store(*buf, at, value, scope, facts)?;
                }
                Stmt::Reduce(r) => {
                    if !scope.bound_vars.insert(r.var) {
                        return Err(IrError::VarScope(r.var));
                    }
                    self.check_reduce_shape(r)?;
                    scope.vars.insert(r.var);
                    let vals_outside = scope.vals.clone();
                    for s in &r.body {
                        match s {
                            Stmt::Let { val, value } => {
                                let t = self.check_expr(value, scope, facts)?;
                                if !scope.bound_vals.insert(*val) {
                                    return Err(IrError::ValScope(*val));
                                }
                                scope.vals.insert(*val, t);
                            }
                            Stmt::Store { buf, at, value } => {
                                self.check_store(*buf, at, value, scope, facts)?;
                            }
                            _ => {
                                return Err(IrError::Shape(format!(
                                    "reduce `{}`: its body holds only Let and Store",
                                    r.name
                                )))
                            }
                        }
                    }
                    let t = self.check_expr(&r.value, scope, facts)?;
                    if !r.body.is_empty() {
                        // The body and the value, one element a step, under
                        // an innermost loop's hazard and vector rules.
                        self.check_tile(&Loop {
                            name: r.name,
                            var: r.var,
                            start: Extent::Const(r.start),
                            end: Extent::Const(r.end),
                            width: r.width,
                            granule: 1,
                            body: r
                                .body
                                .iter()
                                .cloned()
                                .chain([Stmt::Let {
                                    val: r.result,
                                    value: r.value.clone(),
                                }])
                                .collect(),
                        })?;
                    }
                    scope.vals = vals_outside;
                    scope.vars.remove(&r.var);
                    if t != Ty::F32 {
                        return Err(IrError::Type(format!("reduce of {t:?}")));
                    }
                    if r.width > 1 {
                        vector_loads(&r.value, r.var, r.name)?;
                    }
                    if !scope.bound_vals.insert(r.result) {
                        return Err(IrError::ValScope(r.result));
                    }
                    let out = match r.op {
                        ReduceOp::Sum => Ty::F32,
                        ReduceOp::ArgMax => Ty::I32,
                    };
                    scope.vals.insert(r.result, out);
                }
                Stmt::Gather {
                    var,
                    buf,
                    at,
                    below,
                } => {
                    let p = self.param(*buf)?;
                    self.want(
                        *buf,
                        matches!(
                            p.kind,
                            ParamKind::Buffer {
                                storage: Storage::U32,
                                ..
                            }
                        ),
                        "a u32 Buffer",
                    )?;
                    self.check_affine(at, scope)?;
                    self.extent(*below)?;
                    if !scope.bound_vars.insert(*var) {
                        return Err(IrError::VarScope(*var));
                    }
                    scope.vars.insert(*var);
                }
            }
        }
        scope.vars = vars_before;
        scope.vals = vals_before;
        Ok(())
    }

    fn check_store(
        &self,
        buf: ParamId,
        at: &Affine,
        value: &Expr,
        scope: &Scope,
        facts: &mut Facts,
    ) -> Result<(), IrError> {
        let p = self.param(buf)?;
        let want = match p.kind {
            ParamKind::Buffer {
                storage: Storage::F32,
                written: true,
            } => Ty::F32,
            ParamKind::Buffer {
                storage: Storage::U32,
                written: true,
            } => Ty::I32,
            _ => {
                return Err(IrError::ParamKind {
                    name: p.name,
                    wanted: "a written f32 or u32 Buffer",
                })
            }
        };
        self.check_affine(at, scope)?;
        let t = self.check_expr(value, scope, facts)?;
        if t != want {
            return Err(IrError::Type(format!("store of {t:?} into `{}`", p.name)));
        }
        Ok(())
    }

    fn check_loop_shape(&self, l: &Loop) -> Result<(), IrError> {
        let shape = |m: String| IrError::Shape(format!("loop `{}`: {m}", l.name));
        if !l.width.is_power_of_two() || !l.granule.is_power_of_two() {
            return Err(shape("width and granule must be powers of two".into()));
        }
        if l.granule > l.width.max(1) && l.width > 1 {
            return Err(shape("granule must divide width".into()));
        }
        let innermost = l
            .body
            .iter()
            .all(|s| matches!(s, Stmt::Let { .. } | Stmt::Store { .. }));
        if !innermost && (l.width > 1 || l.granule > 1) {
            return Err(shape("only innermost loops have width or granule".into()));
        }
        if let (Extent::Const(a), Extent::Const(b)) = (l.start, l.end) {
            if a > b || (b - a) % u64::from(l.granule) != 0 {
                return Err(shape(format!(
                    "{a}..{b} is not a whole number of granules of {}",
                    l.granule
                )));
            }
        } else if l.granule > 1 {
            return Err(shape("a granule above 1 needs constant extents".into()));
        }
        if innermost {
            self.check_tile(l)?;
        }
        Ok(())
    }

    fn check_reduce_shape(&self, r: &Reduce) -> Result<(), IrError> {
        let shape = |m: String| IrError::Shape(format!("reduce `{}`: {m}", r.name));
        if !r.lanes.is_power_of_two()
            || !r.width.is_power_of_two()
            || !r.lanes.is_multiple_of(r.width)
        {
            return Err(shape(
                "lanes and width: powers of two, width divides lanes".into(),
            ));
        }
        if r.start > r.end {
            return Err(shape("start after end".into()));
        }
        if r.op == ReduceOp::ArgMax && (r.start == r.end || r.end > i32::MAX as u64) {
            return Err(shape("argmax needs 1..=2^31-1 elements".into()));
        }
        Ok(())
    }

    /// The hazard and vector rules of an innermost loop (module docs).
    fn check_tile(&self, l: &Loop) -> Result<(), IrError> {
        let name = |b: ParamId| self.param(b).map(|p| p.name);
        // Every store: its statement, buffer and index; one per buffer.
        let mut stores: Vec<(usize, ParamId, &Affine)> = Vec::new();
        for (n, s) in l.body.iter().enumerate() {
            if let Stmt::Store { buf, at, .. } = s {
                if stores.iter().any(|(_, b, _)| b == buf) {
                    return Err(IrError::Hazard(format!(
                        "loop `{}` stores `{}` twice",
                        l.name,
                        name(*buf)?
                    )));
                }
                if at.coefficient(l.var) != 1 {
                    return Err(IrError::Hazard(format!(
                        "loop `{}` stores `{}` with a stride other than 1",
                        l.name,
                        name(*buf)?
                    )));
                }
                stores.push((n, *buf, at));
            }
        }
        for (n, s) in l.body.iter().enumerate() {
            let value = match s {
                Stmt::Let { value, .. } | Stmt::Store { value, .. } => value,
                _ => unreachable!("innermost bodies hold only Let and Store"),
            };
            let mut loads = Vec::new();
            collect_loads(value, &mut loads);
            for (buf, at, swap) in loads {
                if let Some((sn, _, sat)) = stores.iter().find(|(_, b, _)| *b == buf) {
                    // A stored buffer is read only at the stored element
                    // (or its pair partner), and never after the store.
                    if n > *sn || at != *sat || (swap && !l.granule.is_multiple_of(2)) {
                        return Err(IrError::Hazard(format!(
                            "loop `{}` loads `{}` away from, or after, the element it stores",
                            l.name,
                            name(buf)?
                        )));
                    }
                }
                if swap {
                    self.check_swap(l, at)?;
                }
                if l.width > 1 {
                    let c = at.coefficient(l.var);
                    if c != 0 && c != 1 {
                        return Err(IrError::NotVectorisable(format!(
                            "loop `{}`: a load with stride {c}",
                            l.name
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// A pair swap stays inside its granule: unit stride along the loop,
    /// an even first index, even other coefficients and constant.
    fn check_swap(&self, l: &Loop, at: &Affine) -> Result<(), IrError> {
        let even_start = matches!(l.start, Extent::Const(s) if s % 2 == 0);
        let others_even = at
            .terms
            .iter()
            .all(|(c, t)| *t == Term::Var(l.var) || c % 2 == 0)
            && at.constant % 2 == 0;
        if at.coefficient(l.var) != 1 || !l.granule.is_multiple_of(2) || !even_start || !others_even
        {
            return Err(IrError::NotVectorisable(format!(
                "loop `{}`: a pair swap that can leave its granule",
                l.name
            )));
        }
        Ok(())
    }

    /// The loop nest with trip counts, outermost first: a loop of width
    /// `w` is `name` with `n / w` trips and `name.tail` with `(n % w) /
    /// granule`, plus `name.exp_lanes` (4 trips, one level in) for each
    /// exp of a vector body (its slow path's lane loop); a reduction is
    /// `name` with `n / lanes` trips when `n ≥ lanes` and no loop
    /// otherwise (its remainder is straight-line code). These are the
    /// loops the CLIF lowering emits, so weft-cost can match them against
    /// the bytes. `value` gives each `Index` parameter's value at
    /// the geometry being priced (row counts and the like).
    pub fn loop_trips(&self, value: &dyn Fn(ParamId) -> u64) -> Vec<weft_kernel::LoopTrip> {
        let mut out = Vec::new();
        trips(&self.body, 0, value, &mut out);
        out
    }
}

/// The exps a statement of a vector loop's body evaluates itself (not in
/// nested loops or reductions): each is one `emit_exp_f32x4`.
fn vector_exps(s: &Stmt) -> usize {
    fn count(e: &Expr) -> usize {
        match e {
            Expr::Unary(op, x) => usize::from(*op == Unary::Exp) + count(x),
            Expr::Binary(_, a, b) => count(a) + count(b),
            Expr::Load { .. } | Expr::Const(_) | Expr::Param(_) | Expr::Val(_) => 0,
        }
    }
    match s {
        Stmt::Let { value, .. } | Stmt::Store { value, .. } => count(value),
        Stmt::Loop(_) | Stmt::Reduce(_) | Stmt::Gather { .. } => 0,
    }
}

fn trips(
    body: &[Stmt],
    depth: u32,
    value: &dyn Fn(ParamId) -> u64,
    out: &mut Vec<weft_kernel::LoopTrip>,
) {
    let ext = |e: Extent| match e {
        Extent::Const(c) => c,
        Extent::Param(p) => value(p),
    };
    let push = |out: &mut Vec<weft_kernel::LoopTrip>, name: String, trips: u64| {
        out.push(weft_kernel::LoopTrip { name, trips, depth });
    };
    for s in body {
        match s {
            Stmt::Loop(l) => {
                let n = ext(l.end).saturating_sub(ext(l.start));
                let w = u64::from(l.width);
                push(out, l.name.to_owned(), n / w);
                if w > 1 {
                    // Each exp of the vector body has a slow path that
                    // loops over its four lanes (weft-libm's
                    // `emit_exp_f32x4`), nested in the vector loop and
                    // entered only when a lane fails the rounding test.
                    for _ in 0..l.body.iter().map(vector_exps).sum::<usize>() {
                        out.push(weft_kernel::LoopTrip {
                            name: format!("{}.exp_lanes", l.name),
                            trips: 4,
                            depth: depth + 1,
                        });
                    }
                    push(
                        out,
                        format!("{}.tail", l.name),
                        n % w / u64::from(l.granule),
                    );
                }
                trips(&l.body, depth + 1, value, out);
            }
            Stmt::Reduce(r) => {
                // Whole groups of `lanes` are a loop only when there is
                // one; the remainder is straight-line code (`lower`).
                let groups = (r.end - r.start) / u64::from(r.lanes);
                if groups > 0 {
                    push(out, r.name.to_owned(), groups);
                }
            }
            _ => {}
        }
    }
}

/// Every load in `e`: buffer, index, swap.
pub(crate) fn collect_loads<'e>(e: &'e Expr, out: &mut Vec<(ParamId, &'e Affine, bool)>) {
    match e {
        Expr::Load {
            buf,
            at,
            swap_pairs,
            ..
        } => out.push((*buf, at, *swap_pairs)),
        Expr::Unary(_, x) => collect_loads(x, out),
        Expr::Binary(_, a, b) => {
            collect_loads(a, out);
            collect_loads(b, out);
        }
        Expr::Const(_) | Expr::Param(_) | Expr::Val(_) => {}
    }
}

fn vector_loads(e: &Expr, var: VarId, name: &str) -> Result<(), IrError> {
    let mut loads = Vec::new();
    collect_loads(e, &mut loads);
    for (_, at, swap) in loads {
        let c = at.coefficient(var);
        if (c != 0 && c != 1) || swap {
            return Err(IrError::NotVectorisable(format!(
                "reduce `{name}`: a load with stride {c} or a pair swap"
            )));
        }
    }
    Ok(())
}

#[derive(Default)]
struct Scope {
    vars: HashSet<VarId>,
    vals: std::collections::HashMap<ValId, Ty>,
    bound_vars: HashSet<VarId>,
    bound_vals: HashSet<ValId>,
}

/// binary16 bits (low 16 bits of `h`) to f32, the exact rule both the
/// interpreter and every lowering follow: normals by rebiasing the
/// exponent, subnormals as `m · 2^-24`, infinities and NaNs by rebiasing
/// twice (payload kept, not quietened).
pub fn f16_bits_to_f32(h: u32) -> f32 {
    let em = h & 0x7fff;
    let sign = (h & 0x8000) << 16;
    let normal = (em << 13).wrapping_add(F16_REBIAS);
    let bits = if em < 0x400 {
        (em as f32 * F16_SUBNORMAL_SCALE).to_bits()
    } else if em >= 0x7c00 {
        normal.wrapping_add(F16_REBIAS)
    } else {
        normal
    };
    f32::from_bits(bits | sign)
}

/// `(127 - 15) << 23`: the exponent rebias from binary16 to binary32.
pub const F16_REBIAS: u32 = 112 << 23;
/// `2^-24`, the value of the binary16 subnormal unit.
pub const F16_SUBNORMAL_SCALE: f32 = 1.0 / 16_777_216.0;

// ---------------------------------------------------------------------
// Fusion: kernels made of several nests, and producers computed where
// their consumers read them.
// ---------------------------------------------------------------------

/// One nest of a [`sequence`]: a kernel and, for each of its parameters in
/// order, the parameter of the sequence that stands for it.
#[derive(Clone, Copy, Debug)]
pub struct Part<'k> {
    /// The nest.
    pub nest: &'k Kernel,
    /// `binds[i]` is the sequence's parameter for the nest's parameter `i`.
    pub binds: &'k [ParamId],
}

/// Whether a part's parameter of kind `part` may be bound to a sequence
/// parameter of kind `seq`: the same kind, except that a buffer the part
/// only reads may be one the sequence writes.
fn binds_to(part: ParamKind, seq: ParamKind) -> bool {
    match (part, seq) {
        (
            ParamKind::Buffer {
                storage: a,
                written: wa,
            },
            ParamKind::Buffer {
                storage: b,
                written: wb,
            },
        ) => a == b && (!wa || wb),
        (a, b) => a == b,
    }
}

/// The largest variable and value ids a body binds or uses, plus one.
fn id_bounds(body: &[Stmt]) -> (u16, u16) {
    fn expr(e: &Expr, b: &mut (u16, u16)) {
        match e {
            Expr::Load { at, .. } => affine(at, b),
            Expr::Val(v) => b.1 = b.1.max(v.0 + 1),
            Expr::Unary(_, x) => expr(x, b),
            Expr::Binary(_, x, y) => {
                expr(x, b);
                expr(y, b);
            }
            Expr::Const(_) | Expr::Param(_) => {}
        }
    }
    fn affine(a: &Affine, b: &mut (u16, u16)) {
        for (_, t) in &a.terms {
            if let Term::Var(v) = t {
                b.0 = b.0.max(v.0 + 1);
            }
        }
    }
    fn stmts(body: &[Stmt], b: &mut (u16, u16)) {
        for s in body {
            match s {
                Stmt::Loop(l) => {
                    b.0 = b.0.max(l.var.0 + 1);
                    stmts(&l.body, b);
                }
                Stmt::Let { val, value } => {
                    b.1 = b.1.max(val.0 + 1);
                    expr(value, b);
                }
                Stmt::Store { at, value, .. } => {
                    affine(at, b);
                    expr(value, b);
                }
                Stmt::Reduce(r) => {
                    b.0 = b.0.max(r.var.0 + 1);
                    b.1 = b.1.max(r.result.0 + 1);
                    stmts(&r.body, b);
                    expr(&r.value, b);
                }
                Stmt::Gather { var, at, .. } => {
                    b.0 = b.0.max(var.0 + 1);
                    affine(at, b);
                }
            }
        }
    }
    let mut b = (0, 0);
    stmts(body, &mut b);
    b
}

/// A renaming of one part into its sequence: parameters through the
/// binds, variables and values shifted past the earlier parts'.
struct Rename<'a> {
    binds: &'a [ParamId],
    vars: u16,
    vals: u16,
}

impl Rename<'_> {
    fn param(&self, p: ParamId) -> Result<ParamId, IrError> {
        self.binds
            .get(usize::from(p.0))
            .copied()
            .ok_or(IrError::UnknownParam(p))
    }

    fn var(&self, v: VarId) -> Result<VarId, IrError> {
        v.0.checked_add(self.vars)
            .map(VarId)
            .ok_or(IrError::VarScope(v))
    }

    fn val(&self, v: ValId) -> Result<ValId, IrError> {
        v.0.checked_add(self.vals)
            .map(ValId)
            .ok_or(IrError::ValScope(v))
    }

    fn extent(&self, e: Extent) -> Result<Extent, IrError> {
        Ok(match e {
            Extent::Const(c) => Extent::Const(c),
            Extent::Param(p) => Extent::Param(self.param(p)?),
        })
    }

    fn affine(&self, a: &Affine) -> Result<Affine, IrError> {
        let terms = a
            .terms
            .iter()
            .map(|(c, t)| {
                Ok((
                    *c,
                    match t {
                        Term::Var(v) => Term::Var(self.var(*v)?),
                        Term::Param(p) => Term::Param(self.param(*p)?),
                    },
                ))
            })
            .collect::<Result<_, IrError>>()?;
        Ok(Affine {
            terms,
            constant: a.constant,
        })
    }

    fn expr(&self, e: &Expr) -> Result<Expr, IrError> {
        Ok(match e {
            Expr::Load {
                buf,
                elem,
                at,
                swap_pairs,
            } => Expr::Load {
                buf: self.param(*buf)?,
                elem: *elem,
                at: self.affine(at)?,
                swap_pairs: *swap_pairs,
            },
            Expr::Const(c) => Expr::Const(*c),
            Expr::Param(p) => Expr::Param(self.param(*p)?),
            Expr::Val(v) => Expr::Val(self.val(*v)?),
            Expr::Unary(op, x) => Expr::Unary(*op, Box::new(self.expr(x)?)),
            Expr::Binary(op, a, b) => {
                Expr::Binary(*op, Box::new(self.expr(a)?), Box::new(self.expr(b)?))
            }
        })
    }

    fn guard(&self, g: &Guard) -> Result<Guard, IrError> {
        Ok(match g {
            Guard::SumLe(terms, limit) => Guard::SumLe(
                terms
                    .iter()
                    .map(|t| self.extent(*t))
                    .collect::<Result<_, _>>()?,
                self.extent(*limit)?,
            ),
            Guard::Eq(a, b) => Guard::Eq(self.extent(*a)?, self.extent(*b)?),
        })
    }

    fn body(&self, body: &[Stmt]) -> Result<Vec<Stmt>, IrError> {
        body.iter()
            .map(|s| {
                Ok(match s {
                    Stmt::Loop(l) => Stmt::Loop(Loop {
                        name: l.name,
                        var: self.var(l.var)?,
                        start: self.extent(l.start)?,
                        end: self.extent(l.end)?,
                        width: l.width,
                        granule: l.granule,
                        body: self.body(&l.body)?,
                    }),
                    Stmt::Let { val, value } => Stmt::Let {
                        val: self.val(*val)?,
                        value: self.expr(value)?,
                    },
                    Stmt::Store { buf, at, value } => Stmt::Store {
                        buf: self.param(*buf)?,
                        at: self.affine(at)?,
                        value: self.expr(value)?,
                    },
                    Stmt::Reduce(r) => Stmt::Reduce(Reduce {
                        result: self.val(r.result)?,
                        var: self.var(r.var)?,
                        body: self.body(&r.body)?,
                        value: self.expr(&r.value)?,
                        ..r.clone()
                    }),
                    Stmt::Gather {
                        var,
                        buf,
                        at,
                        below,
                    } => Stmt::Gather {
                        var: self.var(*var)?,
                        buf: self.param(*buf)?,
                        at: self.affine(at)?,
                        below: self.extent(*below)?,
                    },
                })
            })
            .collect()
    }
}

/// A kernel made of several nests run in order, sharing arguments: the
/// fusion of a chain of kernels into one body, one call.
///
/// `params` is the fused argument struct; each [`Part`] binds every one of
/// its nest's parameters to one of them (of the same kind; a buffer the
/// part only reads may be one the sequence writes). The result's guards are
/// every part's guards (renamed), all checked on entry, so a call either
/// runs every part or none; its body is the parts' bodies in order, their
/// variables and values renumbered apart. Each part's statements are
/// untouched, so each computes exactly the bits it computes alone on the
/// memory the earlier parts left: a sequence is bit-identical to its chain
/// called one nest after another on the same buffers (for arguments that
/// pass every guard). The result is [`Kernel::check`]ed.
pub fn sequence(name: String, params: Vec<Param>, parts: &[Part<'_>]) -> Result<Kernel, IrError> {
    let mut guards = Vec::new();
    let mut body = Vec::new();
    let (mut vars, mut vals) = (0u16, 0u16);
    for part in parts {
        if part.binds.len() != part.nest.params.len() {
            return Err(IrError::Binding(format!(
                "part `{}` has {} parameters, {} bound",
                part.nest.name,
                part.nest.params.len(),
                part.binds.len()
            )));
        }
        for (p, b) in part.nest.params.iter().zip(part.binds) {
            let seq = params
                .get(usize::from(b.0))
                .ok_or(IrError::UnknownParam(*b))?;
            if !binds_to(p.kind, seq.kind) {
                return Err(IrError::ParamKind {
                    name: seq.name,
                    wanted: "the kind of the part's parameter it is bound to",
                });
            }
        }
        let rename = Rename {
            binds: part.binds,
            vars,
            vals,
        };
        for g in &part.nest.guards {
            let g = rename.guard(g)?;
            if !guards.contains(&g) {
                guards.push(g);
            }
        }
        let renamed = rename.body(&part.nest.body)?;
        let (v, l) = id_bounds(&renamed);
        vars = vars.max(v);
        vals = vals.max(l);
        body.extend(renamed);
    }
    let kernel = Kernel {
        name,
        params,
        guards,
        body,
    };
    kernel.check()?;
    Ok(kernel)
}

/// Every f32 load of `buf` (not pair-swapped) in `body` replaced by
/// `producer` at the same index: an elementwise producer fused into its
/// consumer, each element computed where it is read instead of read back
/// from memory. When `producer(at)` is the expression whose rounded value
/// the producer stored at `at`, the consumer sees the same bits.
pub fn inline_producer(
    body: &[Stmt],
    buf: ParamId,
    producer: &dyn Fn(&Affine) -> Expr,
) -> Vec<Stmt> {
    fn expr(e: &Expr, buf: ParamId, producer: &dyn Fn(&Affine) -> Expr) -> Expr {
        match e {
            Expr::Load {
                buf: b,
                elem: Elem::F32,
                at,
                swap_pairs: false,
            } if *b == buf => producer(at),
            Expr::Unary(op, x) => Expr::Unary(*op, Box::new(expr(x, buf, producer))),
            Expr::Binary(op, a, b) => Expr::Binary(
                *op,
                Box::new(expr(a, buf, producer)),
                Box::new(expr(b, buf, producer)),
            ),
            other => other.clone(),
        }
    }
    body.iter()
        .map(|s| match s {
            Stmt::Loop(l) => Stmt::Loop(Loop {
                body: inline_producer(&l.body, buf, producer),
                ..l.clone()
            }),
            Stmt::Let { val, value } => Stmt::Let {
                val: *val,
                value: expr(value, buf, producer),
            },
            Stmt::Store { buf: b, at, value } => Stmt::Store {
                buf: *b,
                at: at.clone(),
                value: expr(value, buf, producer),
            },
            Stmt::Reduce(r) => Stmt::Reduce(Reduce {
                body: inline_producer(&r.body, buf, producer),
                value: expr(&r.value, buf, producer),
                ..r.clone()
            }),
            g @ Stmt::Gather { .. } => g.clone(),
        })
        .collect()
}

/// In the innermost loop or the reduction named `name` (anywhere in
/// `body`), bind `value` once per element to `val` (a fresh value), read it
/// wherever the element's statements compute `value` or load `buf[at]`, and
/// store it to `buf[at]`: a fused producer's result (`value`, the element
/// its chain would have stored at `buf[at]`) computed and written out by
/// the consumer's own pass. In a reduction the binding and the store join
/// its body (so the reduction's pass writes the producer's result while it
/// reduces it); in a loop they open and close its body. The element's
/// operations are the chain's, so are its bits. `Err(Shape)` if nothing
/// has that name; the caller [`Kernel::check`]s the result.
pub fn materialise(
    body: &mut [Stmt],
    name: &str,
    val: ValId,
    value: &Expr,
    buf: ParamId,
    at: &Affine,
) -> Result<(), IrError> {
    let plain_load = Expr::load_f32(buf, at.clone());
    let replace = |e: &Expr| -> Expr {
        fn go(e: &Expr, a: &Expr, b: &Expr, val: ValId) -> Expr {
            if e == a || e == b {
                return Expr::Val(val);
            }
            match e {
                Expr::Unary(op, x) => Expr::Unary(*op, Box::new(go(x, a, b, val))),
                Expr::Binary(op, x, y) => {
                    Expr::Binary(*op, Box::new(go(x, a, b, val)), Box::new(go(y, a, b, val)))
                }
                other => other.clone(),
            }
        }
        go(e, value, &plain_load, val)
    };
    let bind = Stmt::Let {
        val,
        value: value.clone(),
    };
    let store = Stmt::Store {
        buf,
        at: at.clone(),
        value: Expr::Val(val),
    };
    let rewrite = |stmts: &mut Vec<Stmt>| {
        for s in stmts.iter_mut() {
            if let Stmt::Let { value: v, .. } | Stmt::Store { value: v, .. } = s {
                *v = replace(v);
            }
        }
    };
    fn find<'b>(body: &'b mut [Stmt], name: &str) -> Option<&'b mut Stmt> {
        for s in body {
            let hit = match s {
                Stmt::Loop(l) => l.name == name,
                Stmt::Reduce(r) => r.name == name,
                _ => false,
            };
            if hit {
                return Some(s);
            }
            if let Stmt::Loop(l) = s {
                if let Some(found) = find(&mut l.body, name) {
                    return Some(found);
                }
            }
        }
        None
    }
    match find(body, name) {
        Some(Stmt::Loop(l)) => {
            rewrite(&mut l.body);
            l.body.insert(0, bind);
            l.body.push(store);
        }
        Some(Stmt::Reduce(r)) => {
            rewrite(&mut r.body);
            r.value = replace(&r.value);
            r.body.insert(0, bind);
            r.body.push(store);
        }
        _ => {
            return Err(IrError::Shape(format!(
                "no loop or reduction `{name}` to materialise in"
            )))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &'static str, offset: u32, kind: ParamKind) -> Param {
        Param { name, offset, kind }
    }

    fn f32_buf(written: bool) -> ParamKind {
        ParamKind::Buffer {
            storage: Storage::F32,
            written,
        }
    }

    fn copy_loop(width: u32, granule: u32, body: Vec<Stmt>) -> Kernel {
        Kernel {
            name: "t".into(),
            params: vec![
                p("x", 0, f32_buf(true)),
                p("y", 8, f32_buf(false)),
                p("n", 16, ParamKind::Index),
            ],
            guards: vec![],
            body: vec![Stmt::Loop(Loop {
                name: "i",
                var: VarId(0),
                start: Extent::Const(0),
                end: Extent::Const(8),
                width,
                granule,
                body,
            })],
        }
    }

    const X: ParamId = ParamId(0);
    const Y: ParamId = ParamId(1);
    const I: VarId = VarId(0);

    #[test]
    fn in_place_update_at_the_stored_index_is_accepted() {
        let k = copy_loop(
            4,
            1,
            vec![Stmt::Store {
                buf: X,
                at: Affine::var(I),
                value: Expr::load_f32(X, Affine::var(I)).plus(Expr::load_f32(Y, Affine::var(I))),
            }],
        );
        k.check().expect("well formed");
    }

    #[test]
    fn loading_a_neighbour_of_a_stored_buffer_is_a_hazard() {
        let k = copy_loop(
            4,
            1,
            vec![Stmt::Store {
                buf: X,
                at: Affine::var(I),
                value: Expr::load_f32(X, Affine::var(I).plus(1)),
            }],
        );
        assert!(matches!(k.check(), Err(IrError::Hazard(_))));
    }

    #[test]
    fn loading_after_storing_is_a_hazard() {
        let k = copy_loop(
            1,
            1,
            vec![
                Stmt::Store {
                    buf: X,
                    at: Affine::var(I),
                    value: Expr::f32(1.0),
                },
                Stmt::Let {
                    val: ValId(0),
                    value: Expr::load_f32(X, Affine::var(I)),
                },
            ],
        );
        assert!(matches!(k.check(), Err(IrError::Hazard(_))));
    }

    #[test]
    fn pair_swap_needs_an_even_granule() {
        let swapped = Expr::Load {
            buf: X,
            elem: Elem::F32,
            at: Affine::var(I),
            swap_pairs: true,
        };
        let body = vec![Stmt::Store {
            buf: X,
            at: Affine::var(I),
            value: swapped,
        }];
        assert!(copy_loop(4, 1, body.clone()).check().is_err());
        copy_loop(4, 2, body)
            .check()
            .expect("granule 2 keeps pairs whole");
    }

    #[test]
    fn strided_vector_loads_are_refused_by_name() {
        let k = copy_loop(
            4,
            1,
            vec![Stmt::Store {
                buf: X,
                at: Affine::var(I),
                value: Expr::load_f32(Y, Affine::default().plus_var(2, I)),
            }],
        );
        assert!(matches!(k.check(), Err(IrError::NotVectorisable(_))));
        let k = copy_loop(
            1,
            1,
            vec![Stmt::Store {
                buf: X,
                at: Affine::var(I),
                value: Expr::load_f32(Y, Affine::default().plus_var(2, I)),
            }],
        );
        k.check().expect("a scalar loop may stride");
    }

    #[test]
    fn type_and_scope_errors_are_named() {
        let k = copy_loop(
            1,
            1,
            vec![Stmt::Store {
                buf: X,
                at: Affine::var(I),
                value: Expr::Val(ValId(3)),
            }],
        );
        assert_eq!(k.check().unwrap_err(), IrError::ValScope(ValId(3)));
        let k = copy_loop(
            1,
            1,
            vec![Stmt::Store {
                buf: X,
                at: Affine::var(VarId(9)),
                value: Expr::f32(0.0),
            }],
        );
        assert_eq!(k.check().unwrap_err(), IrError::VarScope(VarId(9)));
        let k = copy_loop(
            1,
            1,
            vec![Stmt::Store {
                buf: Y,
                at: Affine::var(I),
                value: Expr::f32(0.0),
            }],
        );
        assert!(matches!(k.check(), Err(IrError::ParamKind { .. })));
        let k = copy_loop(
            1,
            1,
            vec![Stmt::Store {
                buf: X,
                at: Affine::var(I),
                value: Expr::f32(0.0).unary(Unary::IntToF32),
            }],
        );
        assert!(matches!(k.check(), Err(IrError::Type(_))));
    }

    #[test]
    fn a_sequence_renames_its_parts_apart_and_refuses_bad_binds_by_name() {
        // x[i] += y[i], twice over one struct: vars and vals renumbered.
        let add = copy_loop(
            4,
            1,
            vec![
                Stmt::Let {
                    val: ValId(0),
                    value: Expr::load_f32(Y, Affine::var(I)),
                },
                Stmt::Store {
                    buf: X,
                    at: Affine::var(I),
                    value: Expr::load_f32(X, Affine::var(I)).plus(Expr::Val(ValId(0))),
                },
            ],
        );
        let binds = [X, Y, ParamId(2)];
        let part = Part {
            nest: &add,
            binds: &binds,
        };
        let seq = sequence("twice".into(), add.params.clone(), &[part, part]).expect("sequence");
        let vars: Vec<VarId> = seq
            .body
            .iter()
            .filter_map(|s| match s {
                Stmt::Loop(l) => Some(l.var),
                _ => None,
            })
            .collect();
        assert_eq!(vars, [VarId(0), VarId(1)]);
        // A part's read-only buffer may be bound to a written one, not the
        // other way round; every parameter must be bound.
        let swapped = [Y, X, ParamId(2)];
        let e = sequence(
            "bad".into(),
            add.params.clone(),
            &[Part {
                nest: &add,
                binds: &swapped,
            }],
        )
        .unwrap_err();
        assert!(matches!(e, IrError::ParamKind { name: "y", .. }), "{e}");
        let e = sequence(
            "short".into(),
            add.params.clone(),
            &[Part {
                nest: &add,
                binds: &[X, Y],
            }],
        )
        .unwrap_err();
        assert!(matches!(e, IrError::Binding(_)), "{e}");
        let mut body = seq.body.clone();
        let e = materialise(
            &mut body,
            "nope",
            ValId(9),
            &Expr::f32(0.0),
            X,
            &Affine::var(I),
        );
        assert!(matches!(e, Err(IrError::Shape(_))));
    }

    /// `Σ x[i]²` over 8 elements, 4 lanes, with `body` run per element.
    fn reduce_with(body: Vec<Stmt>, value: Expr) -> Kernel {
        Kernel {
            body: vec![Stmt::Reduce(Reduce {
                result: ValId(0),
                op: ReduceOp::Sum,
                name: "r",
                var: I,
                start: 0,
                end: 8,
                width: 4,
                lanes: 4,
                fold: Fold::Halving,
                body,
                value,
            })],
            ..copy_loop(1, 1, vec![])
        }
    }

    #[test]
    fn a_reduction_body_follows_the_innermost_loop_rules() {
        let h = ValId(1);
        let sum = Expr::load_f32(X, Affine::var(I)).plus(Expr::load_f32(Y, Affine::var(I)));
        let bind = Stmt::Let { val: h, value: sum };
        let store = Stmt::Store {
            buf: X,
            at: Affine::var(I),
            value: Expr::Val(h),
        };
        let square = Expr::Val(h).times(Expr::Val(h));
        reduce_with(vec![bind.clone(), store.clone()], square.clone())
            .check()
            .expect("bind, store, reduce the bound value");
        // The value reading the stored buffer reads it after the store.
        let late = Expr::load_f32(X, Affine::var(I));
        let e = reduce_with(vec![bind.clone(), store.clone()], late).check();
        assert!(matches!(e, Err(IrError::Hazard(_))), "{e:?}");
        // A store away from the element.
        let away = Stmt::Store {
            buf: X,
            at: Affine::var(I).plus(1),
            value: Expr::Val(h),
        };
        let e = reduce_with(vec![bind.clone(), away], square.clone()).check();
        assert!(matches!(e, Err(IrError::Hazard(_))), "{e:?}");
        // Only Let and Store.
        let nested = Stmt::Reduce(Reduce {
            result: ValId(5),
            op: ReduceOp::Sum,
            name: "inner",
            var: VarId(4),
            start: 0,
            end: 1,
            width: 1,
            lanes: 1,
            fold: Fold::Halving,
            body: Vec::new(),
            value: Expr::f32(0.0),
        });
        let e = reduce_with(vec![nested], square.clone()).check();
        assert!(matches!(e, Err(IrError::Shape(_))), "{e:?}");
        // The body's values are the reduction's own.
        let mut k = reduce_with(vec![bind, store], square);
        k.body.push(Stmt::Store {
            buf: X,
            at: Affine::constant(0),
            value: Expr::Val(h),
        });
        assert_eq!(k.check().unwrap_err(), IrError::ValScope(h));
    }

    #[test]
    fn an_inlined_producer_replaces_only_plain_f32_loads_of_its_buffer() {
        let k = copy_loop(
            4,
            2,
            vec![Stmt::Store {
                buf: X,
                at: Affine::var(I),
                value: Expr::load_f32(Y, Affine::var(I)).plus(Expr::Load {
                    buf: Y,
                    elem: Elem::F32,
                    at: Affine::var(I),
                    swap_pairs: true,
                }),
            }],
        );
        let body = inline_producer(&k.body, Y, &|at| {
            Expr::load_f32(Y, at.clone()).times(Expr::f32(2.0))
        });
        let Stmt::Loop(l) = &body[0] else {
            panic!("a loop")
        };
        let Stmt::Store { value, .. } = &l.body[0] else {
            panic!("a store")
        };
        let Expr::Binary(Binary::Add, a, b) = value else {
            panic!("an add")
        };
        assert!(matches!(**a, Expr::Binary(Binary::Mul, _, _)));
        assert!(matches!(
            **b,
            Expr::Load {
                swap_pairs: true,
                ..
            }
        ));
    }

    #[test]
    fn overlapping_params_are_refused() {
        let mut k = copy_loop(1, 1, vec![]);
        k.params[1].offset = 4;
        assert!(matches!(k.check(), Err(IrError::ParamLayout(_))));
    }

    #[test]
    fn f16_widening_is_exact_for_every_pattern() {
        for h in 0..=u16::MAX {
            let ours = f16_bits_to_f32(u32::from(h));
            let theirs = half::f16::from_bits(h).to_f32();
            if theirs.is_nan() {
                assert!(ours.is_nan(), "{h:#06x}");
                // Payload kept: the low 10 bits land in bits 13..23.
                assert_eq!(ours.to_bits() >> 13 & 0x3ff, u32::from(h) & 0x3ff);
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{h:#06x}");
            }
        }
    }

    #[test]
    fn loop_trips_split_vector_and_tail() {
        let k = Kernel {
            body: vec![Stmt::Loop(Loop {
                name: "rows",
                var: VarId(1),
                start: Extent::Const(0),
                end: Extent::Param(ParamId(2)),
                width: 1,
                granule: 1,
                body: vec![Stmt::Loop(Loop {
                    name: "i",
                    var: I,
                    start: Extent::Const(0),
                    end: Extent::Const(10),
                    width: 4,
                    granule: 2,
                    body: vec![],
                })],
            })],
            ..copy_loop(1, 1, vec![])
        };
        let t = k.loop_trips(&|_| 3);
        let got: Vec<_> = t
            .iter()
            .map(|t| (t.name.as_str(), t.trips, t.depth))
            .collect();
        assert_eq!(got, [("rows", 3, 0), ("i", 2, 1), ("i.tail", 1, 1)]);
    }
}
