//! `weft explain SITE`: the site's arm and its twin (the chosen one, or the
//! cheapest validated one when the arm was kept), each priced by weft-cost
//! with its loop breakdown, and their listings side by side.

use weft_cost::{CostModel, Priced};
use weft_host::Host;
use weft_kernel::{Family, NativeCode};
use weft_llm::engine::{self, SITE_NAMES};
use weft_plan::{Kind, PriceReport, VerdictReport};

use crate::{compile, config, emit, ExplainArgs};

/// The plan index of `site`: an index, a full name, or a unique suffix.
fn resolve(site: &str) -> Result<usize, String> {
    if let Ok(i) = site.parse::<usize>() {
        return if i < SITE_NAMES.len() {
            Ok(i)
        } else {
            Err(format!(
                "no-such-site: the plan has {} sites (0..{})",
                SITE_NAMES.len(),
                SITE_NAMES.len()
            ))
        };
    }
    if let Some(i) = SITE_NAMES.iter().position(|n| *n == site) {
        return Ok(i);
    }
    let hits: Vec<usize> = (0..SITE_NAMES.len())
        .filter(|&i| SITE_NAMES[i].ends_with(site))
        .collect();
    match hits.as_slice() {
        [one] => Ok(*one),
        [] => Err(format!(
            "no-such-site: {site:?} names no site; the sites are {}",
            SITE_NAMES.join(", ")
        )),
        many => Err(format!(
            "ambiguous-site: {site:?} matches {}",
            many.iter()
                .map(|&i| SITE_NAMES[i])
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// A price's summary and its loops, one line each.
fn describe(name: &str, code: &NativeCode, priced: &Result<Priced, String>) -> Vec<String> {
    let mut v = vec![format!("{name} ({} bytes)", code.bytes.len())];
    match priced {
        Ok(p) => {
            v.push(format!(
                "price {:.0} cycles (model {:.0}, roofline floor {:.0}, {:?}, {:?} resident), {:.0} instructions",
                p.price.cycles, p.model_cycles, p.price.floor, p.price.model, p.level, p.instructions
            ));
            for l in &p.loops {
                v.push(format!(
                    "  loop {:<12} depth {} × {:<6} {:>8.2} cyc/iter ({:?}) = {:.0}",
                    l.name, l.depth, l.trips, l.cycles_per_iteration, l.bound, l.cycles
                ));
            }
        }
        Err(e) => v.push(format!("unpriced: {e}")),
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

pub(crate) fn explain(a: ExplainArgs) -> Result<(), String> {
    let index = resolve(&a.site)?;
    let c = config(&a.model)?;
    let plan = compile(&c)?;
    let report = &plan.report().sites[index];
    let chosen = &plan.sites()[index];
    let host = Host::detect();
    let sites = engine::sites(&c).map_err(|e| e.to_string())?;
    let catalogue = engine::catalogue().map_err(|e| e.to_string())?;
    let entry = catalogue
        .family(Family(chosen.family))
        .ok_or_else(|| format!("unknown-family: {}", chosen.family))?;
    let arm_name = match &chosen.kind {
        Kind::Arm => chosen.candidate.to_owned(),
        Kind::Twin { arm } => arm.clone(),
    };
    let arm_entry = entry
        .arms
        .iter()
        .find(|x| x.arm.name() == arm_name)
        .ok_or_else(|| format!("unknown-arm: {arm_name}"))?;
    let arm = &arm_entry.arm;
    let offer = arm
        .offer(&sites[index], &host)
        .map_err(|r| format!("{}: {r}", r.name()))?;
    let arm_code = arm
        .build(&offer, host.isa)
        .map_err(|r| format!("{}: {r}", r.name()))?;
    // The twin shown: the chosen one, else the cheapest validated twin of
    // the arm kept.
    let twin_name = match &chosen.kind {
        Kind::Twin { .. } => Some(chosen.candidate.to_owned()),
        Kind::Arm => report
            .candidates
            .iter()
            .filter(|x| x.arm.as_deref() == Some(arm_name.as_str()))
            .filter(|x| matches!(x.verdict, VerdictReport::Validated { .. }))
            .filter_map(|x| match x.price {
                Some(PriceReport::Priced { cycles, .. }) => Some((cycles, x.name.clone())),
                _ => None,
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, n)| n),
    };

    let mut text = format!(
        "site {index} {} — {} [{}]\nchose {}: {}\n\n",
        SITE_NAMES[index], report.family, report.geometry, report.chosen, report.reason
    );
    let model = CostModel::for_host(&host);
    let price = |code: &NativeCode, nest: &[weft_kernel::LoopTrip]| {
        model
            .price(code, nest, &offer)
            .map_err(|e| format!("{}: {e}", e.name()))
    };
    let arch = weft_managed::Arch::host().ok_or("unsupported-host: no listing for this ISA")?;
    let mut left = describe(&arm_name, &arm_code, &price(&arm_code, &arm.nest(&offer)));
    left.push(String::new());
    left.extend(
        weft_managed::listing(arch, &arm_code.bytes)
            .lines()
            .map(str::to_owned),
    );
    let mut right = Vec::new();
    match twin_name {
        Some(name) => {
            let twin = arm_entry
                .twins
                .iter()
                .find(|t| t.name() == name.as_str())
                .ok_or_else(|| format!("unknown-twin: {name}"))?;
            let code = twin
                .emit(&offer)
                .map_err(|r| format!("{}: {r}", r.name()))?;
            right.extend(describe(&name, &code, &price(&code, &twin.nest(&offer))));
            right.push(String::new());
            right.extend(
                weft_managed::listing(arch, &code.bytes)
                    .lines()
                    .map(str::to_owned),
            );
        }
        None => right.push("no validated twin for this site on this host".to_owned()),
    }
    text.push_str(&side_by_side(&left, &right, a.width));
    emit(&text)
}

#[cfg(test)]
mod tests {
    use super::resolve;

    #[test]
    fn sites_resolve_by_index_full_name_and_unique_suffix() {
        assert_eq!(resolve("3"), Ok(3));
        assert_eq!(resolve("blk.*.attn_q"), Ok(3));
        assert_eq!(resolve("attn_q"), Ok(3));
        assert_eq!(resolve("argmax"), Ok(22));
    }

    #[test]
    fn unknown_out_of_range_and_ambiguous_sites_are_named_errors() {
        assert!(resolve("99").unwrap_err().starts_with("no-such-site"));
        assert!(resolve("attn_zz").unwrap_err().starts_with("no-such-site"));
        // `q8` ends several site names.
        assert!(resolve("q8").unwrap_err().starts_with("ambiguous-site"));
    }
}
