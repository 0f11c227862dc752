//! `weft explain SITE`: the site's arm and its twin (the chosen one, or the
//! cheapest validated one when the arm was kept), each with the price
//! breakdown the plan chose by and the listing of the bytes it judged, side
//! by side. Everything shown is read from the compiled plan: nothing is
//! built, emitted or priced again, so the cycles here are the plan's.

use weft_cost::Priced;
use weft_plan::{Candidate, CompiledPlan, Kind, PlanError, PriceReport, VerdictReport};

use crate::{compile, config, emit, ExplainArgs};

/// A candidate's summary, its price breakdown and its listing, one line each.
fn describe(c: &Candidate) -> Vec<String> {
    let Some(code) = &c.code else {
        return vec![format!("{} (no body)", c.name)];
    };
    let mut v = vec![format!("{} ({} bytes)", c.name, code.bytes.len())];
    match &c.priced {
        Some(Ok(p)) => v.extend(price_lines(p)),
        Some(Err(e)) => v.push(format!("unpriced: {e}")),
        None => v.push("not priced".to_owned()),
    }
    v.push(String::new());
    v.extend(weft_managed::listing(code).lines().map(str::to_owned));
    v
}

/// The price line and one line per loop.
fn price_lines(p: &Priced) -> Vec<String> {
    let mut v = vec![format!(
        "price {:.0} cycles (model {:.0}, roofline floor {:.0}, {:?}, {:?} resident), {:.0} instructions",
        p.price.cycles, p.model_cycles, p.price.floor, p.price.model, p.level, p.instructions
    )];
    for l in &p.loops {
        v.push(format!(
            "  loop {:<12} depth {} × {:<6} {:>8.2} cyc/iter ({:?}) = {:.0}",
            l.name, l.depth, l.trips, l.cycles_per_iteration, l.bound, l.cycles
        ));
    }
    v
}

/// Two columns of `width` characters.
fn side_by_side(left: &[String], right: &[String], width: usize) -> String {
    let cut = |s: &str| -> String {
        let mut t: String = s.chars().take(width).collect();
        let pad = width.saturating_sub(t.chars().count());
        t.extend(std::iter::repeat_n(' ', pad));
        t
    };
    let mut out = String::new();
    for i in 0..left.len().max(right.len()) {
        let l = left.get(i).map_or("", String::as_str);
        let r = right.get(i).map_or("", String::as_str);
        out.push_str(&cut(l));
        out.push_str(" │ ");
        out.push_str(r);
        out.push('\n');
    }
    out
}

/// The explanation of the site `site` names in `plan`.
pub(crate) fn explain_text(
    plan: &CompiledPlan,
    site: &str,
    width: usize,
) -> Result<String, PlanError> {
    let index = plan.resolve(site)?;
    let s = &plan.sites()[index];
    let report = &plan.report().sites[index];
    let arm_name = match &s.kind {
        Kind::Arm => s.candidate,
        Kind::Twin { arm } => arm.as_str(),
    };
    // The twin shown: the chosen one, else the cheapest validated twin of
    // the arm kept.
    let twin_name = match &s.kind {
        Kind::Twin { .. } => Some(s.candidate.to_owned()),
        Kind::Arm => report
            .candidates
            .iter()
            .filter(|x| x.arm.as_deref() == Some(arm_name))
            .filter(|x| matches!(x.verdict, VerdictReport::Validated { .. }))
            .filter_map(|x| match x.price {
                Some(PriceReport::Priced { cycles, .. }) => Some((cycles, x.name.clone())),
                _ => None,
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, n)| n),
    };
    let missing = |name: &str| PlanError::Internal {
        what: if name == arm_name {
            "the plan lost its chosen arm"
        } else {
            "the plan lost a validated twin"
        },
    };
    let mut text = format!(
        "site {index} {} — {} [{}]\nchose {} ({:?}): {}\n\n",
        s.label, report.family, report.geometry, report.chosen, report.rule, report.reason
    );
    let left = describe(s.candidate(arm_name).ok_or_else(|| missing(arm_name))?);
    let right = match twin_name {
        Some(name) => describe(s.candidate(&name).ok_or_else(|| missing(&name))?),
        None => vec!["no validated twin for this site on this host".to_owned()],
    };
    text.push_str(&side_by_side(&left, &right, width));
    Ok(text)
}

pub(crate) fn explain(a: ExplainArgs) -> Result<(), String> {
    let c = config(&a.model)?;
    let plan = compile(&c)?.plan;
    let text = explain_text(&plan, &a.site, a.width).map_err(|e| e.to_string())?;
    emit(&text)
}

#[cfg(test)]
mod tests {
    use weft_llm::{engine, Config};
    use weft_plan::{CacheLocation, Options, PriceReport};

    use super::explain_text;

    /// A model small enough to plan in a test, shaped like SmolLM2.
    fn small() -> Config {
        Config {
            dim: 128,
            hidden: 256,
            layers: 1,
            heads: 4,
            kv_heads: 2,
            vocab: 512,
            rope_dims: 32,
            max_seq: 64,
            ..Config::smollm2_135m()
        }
    }

    fn plan() -> weft_plan::CompiledPlan {
        let options = Options {
            cache: CacheLocation::InMemory,
            ..Options::default()
        };
        engine::compile_plan(&small(), options, &mut |_, _| {})
            .expect("the plan compiles")
            .plan
    }

    #[test]
    fn explain_prints_the_cycles_the_plan_chose_by() {
        let plan = plan();
        for site in ["attn_q", "attention", "argmax", "ffn_norm.q8"] {
            let index = plan.resolve(site).expect("the site resolves");
            let report = &plan.report().sites[index];
            let chosen = report
                .candidates
                .iter()
                .find(|c| c.name == report.chosen)
                .expect("the chosen candidate is reported");
            let text = explain_text(&plan, site, 100).expect("explain");
            assert!(text.contains(&format!("chose {}", report.chosen)), "{text}");
            match &chosen.price {
                Some(PriceReport::Priced { cycles, .. }) => {
                    let line = format!("price {cycles:.0} cycles");
                    assert!(text.contains(&line), "{site}: {line} not in\n{text}");
                }
                other => assert!(text.contains("unpriced"), "{site}: {other:?}\n{text}"),
            }
        }
    }

    #[test]
    fn sites_resolve_by_index_full_label_and_unique_suffix() {
        let plan = plan();
        let q = plan.resolve("blk.*.attn_q").expect("full label");
        assert_eq!(plan.resolve("attn_q").expect("suffix"), q);
        assert_eq!(plan.resolve(&q.to_string()).expect("index"), q);
        assert_eq!(plan.sites()[q].label, "blk.*.attn_q");
        let e = |s: &str| plan.resolve(s).expect_err(s).name();
        assert_eq!(e("99"), "no-such-site");
        assert_eq!(e("attn_zz"), "unknown-site");
        // `q8` ends several labels.
        assert_eq!(e("q8"), "ambiguous-site");
    }
}
