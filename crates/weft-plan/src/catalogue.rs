//! The catalogue: every family's arms, each with its twins, registered as
//! ordinary candidates. The planner never names a family; a family joins by
//! registering its [`FamilyEntry`].

use std::collections::BTreeSet;

use weft_kernel::{ArmEntry, Family, FamilyEntry};

use crate::PlanError;

/// The registered families, in registration order.
#[derive(Clone, Debug, Default)]
pub struct Catalogue {
    entries: Vec<FamilyEntry>,
}

impl Catalogue {
    /// An empty catalogue.
    pub fn new() -> Catalogue {
        Catalogue::default()
    }

    /// Register a family. Refused by name: a family registered twice, a
    /// family with no arm, a candidate name used twice anywhere in the
    /// catalogue, an arm of another family.
    pub fn register(&mut self, entry: FamilyEntry) -> Result<(), PlanError> {
        let bad = |reason: String| PlanError::BadRegistration {
            family: entry.family.name().to_owned(),
            reason,
        };
        if self.family(entry.family).is_some() {
            return Err(bad("registered twice".to_owned()));
        }
        if entry.arms.is_empty() {
            return Err(bad("no arm".to_owned()));
        }
        let mut names: BTreeSet<&str> = self.candidate_names().collect();
        for name in entry_names(&entry) {
            if !names.insert(name) {
                return Err(bad(format!("candidate name `{name}` is used twice")));
            }
        }
        for a in &entry.arms {
            if a.arm.family() != entry.family {
                return Err(bad(format!(
                    "arm `{}` belongs to family {}",
                    a.arm.name(),
                    a.arm.family()
                )));
            }
        }
        self.entries.push(entry);
        Ok(())
    }

    /// Register several families (stops at the first refusal).
    pub fn register_all(
        &mut self,
        entries: impl IntoIterator<Item = FamilyEntry>,
    ) -> Result<(), PlanError> {
        entries.into_iter().try_for_each(|e| self.register(e))
    }

    /// The entry of `family`, if registered.
    pub fn family(&self, family: Family) -> Option<&FamilyEntry> {
        self.entries.iter().find(|e| e.family == family)
    }

    /// Every registered entry.
    pub fn entries(&self) -> &[FamilyEntry] {
        &self.entries
    }

    /// The same catalogue with every twin removed: what a build without
    /// native emission would register (the kill switch's reference).
    pub fn without_twins(&self) -> Catalogue {
        Catalogue {
            entries: self
                .entries
                .iter()
                .map(|e| FamilyEntry {
                    family: e.family,
                    arms: e
                        .arms
                        .iter()
                        .map(|a| ArmEntry {
                            twins: Vec::new(),
                            ..a.clone()
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    fn candidate_names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().flat_map(entry_names)
    }
}

/// Every candidate name of `entry`: each arm, then its twins.
fn entry_names(entry: &FamilyEntry) -> impl Iterator<Item = &str> {
    entry
        .arms
        .iter()
        .flat_map(|a| std::iter::once(a.arm.name()).chain(a.twins.iter().map(|t| t.name())))
}
