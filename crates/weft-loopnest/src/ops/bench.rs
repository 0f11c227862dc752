//! Workbenches for the members of fused regions: ordinary inputs at an
//! offer's shape, ready to run any body built for it.
//!
//! A planner that races a fused region against the chain it replaces
//! (`weft_plan::Region`) runs each chain member on its family's workbench
//! and the fused kernel on its own. `loopnest.add` and `loopnest.rmsnorm`
//! do not register these in their [`FamilyEntry`](weft_kernel::FamilyEntry)
//! (a site of theirs is chosen by price, as before); a region names them
//! ([`AddBench`], [`RmsNormBench`]); `loopnest.add_rmsnorm` registers its
//! own ([`AddRmsNormBench`](super::add_rmsnorm::validation::AddRmsNormBench)).
//! Values are ordinary (no subnormals, which would time another path), and
//! repeated in-place calls stay finite for millions of calls.

use std::sync::Arc;

use weft_kernel::{Bench, Kernel, Offer, PlacedCode, Refusal, Workbench};

use super::add::{self, Add, AddArgs};
use super::rmsnorm::{self, RmsNorm, RmsNormArgs};
use super::NestOp;

/// `n` values uniform in `[-scale, scale)`, deterministic in `seed`.
pub fn ordinary(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut rng = weft_validate::SplitMix64::new(seed);
    (0..n)
        .map(|_| ((rng.next_u32() >> 8) as f32 / (1u32 << 23) as f32 - 1.0) * scale)
        .collect()
}

fn wrong_args(bench: &str, wants: &str, offer: &Offer) -> Refusal {
    Refusal::BadOperand {
        operand: "args".to_owned(),
        reason: format!("{bench} runs {wants}, not {}", offer.contract.args),
    }
}

/// `loopnest.add`'s workbench: `x += y` over the offer's length (`y` a
/// thousandth of `x`).
#[derive(Clone, Copy, Debug, Default)]
pub struct AddBench;

struct AddPrepared {
    op: Add,
    x: Vec<f32>,
    y: Vec<f32>,
}

impl Workbench for AddBench {
    fn prepare(&self, offer: &Offer, seed: u64) -> Result<Box<dyn Bench>, Refusal> {
        if offer.contract.args != add::ARGS_NAME {
            return Err(wrong_args("AddBench", add::ARGS_NAME, offer));
        }
        let op = Add::from_geometry(&offer.contract.geometry)?;
        Ok(Box::new(AddPrepared {
            op,
            x: ordinary(seed, op.len, 1.0),
            y: ordinary(seed ^ 1, op.len, 1e-3),
        }))
    }
}

impl Bench for AddPrepared {
    unsafe fn run(&mut self, code: &Arc<PlacedCode>) -> Result<(), Refusal> {
        // SAFETY: the caller promises `code` is a loopnest.add body, which
        // honours the leaf ABI for `AddArgs`.
        let kernel = unsafe { Kernel::<AddArgs>::from_placed(code.clone(), 0)? };
        let args = AddArgs::new(&self.op, &mut self.x, &self.y, 0..self.op.len)?;
        // SAFETY: `new` checked the extents against buffers owned by `self`.
        unsafe { kernel.call(&args) };
        Ok(())
    }
}

/// `loopnest.rmsnorm`'s workbench: ordinary rows at the offer's shape.
#[derive(Clone, Copy, Debug, Default)]
pub struct RmsNormBench;

struct RmsNormPrepared {
    op: RmsNorm,
    x: Vec<f32>,
    w: Vec<f32>,
    y: Vec<f32>,
}

impl Workbench for RmsNormBench {
    fn prepare(&self, offer: &Offer, seed: u64) -> Result<Box<dyn Bench>, Refusal> {
        if offer.contract.args != rmsnorm::ARGS_NAME {
            return Err(wrong_args("RmsNormBench", rmsnorm::ARGS_NAME, offer));
        }
        let op = RmsNorm::from_geometry(&offer.contract.geometry)?;
        let n = op.rows * op.dim;
        Ok(Box::new(RmsNormPrepared {
            op,
            x: ordinary(seed, n, 1.0),
            w: ordinary(seed ^ 2, op.dim, 1.0),
            y: vec![0.0; n],
        }))
    }
}

impl Bench for RmsNormPrepared {
    unsafe fn run(&mut self, code: &Arc<PlacedCode>) -> Result<(), Refusal> {
        // SAFETY: the caller promises `code` is a loopnest.rmsnorm body,
        // which honours the leaf ABI for `RmsNormArgs`.
        let kernel = unsafe { Kernel::<RmsNormArgs>::from_placed(code.clone(), 0)? };
        let args = RmsNormArgs::new(
            &self.op,
            &self.x,
            &self.w,
            &mut self.y,
            1e-5,
            0..self.op.rows,
        )?;
        // SAFETY: `new` checked the extents against buffers owned by `self`.
        unsafe { kernel.call(&args) };
        Ok(())
    }
}
