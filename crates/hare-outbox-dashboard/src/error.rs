//! The dashboard's errors.

use std::net::SocketAddr;

/// `Result` with the dashboard's [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong building or serving the dashboard.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An option is out of range; the message names the value and what is allowed.
    #[error("dashboard configuration error: {0}")]
    Configuration(String),
    /// The address is not loopback and remote access was not allowed.
    #[error(
        "refusing to serve the dashboard on {addr}: it is not a loopback address; bind 127.0.0.1 \
         (or ::1), or allow remote access explicitly (DashboardOptions::with_allow_remote) behind \
         a proxy that adds TLS"
    )]
    Remote {
        /// The refused address.
        addr: SocketAddr,
    },
    /// Binding or serving failed.
    #[error("{what} failed: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}
