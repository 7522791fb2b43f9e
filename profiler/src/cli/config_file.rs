//! `agent --config FILE`: a TOML file whose keys are the agent's long option names. Its
//! entries become those options, placed ahead of the command line's, so the file and the flags
//! cannot drift apart, clap checks both the same way, and an option given on the command line
//! wins over the file's (the agent's options override themselves).
use std::{ffi::OsString, path::Path};

use clap::{CommandFactory as _, Parser as _};

use super::{Cli, Command};
use crate::model::failure::Failure;

/// The largest configuration file read: a commented one is a few kilobytes.
const MAX_BYTES: u64 = 1 << 20;

/// `argv` with the options of `agent --config FILE` spliced in after `agent`; `argv` itself
/// when there is no `--config` (or the command line does not parse: clap then says why).
pub fn expand(argv: Vec<OsString>) -> Result<Vec<OsString>, Failure> {
    let Ok(cli) = Cli::try_parse_from(&argv) else { return Ok(argv) };
    let Command::Agent(args) = cli.command else { return Ok(argv) };
    let Some(path) = args.config else { return Ok(argv) };
    let options = options(&path, &read(&path)?)?;
    let at = argv.iter().position(|a| a == "agent").expect("the agent command parsed, so its name is there") + 1;
    let expanded: Vec<OsString> = argv[..at].iter().cloned().chain(options).chain(argv[at..].iter().cloned()).collect();
    match Cli::try_parse_from(&expanded) {
        Ok(_) => Ok(expanded),
        Err(e) => {
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or_default().trim_start_matches("error: ");
            Err(Failure::usage(format!(
                "{}: {first}; its keys are `execprof agent`'s long option names (see execprof agent --help)",
                path.display()
            )))
        }
    }
}

fn read(path: &Path) -> Result<String, Failure> {
    use std::io::Read as _;
    let file =
        std::fs::File::open(path).map_err(|e| Failure::usage(format!("cannot open the configuration file {}: {e}", path.display())))?;
    let mut text = String::new();
    file.take(MAX_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| Failure::usage(format!("cannot read the configuration file {}: {e} (it must be UTF-8 TOML)", path.display())))?;
    if text.len() as u64 > MAX_BYTES {
        return Err(Failure::usage(format!("{} is over {MAX_BYTES} bytes: is it the agent's configuration file?", path.display())));
    }
    Ok(text)
}

/// The options a configuration file's text stands for, in its keys' order: `key = "v"` and
/// `key = 3` become `--key=v` and `--key=3`, `key = true` becomes `--key` (`false` nothing),
/// `key = [a, b]` repeats the option. Keys are checked against the agent's options.
pub fn options(path: &Path, text: &str) -> Result<Vec<OsString>, Failure> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let at = e.span().map(|s| format!(" at line {}", text[..s.start].lines().count().max(1))).unwrap_or_default();
        Failure::usage(format!("{} is not valid TOML{at}: {}", path.display(), e.message()))
    })?;
    let command = Cli::command();
    let agent = command.find_subcommand("agent").expect("the agent command");
    let known: Vec<&str> = agent.get_arguments().filter_map(|a| a.get_long()).collect();
    let mut out = Vec::new();
    for (key, value) in &table {
        if key == "config" {
            return Err(Failure::usage(format!("{}: `config` names another file; put its options in this one", path.display())));
        }
        if !known.contains(&key.as_str()) || key == "help" {
            return Err(Failure::usage(format!(
                "{}: unknown key `{key}`: the keys are `execprof agent`'s long option names ({})",
                path.display(),
                known.iter().filter(|k| !matches!(**k, "help" | "config")).copied().collect::<Vec<_>>().join(", ")
            )));
        }
        let values: Vec<&toml::Value> = match value {
            toml::Value::Array(items) => items.iter().collect(),
            v => vec![v],
        };
        for v in values {
            let arg = match v {
                toml::Value::String(s) => format!("--{key}={s}"),
                toml::Value::Integer(n) => format!("--{key}={n}"),
                toml::Value::Float(x) => format!("--{key}={x}"),
                toml::Value::Boolean(true) => format!("--{key}"),
                toml::Value::Boolean(false) => continue,
                other => {
                    return Err(Failure::usage(format!(
                        "{}: `{key}` is a {}; give a string, a number, true or false, or a list of them",
                        path.display(),
                        other.type_str()
                    )));
                }
            };
            out.push(OsString::from(arg));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(text: &str) -> Result<Vec<String>, String> {
        options(Path::new("agent.toml"), text).map(|v| v.into_iter().map(|o| o.into_string().unwrap()).collect()).map_err(|f| f.message)
    }

    #[test]
    fn keys_become_the_long_options() {
        let text = "# comment\nlisten = \"127.0.0.1:9435\"\nsample-hz = 99\ninterval = 0.5\nprobe-costs = true\nall = false\n\
                    metrics-program = [\"/usr/bin/make\", \"/usr/bin/.*cc\"]\n";
        // In the keys' order (each option once but for lists, so the order does not matter).
        assert_eq!(
            opts(text).unwrap(),
            [
                "--interval=0.5",
                "--listen=127.0.0.1:9435",
                "--metrics-program=/usr/bin/make",
                "--metrics-program=/usr/bin/.*cc",
                "--probe-costs",
                "--sample-hz=99"
            ]
        );
    }

    /// The package's /etc/execprof/agent.toml is read as it is, and each commented-out
    /// example is a real option too.
    #[test]
    fn the_packaged_file_and_its_examples_are_options() {
        let text = include_str!("../../../packaging/agent.toml");
        assert_eq!(opts(text).unwrap(), ["--listen=127.0.0.1:9435"]);
        let examples: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# "))
            .filter(|l| l.split_once(" = ").is_some_and(|(k, _)| !k.contains(' ')))
            .collect();
        assert!(examples.len() >= 8, "{examples:?}");
        for line in examples {
            assert!(opts(line).is_ok_and(|o| !o.is_empty()), "{line}: {:?}", opts(line));
        }
    }

    /// The Kubernetes DaemonSet's agent.toml (its ConfigMap's, in deploy/kubernetes/) is a
    /// configuration the agent takes, whole command line parsed.
    #[test]
    fn the_kubernetes_configmaps_file_is_the_agents_options() {
        let manifest = include_str!("../../../deploy/kubernetes/execprof.yaml");
        let start = manifest.find("  agent.toml: |\n").expect("the ConfigMap's agent.toml") + "  agent.toml: |\n".len();
        let text: String = manifest[start..]
            .lines()
            .take_while(|l| l.is_empty() || l.starts_with("    "))
            .map(|l| format!("{}\n", l.get(4..).unwrap_or_default()))
            .collect();
        let options = opts(&text).unwrap();
        assert_eq!(options, ["--listen=0.0.0.0:9435", "--sample-hz=99"]);
        let argv = ["execprof", "agent"].into_iter().map(String::from).chain(options);
        Cli::try_parse_from(argv).unwrap();
    }

    #[test]
    fn bad_files_are_named_with_what_to_do() {
        let e = opts("listen = \n").unwrap_err();
        assert!(e.starts_with("agent.toml is not valid TOML at line 1"), "{e}");
        let e = opts("lisen = \"1\"\n").unwrap_err();
        assert!(e.contains("unknown key `lisen`") && e.contains("listen"), "{e}");
        let e = opts("config = \"x\"\n").unwrap_err();
        assert!(e.contains("another file"), "{e}");
        let e = opts("listen = { port = 1 }\n").unwrap_err();
        assert!(e.contains("`listen` is a table"), "{e}");
    }
}
