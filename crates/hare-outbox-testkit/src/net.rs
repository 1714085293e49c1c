//! A TCP proxy that slows a connection down, for tests that must tell one round trip from many.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP proxy to `127.0.0.1:upstream` that holds every chunk from the client for `delay` before
/// passing it on: n round trips take at least n × `delay`.
pub struct DelayProxy {
    /// The proxy's port on 127.0.0.1.
    pub port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl DelayProxy {
    /// Starts the proxy in front of `127.0.0.1:upstream`.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start(upstream: u16, delay: Duration) -> DelayProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local address").port();
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    let (mut client_read, mut client_write) = inbound.into_split();
                    let (mut server_read, mut server_write) = outbound.into_split();
                    let up = tokio::spawn(async move {
                        let mut buf = vec![0u8; 1 << 20];
                        while let Ok(n) = client_read.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            tokio::time::sleep(delay).await;
                            if server_write.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    });
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                    up.abort();
                });
            }
        });
        DelayProxy { port, task }
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
