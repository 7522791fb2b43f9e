//! `execprof completions SHELL` and `execprof man-pages DIR`: shell completion scripts and a
//! man page per command, generated from the same clap definitions as `--help`, so the three
//! never drift apart.
use std::path::Path;

use anyhow::{Context as _, Result};
use clap::CommandFactory as _;

use crate::cli::Cli;

/// The daemon's page goes in section 8 (system administration), the others in 1.
const SECTION_8: &[&str] = &["agent"];

/// SHELL's completion script on standard output.
pub fn completions(shell: clap_complete::Shell) -> Result<()> {
    let mut out = std::io::stdout().lock();
    clap_complete::generate(shell, &mut Cli::command(), "execprof", &mut out);
    Ok(())
}

/// A page per command and subcommand into `dir`: `execprof.1`, `execprof-run.1`,
/// `execprof-bench-chain.1`, `execprof-agent.8`; hidden commands have none.
pub fn man_pages(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut root = Cli::command();
    root.build();
    write_pages(&root, "execprof", "1", dir)
}

fn write_pages(cmd: &clap::Command, name: &str, section: &str, dir: &Path) -> Result<()> {
    let page = cmd.clone().name(name.to_owned()).bin_name(name.replace('-', " "));
    let path = dir.join(format!("{name}.{section}"));
    let mut text = Vec::new();
    clap_mangen::Man::new(page)
        .section(section)
        .manual("execprof manual")
        .source(format!("execprof {}", env!("CARGO_PKG_VERSION")))
        .render(&mut text)?;
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        let section = if name == "execprof" && SECTION_8.contains(&sub.get_name()) { "8" } else { "1" };
        write_pages(sub, &format!("{name}-{}", sub.get_name()), section, dir)?;
    }
    Ok(())
}
