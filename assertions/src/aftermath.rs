//! What the judge keeps for `recovery` while the records go by
//! ([`Aftermath`]): the window after the last trouble and the people
//! offered in it, for the run and per tenant. The one pass fills it as
//! each person is done, the oracle from the records grouped by person;
//! `checks::recovery` judges it.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::expect::Expectations;

/// People counted in the window: offered (their first attempt due in it),
/// answered (by any attempt), and refused for their tenant's own
/// entitlement and never answered (not in `offered`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct People {
    pub(crate) offered: u64,
    pub(crate) answered: u64,
    pub(crate) entitlement: u64,
}

/// What `recovery` keeps while the records go by: the window after the
/// last trouble, and the people offered in it, for the run and per tenant.
/// Filled by the one pass as each person is done, and in tests by the
/// oracle.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Aftermath {
    /// When the last trouble ended, if there was one.
    pub(crate) trouble_end_us: Option<u64>,
    /// The window `[from_us, to_us)`: the trouble's end plus the drain
    /// time allowed, to the load's end.
    pub(crate) from_us: u64,
    pub(crate) to_us: u64,
    /// The drain time allowed, at the run's scale, in microseconds.
    pub(crate) drain_us: u64,
    /// The run's start, and one scenario second at the run's scale, in
    /// microseconds: for the verdict's scenario seconds.
    pub(crate) start_us: u64,
    pub(crate) second_us: u64,
    /// The people of the window.
    pub(crate) people: People,
    /// Per tenant, by name.
    pub(crate) tenants: BTreeMap<String, People>,
}

impl Aftermath {
    /// The window of a run with these predictions, `drain_within` allowed to
    /// drain (at the run's scale) and a scenario second of `second_us` (its
    /// timeline's rows); `trouble_ends`:
    /// when each provider's troubles end (with several providers, from the
    /// plan), beside the overload's and [`Expectations::after_trouble`].
    pub(crate) fn new(
        expect: &Expectations,
        drain_within: Duration,
        second_us: u64,
        trouble_ends: impl IntoIterator<Item = u64>,
    ) -> Self {
        let trouble_end_us = expect
            .overload
            .map(|(_, to)| to)
            .into_iter()
            .chain(expect.after_trouble.map(|a| a.from_us))
            .chain(trouble_ends)
            .max();
        let drain_us = u64::try_from(drain_within.as_micros()).unwrap_or(u64::MAX);
        let from_us = trouble_end_us.map_or(u64::MAX, |end| end.saturating_add(drain_us));
        Aftermath {
            trouble_end_us,
            from_us,
            to_us: expect.load_end_us,
            drain_us,
            start_us: expect.start_us,
            second_us: second_us.max(1),
            people: People::default(),
            tenants: BTreeMap::new(),
        }
    }

    /// A person is done: counted if their first attempt was due
    /// (`intended_us`) in the window.
    pub(crate) fn person(
        &mut self,
        intended_us: u64,
        tenant: Option<&str>,
        answered: bool,
        tenant_limited: bool,
    ) {
        if !(self.from_us <= intended_us && intended_us < self.to_us) {
            return;
        }
        let add = |p: &mut People| {
            if answered {
                p.offered += 1;
                p.answered += 1;
            } else if tenant_limited {
                p.entitlement += 1;
            } else {
                p.offered += 1;
            }
        };
        add(&mut self.people);
        if let Some(t) = tenant {
            match self.tenants.get_mut(t) {
                Some(p) => add(p),
                None => add(self.tenants.entry(t.to_owned()).or_default()),
            }
        }
    }

    /// Scenario seconds since the run's start at `t_us`.
    pub(crate) fn scenario_s(&self, t_us: u64) -> f64 {
        t_us.saturating_sub(self.start_us) as f64 / self.second_us as f64
    }

    /// The window's length, in scenario seconds (0 when it is empty).
    pub(crate) fn window_s(&self) -> f64 {
        self.to_us.saturating_sub(self.from_us) as f64 / self.second_us as f64
    }
}
