//! The `mcp-bridge` binary: parse the command line, set up logging to stderr, bind, run.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use mcp_bridge::cli::{Cli, Command};

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
        Command::DemoServer(a) => match mcp_bridge::demo::main_with_era(
            a.era
                .as_str()
                .parse()
                .unwrap_or(mcp_bridge::demo::Era::Dual),
        ) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                error!("demo server: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Serve(args) if args.config.is_some() || args.servers_json.is_some() => {
            mcp_bridge::daemon::main(*args, given_flags(&matches))
        }
        Command::Serve(args) => serve(*args),
        Command::CheckConfig(a) => mcp_bridge::daemon::check_config(&a),
        Command::Connect(args) => connect(*args),
    }
}

/// The `serve` flags the user set (on the command line or through their environment
/// variable), which override the configuration file.
fn given_flags(m: &clap::ArgMatches) -> mcp_bridge::config::Given {
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

fn serve(args: mcp_bridge::cli::ServeArgs) -> ExitCode {
    let (child, http) = match args.configs() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-bridge serve: {e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    // Before the runtime: reads secrets (and takes the token variable out of the environment).
    let security = match mcp_bridge::auth::prepare(&args.auth, args.host) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mcp-bridge serve: {e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    let rt = match mcp_bridge::app::runtime(None) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(args.addr()).await {
            Ok(l) => l,
            Err(e) => {
                error!("cannot bind {}: {e}", args.addr());
                return ExitCode::from(EX_CONFIG);
            }
        };
        let local = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let scheme = security.scheme();
        let http = match security
            .finish(http, listener.local_addr().unwrap_or(args.addr()))
            .await
        {
            Ok(h) => h,
            Err(e) => {
                error!("mcp-bridge serve: {e}");
                return ExitCode::from(EX_USAGE);
            }
        };
        info!("listening on {scheme}://{local}{}", http.path);
        let metrics_listener = match args.metrics_listen {
            None => None,
            Some(addr) => match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => {
                    let at = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
                    info!("metrics on http://{at}/metrics");
                    Some(l)
                }
                Err(e) => {
                    error!("cannot bind the metrics listener {addr}: {e}");
                    return ExitCode::from(EX_CONFIG);
                }
            },
        };
        let shutdown = CancellationToken::new();
        tokio::spawn(signals(shutdown.clone()));
        mcp_bridge::app::run_serve_with(
            child,
            http,
            listener,
            metrics_listener,
            shutdown,
            args.shutdown_grace,
        )
        .await;
        ExitCode::SUCCESS
    })
}

fn connect(args: mcp_bridge::cli_connect::ConnectArgs) -> ExitCode {
    let cfg = match args.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-bridge connect: {e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    let rt = match mcp_bridge::app::runtime(Some(2)) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let shutdown = CancellationToken::new();
        tokio::spawn(signals(shutdown.clone()));
        let name = args.name.as_deref();
        match mcp_bridge::cli_connect::run(cfg, args.max_line, name, args.metrics_listen, shutdown)
            .await
        {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                error!("{e}");
                ExitCode::from(EX_CONFIG)
            }
        }
    })
}

async fn signals(shutdown: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        error!("cannot install signal handlers");
        return;
    };
    // SIGHUP must never kill a daemon: the modules that can reload (certificates, token
    // files, the JWKS) listen for it themselves; here it is only acknowledged.
    let mut hup = signal(SignalKind::hangup()).ok();
    loop {
        tokio::select! {
            _ = term.recv() => { info!("SIGTERM received"); break }
            _ = int.recv() => { info!("SIGINT received"); break }
            _ = async { match hup.as_mut() { Some(h) => { h.recv().await; } None => std::future::pending().await } } => {
                info!("SIGHUP received: reloading what can be reloaded (certificates, token files, JWKS)");
            }
        }
    }
    shutdown.cancel();
}
