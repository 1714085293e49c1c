//! A TCP proxy between a client under test and a real server: it can slow a connection down, for
//! tests that must tell one round trip from many, and cut every connection on demand, for outage
//! tests that must not stop a server other tests share.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A TCP proxy to `127.0.0.1:upstream` that holds every chunk from the client for `delay` before
/// passing it on: n round trips take at least n × `delay`. A zero delay passes chunks on at once.
///
/// [`sever`](Self::sever) cuts the line: every open connection through the proxy is closed at
/// once (both sides see the socket close), and connections made while it stays cut are accepted
/// and closed straight away, as if the server had crashed. [`restore`](Self::restore) lets new
/// connections through again. Each client connection opens its own connection to the upstream
/// server when it arrives, so the server need not be up when the proxy starts.
pub struct DelayProxy {
    /// The proxy's port on 127.0.0.1.
    pub port: u16,
    task: tokio::task::JoinHandle<()>,
    severed: watch::Sender<bool>,
}

impl DelayProxy {
    /// Starts the proxy in front of `127.0.0.1:upstream`, passing connections through.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start(upstream: u16, delay: Duration) -> DelayProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local address").port();
        let (severed, _) = watch::channel(false);
        let cut = severed.clone();
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let mut cut = cut.subscribe();
                if *cut.borrow_and_update() {
                    drop(inbound);
                    continue;
                }
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    let pipe = relay(inbound, outbound, delay);
                    // Ends the pipe, dropping both sockets, when the line is cut; a proxy dropped
                    // without a cut leaves its open connections alone.
                    let cut = async move {
                        if cut.wait_for(|severed| *severed).await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    };
                    tokio::select! {
                        () = pipe => {}
                        () = cut => {}
                    }
                });
            }
        });
        DelayProxy {
            port,
            task,
            severed,
        }
    }

    /// Cuts the line now: closes every open connection through the proxy, and closes each new
    /// one as soon as it is accepted, until [`restore`](Self::restore).
    pub fn sever(&self) {
        self.severed.send_replace(true);
    }

    /// Lets new connections through again after [`sever`](Self::sever); connections closed by the
    /// cut stay closed (clients reconnect).
    pub fn restore(&self) {
        self.severed.send_replace(false);
    }

    /// Whether the line is cut.
    pub fn is_severed(&self) -> bool {
        *self.severed.borrow()
    }
}

/// Copies bytes both ways, holding each chunk from the client for `delay`; ends when the server
/// closes its side.
async fn relay(inbound: TcpStream, outbound: TcpStream, delay: Duration) {
    let (mut client_read, mut client_write) = inbound.into_split();
    let (mut server_read, mut server_write) = outbound.into_split();
    let up = async move {
        let mut buf = vec![0u8; 1 << 20];
        while let Ok(n) = client_read.read(&mut buf).await {
            if n == 0 {
                break;
            }
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if server_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        // `server_write` is dropped here, which shuts the server's side for writing; the replies
        // still flow back until the server closes.
        drop(server_write);
        std::future::pending::<()>().await;
    };
    let down = async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// An echo server on loopback; its port.
    async fn echo_server() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = stream.into_split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        port
    }

    /// Sends `text` and reads the echo; `None` when the connection is closed or fails.
    async fn round_trip(stream: &mut TcpStream, text: &[u8]) -> Option<Vec<u8>> {
        stream.write_all(text).await.ok()?;
        let mut buf = vec![0u8; text.len()];
        let bound = Duration::from_secs(5);
        match tokio::time::timeout(bound, stream.read_exact(&mut buf)).await {
            Ok(Ok(_)) => Some(buf),
            Ok(Err(_)) => None,
            Err(_) => panic!("neither an echo nor a close within {bound:?}"),
        }
    }

    #[tokio::test]
    async fn sever_closes_open_and_new_connections_until_restored() {
        let proxy = DelayProxy::start(echo_server().await, Duration::ZERO).await;
        let mut before = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        assert_eq!(round_trip(&mut before, b"ping").await.unwrap(), b"ping");
        assert!(!proxy.is_severed());

        proxy.sever();
        assert!(proxy.is_severed());
        assert_eq!(
            round_trip(&mut before, b"lost").await,
            None,
            "an open connection is closed"
        );
        let mut during = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        assert_eq!(
            round_trip(&mut during, b"lost").await,
            None,
            "a new connection is closed at once"
        );

        proxy.restore();
        assert!(!proxy.is_severed());
        let mut after = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        assert_eq!(round_trip(&mut after, b"back").await.unwrap(), b"back");
    }

    #[tokio::test]
    async fn a_delay_holds_each_chunk_from_the_client() {
        let delay = Duration::from_millis(100);
        let proxy = DelayProxy::start(echo_server().await, delay).await;
        let mut stream = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        let started = tokio::time::Instant::now();
        assert_eq!(round_trip(&mut stream, b"slow").await.unwrap(), b"slow");
        assert!(started.elapsed() >= delay, "{:?}", started.elapsed());
    }
}
