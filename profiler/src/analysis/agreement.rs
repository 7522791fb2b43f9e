//! Where exact and sampled mode ran together: do their phase shares agree? Both are
//! normalised over exec-phase time only (sampling's tracer/other phases and exact mode's
//! time outside probed functions are left out), and the exact share is compared with the
//! sampled share's 95% interval. Phases disagree structurally where a probed function's self
//! time absorbs unprobed callees that sampling puts in another phase (load_elf_binary's ELF
//! mapping, for one); the table shows it rather than hiding it.
use serde::Serialize;

use super::{attribution::SampledAttribution, exact::ExactTiming, outcome::Outcome, stats::wilson};

/// Phases outside the exec path proper.
const NOT_EXEC: &[&str] = &["tracer", "other"];

/// One phase's share of exec-phase time in exact mode beside its share of exec-phase samples.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct PhaseAgreement {
    /// Phase name.
    pub phase: String,
    /// Fraction (0 to 1) of exact mode's exec-phase time per attempt spent in this phase.
    pub exact_share: f64,
    /// Fraction (0 to 1) of exec-phase samples in this phase.
    pub sampled_share: f64,
    /// Lower end of the sampled share's 95% Wilson interval.
    pub sampled_low: f64,
    /// Upper end of the sampled share's 95% Wilson interval.
    pub sampled_high: f64,
    /// Exec-phase samples in this phase.
    pub samples: u64,
    /// Whether the exact share lies within the sampled share's interval.
    pub agree: bool,
}

/// The phase agreement for one outcome that both modes measured.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct OutcomeAgreement {
    /// The outcome compared.
    pub outcome: Outcome,
    /// Exec-phase samples behind the sampled shares.
    pub samples: u64,
    /// One row per exec phase that sampling saw.
    pub phases: Vec<PhaseAgreement>,
}

/// Compares exact and sampled phase shares, per outcome both have; outcomes without exec-phase
/// samples or exact time are left out.
pub fn compare(exact: &ExactTiming, sampled: &SampledAttribution) -> Vec<OutcomeAgreement> {
    let mut out = Vec::new();
    for e in &exact.outcomes {
        let Some(s) = sampled.outcomes.iter().find(|s| s.outcome == e.outcome) else { continue };
        let exact_total: f64 = e.phases.iter().filter(|p| !NOT_EXEC.contains(&p.phase.as_str())).map(|p| p.ns_per_attempt).sum();
        let exec_samples: Vec<(&str, u64)> =
            s.phases.iter().filter(|p| !NOT_EXEC.contains(&p.phase.as_str())).map(|p| (p.phase.as_str(), p.estimate.samples)).collect();
        let n: u64 = exec_samples.iter().map(|(_, k)| k).sum();
        if n == 0 || exact_total <= 0.0 {
            continue;
        }
        let phases = exec_samples
            .iter()
            .map(|&(phase, k)| {
                let exact_share = e.phases.iter().find(|p| p.phase == phase).map_or(0.0, |p| p.ns_per_attempt) / exact_total;
                let (lo, hi) = wilson(k, n);
                PhaseAgreement {
                    phase: phase.to_owned(),
                    exact_share,
                    sampled_share: k as f64 / n as f64,
                    sampled_low: lo,
                    sampled_high: hi,
                    samples: k,
                    agree: (lo..=hi).contains(&exact_share),
                }
            })
            .collect();
        out.push(OutcomeAgreement { outcome: e.outcome, samples: n, phases });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{
        attribution::{Estimate, OutcomeAttribution, PhaseLine},
        exact::{OutcomeTiming, PhaseTiming},
    };

    fn est(samples: u64) -> Estimate {
        Estimate {
            samples,
            share: 0.0,
            share_low: 0.0,
            share_high: 0.0,
            ns_per_attempt: 0.0,
            ns_per_attempt_low: 0.0,
            ns_per_attempt_high: 0.0,
            few_samples: false,
        }
    }

    #[test]
    fn compares_normalised_exec_phase_shares() {
        let exact = ExactTiming {
            probed: vec![],
            calls: 0,
            calls_without_attempt: 0,
            calls_unsummed: 0,
            calls_summed: 0,
            outcomes: vec![OutcomeTiming {
                outcome: Outcome::Success,
                attempts: 1,
                mean_ns: 100.0,
                functions: vec![],
                phases: vec![
                    PhaseTiming {
                        phase: "old_mm".into(),
                        label: String::new(),
                        ns_per_attempt: 20.0,
                        share: 0.2,
                        per_attempt: Default::default(),
                    },
                    PhaseTiming {
                        phase: "binfmt".into(),
                        label: String::new(),
                        ns_per_attempt: 60.0,
                        share: 0.6,
                        per_attempt: Default::default(),
                    },
                ],
                unprobed_ns_per_attempt: 20.0,
                off_cpu_ns_per_attempt: 0.0,
                tree: Default::default(),
            }],
        };
        let line = |phase: &str, n| PhaseLine { phase: phase.into(), label: String::new(), estimate: est(n), functions: vec![] };
        let sampled = SampledAttribution {
            samples: 1100,
            samples_without_attempt: 0,
            samples_after_exit: 0,
            samples_before_enter: 0,
            samples_without_stack: 0,
            unknown_addresses: 0,
            delivered_hz: None,
            by_program: Vec::new(),
            outcomes: vec![OutcomeAttribution {
                outcome: Outcome::Success,
                attempts: 1,
                mean_ns: 100.0,
                samples: 1100,
                phases: vec![line("old_mm", 250), line("binfmt", 250), line("new_image", 500), line("tracer", 100)],
                folded: vec![],
                adequacy: None,
                tree: Default::default(),
                on_stack: vec![],
                open_parts: Default::default(),
            }],
        };
        let a = compare(&exact, &sampled);
        assert_eq!(a[0].samples, 1000, "tracer samples left out");
        let p = |n: &str| a[0].phases.iter().find(|p| p.phase == n).unwrap().clone();
        assert_eq!(p("old_mm").exact_share, 0.25);
        assert!(p("old_mm").agree);
        assert_eq!(p("binfmt").exact_share, 0.75);
        assert!(!p("binfmt").agree);
        assert_eq!(p("new_image").exact_share, 0.0);
    }
}
