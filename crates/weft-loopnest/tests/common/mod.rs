//! Nests the native-lowering tests of both ISAs share.

use weft_loopnest::ir::{Kernel, Param, ParamKind, Stmt, Unary};
use weft_loopnest::{Add, NestOp};

/// An `exp` where no exp-based map is: the residual add's sum through
/// `exp`, given an exp table (the add's arguments are not a map's, so the
/// map route must refuse it by name).
pub fn exp_outside_a_map() -> Kernel {
    let mut nest = Add::new(64).expect("shape").nest();
    let end = nest.params.iter().map(|p| p.offset).max().unwrap_or(0) + 8;
    nest.params.push(Param {
        name: "table",
        offset: end,
        kind: ParamKind::ExpTable,
    });
    for s in &mut nest.body {
        if let Stmt::Loop(l) = s {
            for s in &mut l.body {
                if let Stmt::Store { value, .. } = s {
                    *value = value.clone().unary(Unary::Exp);
                }
            }
        }
    }
    nest
}
