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
