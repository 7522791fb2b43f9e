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

    /// An amd64 and an arm64 recording of the same chain: a warning names both, and the lines
    /// are still compared by function name.
    #[test]
    fn recordings_of_different_architectures_are_warned_about_and_still_compared() {
        let mut b = chain();
        b.meta.kernel.machine = "aarch64".into();
        let d = compare("a", &chain(), "b", &b);
        let w = d
            .warnings
            .iter()
            .find(|w| w.starts_with("the recordings are of different architectures: A x86_64, B aarch64"))
            .expect("a warning");
        assert!(w.contains("compared where the function names match"), "{w}");
        assert_eq!((enoent(&d).count_a, enoent(&d).count_b), (6, 6));
        assert!(!compare("a", &chain(), "b", &chain()).warnings.iter().any(|w| w.contains("architectures")));
    }

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
        assert!(d.step.as_ref().and_then(|s| s.median_change).is_some_and(|c| c.bounds.is_some()));
    }

    #[test]
    fn one_chain_step_has_no_interval() {
        let one = report(meta(&["execprof-chain", "1"], Some(chain_spec(1, 2))), &steps(1, 1, 2, 1_000, |_| 90_000), None);
        let d = compare("a", &chain(), "b", &one);
        let step = d.step.as_ref().expect("both chains");
        assert!(step.median_b.unwrap().bounds.is_none() && step.median_change.unwrap().bounds.is_none() && !step.significant);
        let text = render(&d, &Default::default());
        let row = text.lines().find(|l| l.trim_start().starts_with("chain step")).unwrap();
        assert!(row.contains("(n=1)") && row.ends_with("n<2"), "{row}");
    }
}

/// Figures from too few attempts: no interval, no test; outcomes without attempts say so.
mod few_observations {
    use super::super::{Diff, OutcomeChange, compare, render};
    use crate::{
        analysis::{outcome::Outcome, test_support::attempt},
        assemble::events::{Event, Sample},
        report::{
            RunReport,
            test_support::{meta, report},
        },
    };

    struct Table;
    impl crate::analysis::attribution::Symbolizer for Table {
        fn symbolize(&self, addrs: &[u64]) -> Vec<Option<String>> {
            addrs.iter().map(|&a| (a == 0x20).then(|| "mm_alloc".to_owned())).collect()
        }
    }

    /// Successful execs of these latencies (ns) and `enoent` failed ones of 1 µs, each with one
    /// sample in mm_alloc.
    fn run(successes: &[u64], enoent: u64) -> RunReport {
        let mut events = Vec::new();
        let mut t = 0;
        let mut push = |ns: u64, ret: i64| {
            let mut a = attempt(1, t, t + ns, ret, Some(0));
            a.inside.samples = vec![Sample { ts_ns: t + 1, pid: 1, frames: vec![0x20] }];
            events.push(Event::Exec(a));
            t += 10_000_000;
        };
        successes.iter().for_each(|&ns| push(ns, 0));
        (0..enoent).for_each(|i| push(1_000 + i * 10, -2));
        report(meta(&["t"], None), &events, Some((&[0x20], &Table)))
    }

    fn outcome(d: &Diff, o: Outcome) -> &OutcomeChange {
        d.outcomes.iter().find(|c| c.outcome == o).unwrap()
    }

