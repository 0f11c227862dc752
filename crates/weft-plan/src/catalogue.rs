//! The catalogue: every family's arms and twins, registered as ordinary
//! candidates. The planner never names a family; a family joins by
//! registering its [`FamilyEntry`].

use std::collections::BTreeSet;
use std::sync::Arc;

use weft_kernel::{Family, FamilyEntry, Twin};

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
    /// catalogue, a twin whose arm is not in its entry.
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
        for name in entry
            .arms
            .iter()
            .map(|a| a.name())
            .chain(entry.twins.iter().map(|t| t.name()))
        {
            if !names.insert(name) {
                return Err(bad(format!("candidate name `{name}` is used twice")));
            }
        }
        for t in &entry.twins {
            if !entry.arms.iter().any(|a| a.name() == t.arm()) {
                return Err(bad(format!(
                    "twin `{}` names arm `{}`, which the family does not register",
                    t.name(),
                    t.arm()
                )));
            }
        }
        for a in &entry.arms {
            if a.family() != entry.family {
                return Err(bad(format!(
                    "arm `{}` belongs to family {}",
                    a.name(),
                    a.family()
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
                    twins: Vec::new(),
                    ..e.clone()
                })
                .collect(),
        }
    }

    /// The twins of `entry` that take `arm`'s offer, in registration order.
    pub(crate) fn twins_of<'e>(
        entry: &'e FamilyEntry,
        arm: &'e str,
    ) -> impl Iterator<Item = &'e Arc<dyn Twin>> + 'e {
        entry.twins.iter().filter(move |t| t.arm() == arm)
    }

    fn candidate_names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().flat_map(|e| {
            e.arms
                .iter()
                .map(|a| a.name())
                .chain(e.twins.iter().map(|t| t.name()))
        })
    }
}
