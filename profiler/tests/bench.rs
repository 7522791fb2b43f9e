//! The spawn benchmark's known direction (no root needed): fork+exec slows by a large factor
//! when the parent has a big dirty heap, while vfork, posix_spawn and clone(VM|VFORK) stay
//! near flat (published: ~300x at 200 MB fragmented and dirty).
use assert_cmd::Command;
use serde_json::Value;

fn spawn_bench(iterations: u32, extra: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("spawn.json");
    Command::new(env!("CARGO_BIN_EXE_execprof"))
        .args(["bench", "spawn", "--iterations", &iterations.to_string(), "--json"])
        .arg(&json)
        .args(extra)
        .assert()
        .success();
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

/// One method's child-start statistic (`p50_ns`, `min_ns`) in nanoseconds.
fn child_start(v: &Value, method: &str, stat: &str) -> f64 {
    v["results"].as_array().unwrap().iter().find(|r| r["method"] == method).unwrap()["child_start_ns"][stat].as_f64().unwrap()
}

#[test]
fn fork_exec_degrades_with_a_big_dirty_parent_and_vfork_methods_do_not() {
    let guest = execprof::testing::slowdown() > 1;
    // Whatever else runs steals time from any spawn: under emulation (another guest beside
    // it) the median of 20 was seen at 2.2x for a vfork method beside fork+exec's 4.0x, and
    // here, with builds beside the suite, a vfork method's median at 33.6x. Stolen time only
    // adds, so the fastest of 40 spawns measures the spawn itself; and the lean and big
    // parents alternate, four rounds of 10 each, so a build that starts or ends midway (a
    // vfork method once measured 4.8x as fastest of 40 taken all before the lean ones)
    // weighs on both sides alike.
    let (rounds, iterations, stat) = (4, 10, "min_ns");
    let (mut lean, mut big) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        lean.push(spawn_bench(iterations, &[]));
        big.push(spawn_bench(iterations, &["--mem", "1G", "--dirty"]));
    }
    let fastest = |runs: &[Value], m: &str| runs.iter().map(|v| child_start(v, m, stat)).fold(f64::INFINITY, f64::min);
    let ratio = |m: &str| fastest(&big, m) / fastest(&lean, m);
    let others: Vec<(&str, f64)> = ["vfork-exec", "posix-spawn", "clone-vfork"].into_iter().map(|m| (m, ratio(m))).collect();
    let fork = ratio("fork-exec");
    if guest {
        // Everything is slower there, the page-table copy less so than the rest: the same
        // direction, smaller factors.
        let worst = others.iter().map(|o| o.1).fold(0.0, f64::max);
        // 1.25: with three guests side by side on two CPUs, arm64 measured fork+exec 2.5x
        // against 1.8x for a vfork method (and 4.0x against 2.2x before).
        assert!(fork > 1.25 * worst, "fork+exec slowed {fork:.1}x, the vfork methods up to {worst:.1}x: {others:?}");
    } else {
        // Typically 10-30x here; 5x leaves room for a busy machine (9.0x was seen while a
        // build ran beside the suite) and still far above the vfork methods' bound.
        assert!(fork > 5.0, "fork+exec slowed only {fork:.1}x");
        for (m, r) in others {
            assert!(r < 3.0, "{m} slowed {r:.1}x with a big parent");
        }
    }
}

/// `bench chain --lookup-first`: the plain and the lookup-first chain in the same rounds,
/// each round both (which one first alternates), and the paired difference with its method.
#[test]
fn lookup_first_runs_beside_the_plain_chain_in_the_same_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("chain.json");
    let out = Command::new(env!("CARGO_BIN_EXE_execprof"))
        .args(["bench", "chain", "--lookup-first", "--steps", "200", "--rounds", "3", "--json"])
        .arg(&json)
        .assert()
        .success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(text.contains("B − A per step") && text.contains("access(2)"), "{text}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["a"]["lookup_first"], false);
    assert_eq!(v["b"]["lookup_first"], true);
    assert_eq!(v["rounds"].as_array().unwrap().len(), 3);
    assert!(v["b_minus_a_wall_ns_per_step"]["method"].as_str().unwrap().starts_with("range"), "3 rounds are too few for a 95% interval");
}
