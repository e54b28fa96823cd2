//! Upstreams: the peers that answer: a supervised stdio child process (`serve`) or a remote
//! Streamable HTTP server (`connect`, `serve --upstream URL`).

pub mod child;
pub mod observe;
pub mod remote;

/// What a face is put in front of: how to reach the peer that answers.
#[derive(Debug, Clone)]
pub enum UpstreamSpec {
    /// A stdio child process the bridge spawns and supervises.
    Child(child::ChildConfig),
    /// A remote Streamable HTTP server (`--upstream URL`, `url = "…"` in the config).
    Remote(remote::RemoteConfig),
}

impl UpstreamSpec {
    /// The child's settings, when the upstream is a child process.
    pub fn child(&self) -> Option<&child::ChildConfig> {
        match self {
            UpstreamSpec::Child(c) => Some(c),
            UpstreamSpec::Remote(_) => None,
        }
    }
}