    #[test]
    fn one_attempt_a_side_has_no_interval_and_is_never_significant() {
        // The "+2.43 ms [+2.43 … +2.43] yes": one attempt each side, 2.43 ms apart.
        let d = compare("a", &run(&[1_000_000], 0), "b", &run(&[3_430_000], 0));
        let s = outcome(&d, Outcome::Success);
        let change = s.latency.median_change.unwrap();
        assert_eq!((change.value, change.bounds), (2_430_000.0, None));
        assert!(!s.latency.significant);
        assert!(s.latency.median_a.unwrap().bounds.is_none() && s.latency.mean_change.unwrap().bounds.is_none());
        assert!(s.per_unit_change.bounds.is_none());
        assert!(!d.lines.is_empty(), "mm_alloc has lines");
        for l in &d.lines {
            assert!(l.change.bounds.is_none() && l.per_unit_change.bounds.is_none(), "{l:?}");
            assert_eq!((l.p_value, l.per_unit_p_value, l.significant, l.per_unit_significant), (None, None, false, false), "{l:?}");
        }
        let text = render(&d, &Default::default());
        let row = text.lines().find(|l| l.trim_start().starts_with("success ")).unwrap();
        assert!(row.contains("1.00 ms (n=1)") && row.contains("3.43 ms (n=1)") && row.ends_with("+2.43 ms   n<2"), "{row}");
        assert!(!text.contains("[+2.43"), "{text}");
        assert!(text.contains(&format!("{0} of {0} lines not tested (n<2)", d.lines.len())), "{text}");
        assert!(!text.contains("changed significantly"), "nothing was tested: {text}");
        // JSON: the value, no ends, not significant.
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["outcomes"][0]["median_change"], serde_json::json!({ "value": 2_430_000.0 }));
        assert_eq!(v["outcomes"][0]["significant"], false);
        assert_eq!(v["lines"][0]["p_value"], serde_json::Value::Null);
    }

    #[test]
    fn one_attempt_against_many_is_not_tested_either() {
        let a = run(&[1_000_000, 1_010_000, 990_000, 1_020_000], 0);
        let d = compare("a", &a, "b", &run(&[3_430_000], 0));
        let s = outcome(&d, Outcome::Success);
        assert!(s.latency.median_a.unwrap().bounds.is_some(), "A's own median keeps its interval");
        assert!(s.latency.median_b.unwrap().bounds.is_none() && s.latency.median_change.unwrap().bounds.is_none());
        assert!(!s.latency.significant && d.lines.iter().all(|l| l.p_value.is_none() && !l.significant));
        // Two attempts a side are enough: intervals, and a test that finds the change.
        let d = compare("a", &a, "b", &run(&[3_430_000, 3_440_000], 0));
        let s = outcome(&d, Outcome::Success);
        let change = s.latency.median_change.unwrap().interval().expect("an interval from two attempts");
        assert!(change.low > 0.0 && s.latency.significant, "{change:?}");
        assert!(d.lines.iter().all(|l| l.p_value.is_some()));
        let text = render(&d, &Default::default());
        assert!(!text.contains("n<2") && text.contains("lines changed significantly per attempt (Holm-corrected over all"), "{text}");
    }

    #[test]
    fn an_outcome_without_attempts_says_so() {
        // A: 2 successes and 4 ENOENT; B: 2 successes, no ENOENT at all.
        let d = compare("a", &run(&[40_000, 41_000], 4), "b", &run(&[40_000, 41_000], 0));
        let e = outcome(&d, Outcome::Enoent);
        assert_eq!((e.count_a, e.count_b), (4, 0));
        assert!(e.latency.median_b.is_none() && e.latency.mean_b.is_none(), "no latency, not a latency of 0");
        assert!(e.latency.median_change.is_none() && e.latency.mean_change.is_none() && !e.latency.significant);
        // Per unit, B spends exactly nothing in ENOENT: the change is A's share, with A's interval.
        let per_unit = e.per_unit_change.interval().expect("known: B adds exactly 0");
        let a_mean = 1_015.0; // 1000, 1010, 1020, 1030 ns
        assert!((per_unit.value + a_mean * 4.0 / 6.0).abs() < 1e-6, "{per_unit:?}");
        let text = render(&d, &Default::default());
        let row = text.lines().find(|l| l.trim_start().starts_with("ENOENT ")).unwrap();
        assert!(row.contains("no attempts") && row.ends_with(" -     -"), "{row}");
        assert!(text.contains("mean 1.01 µs → (no attempts);"), "{text}");
        assert!(!text.contains("0 ns [0 ns – 0 ns]") && !text.contains("[0 ns … 0 ns]"), "{text}");
        assert!(text.contains("no attempts: the outcome did not occur on that side"), "{text}");
        let v = serde_json::to_value(&d).unwrap();
        let enoent = v["outcomes"].as_array().unwrap().iter().find(|o| o["outcome"] == "enoent").unwrap();
        assert_eq!((&enoent["median_b"], &enoent["median_change"]), (&serde_json::Value::Null, &serde_json::Value::Null));
    }

    #[test]
    fn json_reads_back_as_the_same_diff() {
        // xtask reads diffs through this type: figures with and without intervals both survive.
        let d = compare("a", &run(&[40_000, 41_000], 4), "b", &run(&[3_430_000], 0));
        let json = serde_json::to_string(&d).unwrap();
        let back: Diff = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
        assert_eq!(render(&back, &Default::default()), render(&d, &Default::default()));
    }
}

mod who_pays_side_by_side {
    use super::super::{compare, render};
    use crate::{
        analysis::{
            identity::Program,
            test_support::{PATH, exec, who_pays},
        },
        assemble::events::Event,
        report::test_support::{chain_spec, meta, report},
    };

    /// The synthetic machine, attached (its process table read at attach); `drop_first_dir`
    /// takes away cc's misses in PATH's first directory, as moving it down PATH would.
    fn machine(drop_first_dir: bool) -> crate::report::RunReport {
        let (table, events) = who_pays();
        let first = format!("{}/cc", PATH[0]);
        let events: Vec<Event> =
            events.into_iter().filter(|e| !(drop_first_dir && matches!(e, Event::Exec(x) if x.name.bytes == first.as_bytes()))).collect();
        let mut m = meta(&["sleep", "10"], None);
        m.preexisting = table;
        m.scope = crate::model::scope::Scope::All;
        let mut r = report(m, &events, None);
        r.command_wall_ns = 10_000_000_000;
        r
    }

