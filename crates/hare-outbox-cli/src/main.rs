//! The `hare-outbox` command: `migrate`, `schema`, `capture`, `relay`, `events`, `backlog`,
//! `dead-letters`, `cleanup`, `serve` and `demo`.
//!
//! Exit codes: 0 after a clean stop, 2 for a bad config file, option or environment variable, 1
//! for a failure at run time, 3 when `capture status` finds a capture missing or drifted, 4 when
//! `backlog` finds a threshold passed. Logs and progress bars go to stderr; events delivered to
//! stdout and command reports go to stdout.
//!
//! # Layers
//!
//! The modules, in layers: each imports only from the layers below it, never from its own or
//! one above (checked on the sources by `layering_tests`).
//!
//! ```text
//! main.rs    parses the command line, dispatches to one `cmd` module
//! cmd/       one file per subcommand; a command never imports another command
//! db         the backend a database URL selects, connecting, schema versions
//! args, ui   the command line (clap types, value parsers); what is shown (progress bars,
//!            table cells, events as JSON lines); neither imports the other
//! config/    the config file, the environment and their precedence: every section (delivery,
//!            wakeup, backlog, cleanup, dashboard, relay, captures) resolved to `Settings`;
//!            inside it, mod.rs over the section modules over the leaf `values`
//! error      usage errors, exit codes, URL redaction
//! ```

use std::process::ExitCode;

use clap::Parser as _;
use hare_outbox::CancellationToken;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;

mod config;
mod error;
#[macro_use]
mod db;
mod args;
mod cmd;
#[cfg(test)]
mod config_examples_tests;
#[cfg(test)]
mod layering_tests;
mod ui;

use args::{CaptureCommand, Cli, Command, DeadLettersCommand};
use error::{EXIT_OK, EXIT_USAGE, exit_code};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_filter = match cli.command {
        // The demo prints its own journal; library warnings about the simulated failures would
        // only repeat it.
        Command::Demo(_) => "error",
        _ => "info",
    };
    if let Err(e) = init_logging(cli.log_level.as_deref(), default_filter) {
        eprintln!("hare-outbox: {e}");
        return ExitCode::from(EXIT_USAGE);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("hare-outbox: cannot start the async runtime: {e}");
            return ExitCode::from(error::EXIT_RUNTIME);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(e) => {
            let code = exit_code(&e);
            if code == error::EXIT_DRIFT || code == error::EXIT_THRESHOLD {
                // Not a failure of the command: its finding.
                eprintln!("hare-outbox: {}", error::render(&e));
            } else {
                eprintln!("hare-outbox: error: {}", error::render(&e));
            }
            ExitCode::from(code)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let Cli {
        config,
        database_url,
        table,
        command,
        ..
    } = cli;
    if let Command::Demo(args) = command {
        let shutdown = CancellationToken::new();
        watch_signals(shutdown.clone(), "stopping the workload and the relay");
        return cmd::demo::run(args, shutdown).await;
    }
    let overrides = config::Overrides {
        database_url,
        table,
    };
    let env = |name: &str| std::env::var(name).ok();
    let settings = config::load(config.as_deref(), overrides, &env)?;
    for warning in &settings.warnings {
        tracing::warn!("{warning}");
    }
    match command {
        Command::Migrate(args) if args.status => cmd::migrate::status(&settings).await,
        Command::Migrate(_) => cmd::migrate::migrate(&settings).await,
        Command::Schema(args) => cmd::schema::schema(&settings, args.all).await,
        Command::Capture(CaptureCommand::Install(args)) => {
            cmd::capture::install(&settings, &args).await
        }
        Command::Capture(CaptureCommand::Uninstall(args)) => {
            cmd::capture::uninstall(&settings, &args).await
        }
        Command::Capture(CaptureCommand::Status) => cmd::capture::status(&settings).await,
        Command::Relay(args) => {
            let shutdown = CancellationToken::new();
            watch_signals(shutdown.clone(), "finishing the batch in flight");
            // The relay's circuit breakers, shown by its /healthz and dashboard.
            let destinations = hare_outbox::Destinations::new();
            let http = match &args.http {
                Some(address) => Some(
                    cmd::serve::start_for_relay(
                        &settings,
                        address,
                        &args.server,
                        destinations.clone(),
                        shutdown.clone(),
                    )
                    .await?,
                ),
                None => None,
            };
            let result =
                cmd::relay::relay(&settings, args.migrate, destinations, shutdown.clone()).await;
            // The relay has stopped (or failed): stop serving too.
            shutdown.cancel();
            if let Some(http) = http {
                match http.await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::error!("the HTTP server failed: {}", error::render(&e)),
                    Err(e) => tracing::error!("the HTTP server task failed: {e}"),
                }
            }
            result
        }
        Command::Events(args) => {
            let shutdown = CancellationToken::new();
            watch_signals(shutdown.clone(), "stopping");
            cmd::events::events(&settings, &args, shutdown).await
        }
        Command::Keys(args) => cmd::keys::keys(&settings, &args).await,
        Command::Backlog(args) => cmd::backlog::backlog(&settings, &args).await,
        Command::DeadLetters(DeadLettersCommand::Retry(args)) => {
            // One statement: a signal lets it finish and report rather than cut it off.
            watch_signals(CancellationToken::new(), "finishing the retry statement");
            cmd::dead_letters::retry(&settings, &args).await
        }
        Command::DeadLetters(DeadLettersCommand::Cleanup(args)) => {
            let shutdown = CancellationToken::new();
            watch_signals(shutdown.clone(), "finishing the batch in flight");
            let state = hare_outbox::backend::FinishedState::DeadLettered;
            cmd::cleanup::cleanup(&settings, &args, state, shutdown).await
        }
        Command::Cleanup(args) => {
            let shutdown = CancellationToken::new();
            watch_signals(shutdown.clone(), "finishing the batch in flight");
            let state = hare_outbox::backend::FinishedState::Published;
            cmd::cleanup::cleanup(&settings, &args, state, shutdown).await
        }
        Command::Serve(args) => {
            let shutdown = CancellationToken::new();
            watch_signals(shutdown.clone(), "letting requests in flight finish");
            cmd::serve::serve(&settings, &args, shutdown).await
        }
        Command::Demo(_) => unreachable!("handled above"),
    }
}

