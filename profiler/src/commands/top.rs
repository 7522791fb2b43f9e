//! `execprof top`: the agent's aggregates live in the terminal, a frame a second (ratatui),
//! or one frame printed as text with `--once`.
use std::{
    io::IsTerminal as _,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

use crate::{
    analysis::aggregates::AgentTotals,
    commands::agent::{AgentConfig, AgentSession, fold},
    model::failure::Failure,
    render::top::{TopModel, TopState, View, draw, text},
};

/// Everything `execprof top` needs.
pub struct TopConfig {
    /// The agent's options (scope, capacities, interval).
    pub agent: AgentConfig,
    /// Print one frame after one interval and exit.
    pub once: bool,
}

/// The rows of `view` from the totals.
fn groups(totals: &AgentTotals, view: View) -> std::collections::HashMap<String, crate::analysis::aggregates::GroupRow> {
    match view.group_by() {
        Some(by) => totals.series.groups(by),
        None => totals.misses.groups(),
    }
}

/// Set by SIGTERM and SIGHUP: the loop ends and the terminal is restored.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Runs `top`; returns the exit code.
pub fn top(cfg: TopConfig) -> Result<i32> {
    if !(cfg.once || std::io::stdout().is_terminal() && std::io::stdin().is_terminal()) {
        return Err(Failure::usage("top draws on a terminal and reads keys from it; without one, use --once to print one frame").into());
    }
    let mut session = AgentSession::start(&cfg.agent, "top")?;
    let title = session.describe();
    let started = Instant::now();
    let cap = cfg.agent.max_totals;
    let mut totals = AgentTotals::new(cap);
    let mut last = AgentTotals::new(cap);
    let mut state = TopState::default();
    let read = |session: &mut AgentSession, totals: &mut AgentTotals, last: &mut AgentTotals| -> Result<Option<String>> {
        let poll = session.source.poll(Instant::now())?;
        *last = AgentTotals::new(cap);
        fold(&poll, totals);
        fold(&poll, last);
        let mut losses = crate::report::agent::AgentLosses::new(&poll.counters, totals.series.folded, session.tracer.runs_skipped());
        losses.misses_not_per_directory += totals.misses.folded;
        Ok(losses.summary())
    };
    let model = |totals: &AgentTotals, last: &AgentTotals, view: View, incomplete: Option<String>, interval: Duration| TopModel {
        title: title.clone(),
        elapsed_s: started.elapsed().as_secs_f64(),
        interval_s: interval.as_secs_f64(),
        last: groups(last, view),
        all: groups(totals, view),
        incomplete,
    };
    if cfg.once {
        // The first read sets where the interval starts; the second gives its figures.
        read(&mut session, &mut totals, &mut last)?;
        std::thread::sleep(cfg.agent.interval);
        let incomplete = read(&mut session, &mut totals, &mut last)?;
        // Asked only of a terminal: elsewhere crossterm falls back to running `tput cols` and
        // `tput lines`, two PATH searches and execs a script's frame does not need.
        let width = if std::io::stdout().is_terminal() { ratatui::crossterm::terminal::size().map_or(80, |(w, _)| w.max(80)) } else { 80 };
        print!("{}", text(&model(&totals, &last, state.view, incomplete, cfg.agent.interval), &mut state, width));
        return Ok(0);
    }
    // SAFETY: a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_stop as *const () as libc::sighandler_t);
        libc::signal(libc::SIGHUP, on_stop as *const () as libc::sighandler_t);
    }
    let mut terminal = ratatui::try_init().context("setting up the terminal")?;
    let result = (|| -> Result<()> {
        let mut incomplete = read(&mut session, &mut totals, &mut last)?;
        let mut next = Instant::now() + cfg.agent.interval;
        loop {
            let m = model(&totals, &last, state.view, incomplete.clone(), cfg.agent.interval);
            terminal.draw(|f| draw(f.area(), f.buffer_mut(), &m, &mut state)).context("drawing the frame")?;
            let wait = next.saturating_duration_since(Instant::now()).min(Duration::from_millis(250));
            if event::poll(wait).context("reading the terminal")?
                && let Event::Key(k) = event::read().context("reading the terminal")?
                && k.kind == KeyEventKind::Press
            {
                match k.code {
                    KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                    KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => return Ok(()),
                    KeyCode::Char('s') => state.sort = state.sort.next(),
                    KeyCode::Char('p') => state.view = View::Programs,
                    KeyCode::Char('c') => state.view = View::Cgroups,
                    KeyCode::Char('d') => state.view = View::Directories,
                    KeyCode::Down => state.table.select_next(),
                    KeyCode::Up => state.table.select_previous(),
                    _ => {}
                }
            }
            if STOP.load(Ordering::Relaxed) || session.scope_gone() {
                return Ok(());
            }
            if Instant::now() >= next {
                incomplete = read(&mut session, &mut totals, &mut last)?;
                next += cfg.agent.interval;
            }
        }
    })();
    ratatui::restore();
    result.map(|()| 0)
}