    #[test]
    fn two_machine_traces_compare_programs_searches_and_directories() {
        let d = compare("a", &machine(false), "b", &machine(true));
        let w = d.who_pays.as_ref().expect("attached scopes show who pays");
        let s = &w.searches;
        // 10 cc searches of 2 misses and one ccache search of 3 in A; B's cc searches miss once.
        // 13 searches: make's exec, 10 of cc, ccache's (not found), and `true`.
        assert_eq!((s.searches.a, s.searches.b), (13, 13), "{s:?}");
        assert_eq!((s.misses.a, s.misses.b), (23, 13));
        assert_eq!((s.not_found.a, s.not_found.b), (1, 1));
        let first = &s.missed_dirs[0];
        assert_eq!((first.dir.as_str(), first.misses.a, first.misses.b), (PATH[0], 11, 1), "largest change first");
        assert_eq!((first.miss_ns.a, first.miss_ns.b), (10 * 1_000 + 1_200, 1_200));
        let others: Vec<_> = s.missed_dirs[1..].iter().map(|d| (d.misses.a, d.misses.b)).collect();
        assert_eq!(others, vec![(1, 1), (11, 11)], "{:?}", s.missed_dirs);
        // The failed attempts are make's (its children fail before their first exec).
        let make = &w.programs[0];
        assert_eq!(make.program, Program::Exe { exe: "/usr/bin/make".into(), comm: None });
        assert_eq!((make.attempts.a, make.attempts.b, make.failed.a, make.failed.b), (33, 23, 23, 13));
        assert_eq!(make.exec_ns_change(), -10_000);
        assert_eq!((make.misses.a, make.misses.b, make.fork_calls.a, make.fork_calls.b), (23, 13, 11, 11));
        assert!(!w.windows_differ());
        let text = render(&d, &Default::default());
        let section = &text[text.find("Who pays").expect("the section")..];
        assert!(section.starts_with("Who pays (each run's totals over its own window: A 10.0 s, B 10.0 s;"), "{section}");
        let row = section.lines().find(|l| l.ends_with("/usr/bin/make")).expect("make's row");
        assert_eq!(row.split_whitespace().take(7).collect::<Vec<_>>(), ["33", "23", "23", "13", "629", "µs", "619"], "{row}");
        assert!(row.contains(" -10.0 µs "), "{row}");
        let misses = section.lines().find(|l| l.trim_start().starts_with("misses  ")).unwrap();
        assert_eq!(misses.split_whitespace().collect::<Vec<_>>(), ["misses", "23", "13", "-10"]);
        let per = section.lines().find(|l| l.trim_start().starts_with("misses per search")).unwrap();
        assert!(per.ends_with("1.77       1.00      -0.77"), "{per}");
        let dir = section.lines().find(|l| l.ends_with(PATH[0])).unwrap();
        assert_eq!(dir.split_whitespace().take(3).collect::<Vec<_>>(), ["11", "1", "-10"]);
        // The JSON carries it, and reads back.
        let back: super::super::Diff = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        assert_eq!(back.who_pays.as_ref(), Some(w));
    }

    #[test]
    fn windows_of_different_lengths_are_named_in_a_warning() {
        let mut b = machine(true);
        b.command_wall_ns = 30_000_000_000;
        let d = compare("a", &machine(false), "b", &b);
        assert!(d.who_pays.as_ref().unwrap().windows_differ());
        assert!(d.warnings.iter().any(|w| w.starts_with("the traced windows differ in length: A 10.0 s, B 30.0 s")), "{:?}", d.warnings);
    }

    /// A command's searches twice: every count agrees, so there is nothing to say about who
    /// pays; one whose searches miss more than the other's shows its searches.
    #[test]
    fn launched_runs_show_the_section_only_when_a_count_differs() {
        let chain = |misses: u32| {
            let mut events = vec![exec(100, "/t/bin/chain", 0, 0, 40_000)];
            for step in 1..=3u64 {
                for m in 0..u64::from(misses) {
                    events.push(exec(100, &format!("/t/m{m}/chain"), -2, step * 100_000 + m * 2_000, 1_000));
                }
                events.push(exec(100, "/t/bin/chain", 0, step * 100_000 + 50_000, 40_000));
            }
            report(meta(&["sh", "-c", "..."], None), &events, None)
        };
        assert!(compare("a", &chain(2), "b", &chain(2)).who_pays.is_none());
        // The built-in chain's own searches are its design: no section, whatever the counts.
        let builtin = |misses: u32| {
            let mut r = chain(misses);
            r.meta.chain = Some(chain_spec(3, misses));
            r
        };
        assert!(builtin(2).analysis.chain.is_some());
        assert!(compare("a", &builtin(2), "b", &builtin(3)).who_pays.is_none());
        let d = compare("a", &chain(2), "b", &chain(3));
        let s = &d.who_pays.as_ref().expect("the searches differ").searches;
        assert_eq!((s.misses.a, s.misses.b), (6, 9), "{s:?}");
        assert!(d.who_pays.as_ref().unwrap().programs.is_empty(), "one program: no programs table");
        assert!(render(&d, &Default::default()).contains("PATH searches"));
    }
}
