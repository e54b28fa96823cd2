//! The `mcp-bridge` binary: parse the command line, set up logging to stderr, run the
//! subcommand.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use mcp_bridge::cli::{Cli, Command};

// The built-in demo server belongs to the binary, not to the library's API: `demo-server` runs
// it, and `serve --demo` spawns this binary's `demo-server` as its child.
mod demo;

// The allocator: jemalloc by default, because it gives freed memory back to the OS (background
// purging, 1 s decay: .cargo/config.toml) where glibc's malloc kept all of a burst of streams;
// benches/RESULTS.md, "2026-12-01 memory per stream", has the figures. mimalloc is a candidate
// kept behind its feature for re-measuring.
#[cfg(all(feature = "alloc-mimalloc", not(feature = "alloc-jemalloc")))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(feature = "alloc-jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const EX_USAGE: u8 = 64;
const EX_CONFIG: u8 = 78;

fn main() -> ExitCode {
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m).map(|c| (c, m)));
    let (cli, matches) = match parsed {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EX_USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    mcp_bridge::telemetry::init_logging(&cli.log_level, cli.log_format);
    match cli.command {
        Command::DemoServer(a) => {
            demo::set_tools_page(a.tools_page);
            match demo::main_with_mode(a.era.as_str().parse().unwrap_or(demo::DemoMode::Dual)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    error!("demo server: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        // Every form of `serve` (-- CMD, --demo, --upstream, --config) is the daemon.
        Command::Serve(args) => mcp_bridge::daemon::main(*args, given_flags(&matches)),
        Command::CheckConfig(a) => mcp_bridge::daemon::check_config(&a),
        Command::Connect(args) => connect(*args),
        Command::Auth(a) => auth(a),
    }
}

/// `auth login URL [connect's flags]`: log in now (OAuth always on), keep the login.
fn auth_login(args: &mcp_bridge::cli::connect::ConnectArgs) -> ExitCode {
    let cfg = match args.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-bridge auth login: {e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    let Some(cfg) = cfg.oauth_always() else {
        eprintln!(
            "mcp-bridge auth login: OAuth is off (--no-oauth, a static token, or no place for \
             logins: give --oauth-dir)"
        );
        return ExitCode::from(EX_USAGE);
    };
    let rt = match mcp_bridge::app::runtime(Some(2)) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match rt.block_on(mcp_bridge::app::login_only(cfg)) {
        Ok(era) => {
            println!("logged in to {} (it speaks {era})", args.url);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mcp-bridge auth login: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `auth status|logout`: the logins connect keeps (stdout is the report; errors on stderr).
fn auth(a: mcp_bridge::cli::AuthCommand) -> ExitCode {
    use mcp_bridge::cli::AuthCommand;
    use mcp_bridge::oauth::{admin, store::default_dir};
    let given = match &a {
        AuthCommand::Login(args) => return auth_login(args),
        AuthCommand::Status(s) => s.oauth_dir.clone(),
        AuthCommand::Logout(l) => l.oauth_dir.clone(),
    };
    let Some(dir) = given.or_else(default_dir) else {
        eprintln!("mcp-bridge auth: no place for OAuth logins: set HOME or XDG_CONFIG_HOME, or give --oauth-dir");
        return ExitCode::from(EX_CONFIG);
    };
    let done = match &a {
        AuthCommand::Login(_) => Ok(()),
        AuthCommand::Status(s) => admin::status(&dir, s.url.as_deref()).map(|t| print!("{t}")),
        AuthCommand::Logout(l) => admin::logout(&dir, &l.url).map(|n| {
            println!(
                "{n} login{} removed for {}",
                if n == 1 { "" } else { "s" },
                l.url
            )
        }),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-bridge auth: {e}");
            ExitCode::from(EX_CONFIG)
        }
    }
}

/// The `serve` flags the user set (on the command line or through their environment
/// variable): they override the configuration file, and some only make sense together.
fn given_flags(m: &clap::ArgMatches) -> mcp_bridge::cli::plan::Given {
    use clap::parser::ValueSource;
    let Some(serve) = m.subcommand_matches("serve") else {
        return Default::default();
    };
    serve
        .ids()
        .filter(|id| {
            matches!(
                serve.value_source(id.as_str()),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
        })
        .map(|id| id.as_str().to_owned())
        .collect()
}

fn connect(args: mcp_bridge::cli::connect::ConnectArgs) -> ExitCode {
    let cfg = match args.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-bridge connect: {e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    let rt = match mcp_bridge::app::current_thread_runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let shutdown = CancellationToken::new();
        // Owned: when connect ends another way (the host closed stdin) the signal loop is
        // still waiting, and is aborted and waited for before the runtime's exit check.
        let signal_loop = tokio::spawn(signals(shutdown.clone()));
        let name = args.name.as_deref();
        let limits = mcp_bridge::face::stdio::HostLimits {
            max_line: args.max_line,
            park_timeout: args.park_timeout,
            max_inflight: args.max_inflight as usize,
        };
        let done = mcp_bridge::app::run_connect(cfg, limits, name, args.metrics_listen, shutdown);
        let done = done.await;
        signal_loop.abort();
        let _ = signal_loop.await;
        match done {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                error!("{e}");
                ExitCode::from(EX_CONFIG)
            }
        }
    })
}

async fn signals(shutdown: CancellationToken) {
    use mcp_bridge::reload::{Hangups, Reloader};
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        error!("cannot install signal handlers");
        return;
    };
    // SIGHUP must not kill `connect` (a host may send it when its terminal goes): it goes to
    // the one reload handler, where connect registers nothing, so it is only acknowledged.
    let reloader = Reloader::new(
        None,
        &tokio_util::task::TaskTracker::new(),
        &CancellationToken::new(),
    );
    let mut hup = Hangups::watch();
    loop {
        tokio::select! {
            _ = term.recv() => { info!("SIGTERM received"); break }
            _ = int.recv() => { info!("SIGINT received"); break }
            _ = hup.recv() => { reloader.reload_all().await; }
        }
    }
    shutdown.cancel();
}
