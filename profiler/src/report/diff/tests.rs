use super::flame::differential_lines;
use crate::analysis::{attribution::OutcomeAttribution, outcome::Outcome};

fn sampled(attempts: u64, mean_ns: f64, folded: &[(&str, u64)]) -> OutcomeAttribution {
    OutcomeAttribution {
        outcome: Outcome::Enoent,
        attempts,
        mean_ns,
        samples: folded.iter().map(|(_, n)| n).sum(),
        phases: vec![],
        folded: folded.iter().map(|(s, n)| (s.to_string(), *n)).collect(),
        adequacy: None,
        tree: Default::default(),
        on_stack: vec![],
        open_parts: Default::default(),
    }
}

#[test]
fn differential_flame_lines_are_time_per_attempt_not_sample_counts() {
    // A: 10 samples, mean 1 µs, half in the walk. B: sampled 10× as often (100 samples), same
    // mean and split: per attempt nothing changed, whatever the counts.
    let a = sampled(1_000, 1_000.0, &[("do_open_execat;link_path_walk", 5), ("do_open_execat", 5)]);
    let b = sampled(1_000, 1_000.0, &[("do_open_execat;link_path_walk", 50), ("do_open_execat", 50)]);
    assert_eq!(differential_lines(&a, &b), vec!["do_open_execat 500000 500000", "do_open_execat;link_path_walk 500000 500000"]);
    // A stack present on one side only is 0 on the other.
    let c = sampled(1_000, 2_000.0, &[("do_open_execat;link_path_walk", 1), ("alloc_empty_file", 1)]);
    assert_eq!(
        differential_lines(&a, &c),
        vec!["alloc_empty_file 0 1000000", "do_open_execat 500000 0", "do_open_execat;link_path_walk 500000 1000000"]
    );
}

mod per_chain_step {
    use super::super::{Diff, Unit, compare, render};
    use crate::{
        analysis::outcome::Outcome,
        report::test_support::{chain_spec, meta, report, steps},
    };

    fn enoent(d: &Diff) -> &super::super::OutcomeChange {
        d.outcomes.iter().find(|o| o.outcome == Outcome::Enoent).unwrap()
    }

    /// The built-in chain: 3 steps of 2 misses (10 attempts: 4 successes, 6 ENOENT).
    fn chain() -> crate::report::RunReport {
        report(meta(&["execprof-chain", "3"], Some(chain_spec(3, 2))), &steps(1, 3, 2, 1_000, |s| 40_000 + s * 1_000), None)
    }

    #[test]
    fn a_chain_against_a_command_that_execs_twice_is_weighed_per_exec_attempt() {
        // `sh -c 'for ...; exec env true'`: 40 misses, then one exec-to-exec step of its own
        // (42 attempts). The analysis finds a chain step in it; the diff must not use it.
        let command = report(meta(&["sh", "-c", "..."], None), &steps(7, 1, 40, 1_500, |s| 50_000 + s * 1_000), None);
        assert_eq!(command.analysis.chain.as_ref().map(|c| c.steps), Some(1), "the command has an exec-to-exec step");
        for (a, b) in [(&chain(), &command), (&command, &chain())] {
            let d = compare("a", a, "b", b);
            assert_eq!(d.unit, Unit::ExecAttempt);
            assert!(d.step.is_none(), "no chain-step row unless both are the built-in chain");
            assert_eq!(d.a.steps.is_some(), a.meta.chain.is_some());
            assert_eq!(d.b.steps.is_some(), b.meta.chain.is_some());
            let text = render(&d, &Default::default());
            assert!(!text.contains("attempts per chain step") && !text.contains("chain step   "), "{text}");
            assert!(text.contains("not both runs of the built-in chain"), "{text}");
        }
        // Per exec attempt of any outcome: 6 of 10, 40 of 42.
        let d = compare("a", &chain(), "b", &command);
        assert_eq!((enoent(&d).per_unit_a, enoent(&d).per_unit_b), (0.6, 40.0 / 42.0));
        let text = render(&d, &Default::default());
        assert!(text.contains("0.60 → 0.95 attempts per exec attempt (any outcome)"), "{text}");
        assert!(text.contains("3 chain steps") && !text.contains("1 chain steps"), "only the built-in chain's steps are named: {text}");
    }

    #[test]
    fn two_chains_are_weighed_per_chain_step() {
        let other = report(meta(&["execprof-chain", "5"], Some(chain_spec(5, 1))), &steps(1, 5, 1, 1_000, |_| 40_000), None);
        let d = compare("a", &chain(), "b", &other);
        assert_eq!(d.unit, Unit::ChainStep);
        assert_eq!((enoent(&d).per_unit_a, enoent(&d).per_unit_b), (2.0, 1.0));
        assert_eq!((d.a.steps, d.b.steps), (Some(3), Some(5)));
        assert!(d.step.is_some());
        let text = render(&d, &Default::default());
        assert!(text.contains("2.00 → 1.00 attempts per chain step") && !text.contains("not both"), "{text}");
    }
}
