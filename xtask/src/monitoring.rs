//! The Prometheus rules in `monitoring/`, checked with Debian's `promtool` (unpacked by set-up
//! for the tests): `check rules` (syntax, PromQL, names) and `test rules` (every alert's unit
//! tests in `execprof.rules.test.yml`); and every metric they name is one the agent serves
//! (the table of docs/agent.md, which the agent's tests hold to its output).
#[cfg(test)]
mod tests {
    use std::{path::PathBuf, process::Command};

    fn monitoring() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../monitoring")
    }

    fn promtool(args: &[&str]) -> String {
        let tool = crate::unpacked::tool("promtool");
        let out = Command::new(&tool)
            .args(args)
            .current_dir(monitoring())
            .output()
            .unwrap_or_else(|e| panic!("running {} ({e}): `cargo xtask setup` unpacks Debian's prometheus", tool.display()));
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "promtool {}:\n{said}", args.join(" "));
        said
    }

    #[test]
    fn the_rules_pass_promtools_check() {
        let said = promtool(&["check", "rules", "execprof.rules.yml"]);
        assert!(said.contains("SUCCESS"), "{said}");
    }

    #[test]
    fn every_alert_passes_its_unit_tests() {
        let said = promtool(&["test", "rules", "execprof.rules.test.yml"]);
        assert!(said.contains("SUCCESS"), "{said}");
        // Every alert has a case that fires.
        let rules = std::fs::read_to_string(monitoring().join("execprof.rules.yml")).unwrap();
        let tests = std::fs::read_to_string(monitoring().join("execprof.rules.test.yml")).unwrap();
        for alert in rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")) {
            let fires = tests.split("alertname: ").skip(1).any(|case| case.starts_with(alert) && case.contains("exp_alerts:"));
            assert!(fires, "no unit test in execprof.rules.test.yml where {alert} fires");
        }
    }

    #[test]
    fn the_rules_name_only_metrics_the_agent_serves() {
        let rules = std::fs::read_to_string(monitoring().join("execprof.rules.yml")).unwrap();
        let table = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/agent.md")).unwrap();
        let served: Vec<&str> = table.lines().filter_map(|l| l.strip_prefix("| `")?.split('`').next()).collect();
        assert!(served.len() > 20, "docs/agent.md's metric table not found");
        let exprs = rules.lines().filter(|l| !l.trim_start().starts_with('#') && !l.contains("record:") && !l.contains("alert:"));
        for word in exprs.flat_map(|l| l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))) {
            let Some(name) = word.strip_prefix("execprof_").map(|_| word) else { continue };
            let base = ["_bucket", "_count", "_sum"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
            assert!(served.contains(&name) || served.contains(&base), "the rules name {name}, which the agent does not serve");
        }
    }
}