fn init_logging(level: Option<&str>, default_filter: &str) -> anyhow::Result<()> {
    let filter = match level {
        Some(level) => EnvFilter::try_new(level).map_err(|e| {
            error::usage(format!(
                "--log-level {level:?} is not a log filter ({e}); use e.g. error, warn, info, debug or hare_outbox=debug"
            ))
        })?,
        None => match std::env::var("RUST_LOG") {
            Ok(value) if !value.trim().is_empty() => EnvFilter::try_new(&value).map_err(|e| {
                error::usage(format!("RUST_LOG {value:?} is not a log filter ({e})"))
            })?,
            _ => EnvFilter::new(default_filter),
        },
    };
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let output = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .with_target(false)
        .with_filter(filter)
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            !db::is_silenced_driver_log(meta.target())
        }));
    tracing_subscriber::registry().with(output).init();
    Ok(())
}

/// Cancels `token` on the first SIGINT or SIGTERM; a second one ends the process at once.
///
/// The handlers are registered before this returns, so a signal that arrives at any later moment
/// is a graceful stop, never the default kill.
fn watch_signals(token: CancellationToken, what: &'static str) {
    let mut signals = match Signals::new() {
        Ok(signals) => signals,
        Err(e) => {
            tracing::warn!("cannot watch SIGINT/SIGTERM ({e}); stop the process with SIGKILL");
            return;
        }
    };
    tokio::spawn(async move {
        let name = signals.next().await;
        tracing::info!("{name} received: {what} (send it again to exit at once)");
        token.cancel();
        let name = signals.next().await;
        eprintln!("hare-outbox: {name} received again: exiting without waiting");
        // The shell's convention: 128 + the signal's number.
        std::process::exit(if name == "SIGTERM" { 143 } else { 130 });
    });
}

#[cfg(unix)]
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }
}

#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals)
    }

    async fn next(&mut self) -> &'static str {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}
