//! A real HTTP receiver on loopback that records every request.
//!
//! [`Receiver::start`] binds `127.0.0.1` on a free port and serves HTTP/1.1 from a thread of its
//! own (with its own tokio runtime), so it answers whatever the test does meanwhile: an async test
//! on a current-thread runtime, a sync test that blocks on a child process (the CLI tests), or
//! one that blocks on [`Receiver::wait_for_requests_blocking`].
//!
//! Every request is recorded as a [`RecordedRequest`] — method, path, query, headers as raw bytes,
//! body bytes and arrival time — *before* the answer is chosen, so a request is visible while it
//! is still being delayed. Every path and method is accepted. The answer follows the current
//! [`Behaviour`]: a fixed status, a scripted sequence of statuses, a delay, a redirect.
//! [`Receiver::set_behaviour`] changes it while the receiver runs.
//!
//! ```no_run
//! # async fn example() {
//! use std::time::Duration;
//! use hare_outbox_testkit::http::{Behaviour, Receiver};
//!
//! // Fails twice with 503, then answers 200 to every later request.
//! let receiver = Receiver::start(Behaviour::statuses([503, 503, 200]));
//! let url = receiver.url("/hooks/orders");
//! // ... point the code under test at `url` ...
//! let requests = receiver.wait_for_requests(3, Duration::from_secs(5)).await;
//! assert_eq!(requests[2].path, "/hooks/orders");
//! assert_eq!(requests[2].header_str("content-type"), Some("application/json"));
//! # }
//! ```
//!
//! The receiver stops when dropped (the port is closed when `drop` returns; requests in progress
//! are cut off).

use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use tokio::sync::{oneshot, watch};

/// How the receiver answers. Build one with [`Behaviour::ok`], [`Behaviour::status`],
/// [`Behaviour::statuses`], [`Behaviour::delayed`] or [`Behaviour::redirect`], then adjust it
/// with [`Behaviour::with_delay`] and [`Behaviour::with_body`]. The default is [`Behaviour::ok`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behaviour {
    answer: Answer,
    delay: Duration,
    body: Bytes,
    headers: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// The same status for every request.
    Fixed(u16),
    /// The n-th request (counted from the last `set_behaviour`) gets the n-th status; the last
    /// status repeats after the script runs out.
    Script(Vec<u16>),
    /// 302 with `Location` = this path of the same receiver; a request to the path itself gets 200.
    Redirect(String),
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour::ok()
    }
}

impl Behaviour {
    /// 200 with an empty body to every request, at once.
    pub fn ok() -> Self {
        Behaviour::status(200)
    }

    /// `status` (an HTTP status code, 100–999; anything else is answered as 500) to every request,
    /// with an empty body.
    pub fn status(status: u16) -> Self {
        Behaviour {
            answer: Answer::Fixed(status),
            delay: Duration::ZERO,
            body: Bytes::new(),
            headers: Vec::new(),
        }
    }

    /// A scripted sequence: the first request gets the first status, the second the second, and
    /// so on; after the script runs out the last status repeats (an empty script answers 200).
    /// Requests are counted from the moment this behaviour is set, in arrival order.
    pub fn statuses(statuses: impl IntoIterator<Item = u16>) -> Self {
        Behaviour {
            answer: Answer::Script(statuses.into_iter().collect()),
            ..Behaviour::ok()
        }
    }

    /// 200 to every request, each answered `delay` after it arrived (the request is recorded at
    /// once). Same as `Behaviour::ok().with_delay(delay)`.
    pub fn delayed(delay: Duration) -> Self {
        Behaviour::ok().with_delay(delay)
    }

    /// `302 Found` with `Location: <receiver url><to_path>` (an absolute URL of the same receiver)
    /// to every request except those to `to_path` itself, which get 200. A client that follows
    /// redirects therefore shows up as a recorded request to `to_path`.
    /// `to_path` should start with `/` (one is added when it does not).
    pub fn redirect(to_path: &str) -> Self {
        Behaviour {
            answer: Answer::Redirect(normalize_path(to_path)),
            ..Behaviour::ok()
        }
    }

    /// The same behaviour, answering each request `delay` after it arrived.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The same behaviour, with `body` as the response body (sent with
    /// `content-type: text/plain; charset=utf-8`).
    pub fn with_body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = Bytes::from(body.into());
        self
    }

    /// The same behaviour, adding the header `name: value` to every answer (e.g.
    /// `Retry-After: 3`). A name or value HTTP cannot carry is left out.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

/// One request as the receiver saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The method, e.g. `"POST"`.
    pub method: String,
    /// The path of the request target, without the query, e.g. `"/hooks/orders"`.
    pub path: String,
    /// The query string without the `?`, when the target had one.
    pub query: Option<String>,
    /// Every header as (lowercase name, raw value bytes), in the order the server parsed them
    /// (values of one name together). The bytes are exactly those on the wire, so non-ASCII
    /// (UTF-8) values can be compared byte for byte.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body bytes, exactly as received (no size limit).
    pub body: Vec<u8>,
    /// When the receiver started handling the request (its head and body had arrived).
    pub received_at: Instant,
}

impl RecordedRequest {
    /// The raw bytes of the first header named `name` (case-insensitive), if any.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// The first header named `name` as text, if it is present and valid UTF-8.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.header(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// All values of the headers named `name` (case-insensitive), in order.
    pub fn header_all(&self, name: &str) -> Vec<&[u8]> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
            .collect()
    }

    /// The body parsed as JSON.
    ///
    /// # Panics
    /// When the body is not JSON.
    pub fn body_json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body of {} {} is not JSON ({e}): {:?}",
                self.method,
                self.path,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// State shared between the test and the server thread.
struct Shared {
    addr: SocketAddr,
    inner: Mutex<Inner>,
    /// Signalled on every recorded request (for the blocking wait).
    recorded: Condvar,
    /// The number of recorded requests (for the async wait).
    count: watch::Sender<usize>,
}

struct Inner {
    behaviour: Behaviour,
    /// Requests answered under the current behaviour (the position in a script).
    answered: usize,
    requests: Vec<RecordedRequest>,
    in_flight: usize,
    max_in_flight: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panicking test thread must not hide what was recorded.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A real HTTP server on `127.0.0.1` that records every request and answers per a [`Behaviour`].
/// See the [module documentation](self).
pub struct Receiver {
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("addr", &self.shared.addr)
            .field("requests", &self.shared.lock().requests.len())
            .finish_non_exhaustive()
    }
}

impl Receiver {
    /// Binds `127.0.0.1:0` and starts serving with `behaviour`. The port is listening when this
    /// returns. Needs no tokio runtime of the caller; works inside one as well.
    ///
    /// # Panics
    /// When no loopback port can be bound or the server thread cannot start.
    pub fn start(behaviour: Behaviour) -> Receiver {
        let listener = StdTcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("set the listener non-blocking");
        let addr = listener
            .local_addr()
            .expect("local address of the listener");
        let shared = Arc::new(Shared {
            addr,
            inner: Mutex::new(Inner {
                behaviour,
                answered: 0,
                requests: Vec::new(),
                in_flight: 0,
                max_in_flight: 0,
            }),
            recorded: Condvar::new(),
            count: watch::Sender::new(0),
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let state = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("http-receiver-{}", addr.port()))
            .spawn(move || serve(listener, state, stopped))
            .expect("spawn the receiver thread");
        Receiver {
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The address the receiver listens on.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// `http://127.0.0.1:<port><path>`; a `/` is put in front of `path` when it has none
    /// (`url("")` is the root). `path` may carry a query (`"/hook?x=1"`).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.shared.addr, normalize_path(path))
    }

    /// Replaces the behaviour for requests that arrive from now on; a script starts from its
    /// first status again. Requests already being answered keep the behaviour they started with.
    pub fn set_behaviour(&self, behaviour: Behaviour) {
        let mut inner = self.shared.lock();
        inner.behaviour = behaviour;
        inner.answered = 0;
    }

    /// A copy of every request recorded so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// The requests recorded so far whose path is `path` (the query is not compared).
    pub fn requests_to(&self, path: &str) -> Vec<RecordedRequest> {
        let path = normalize_path(path);
        self.shared
            .lock()
            .requests
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    /// How many requests were recorded so far.
    pub fn request_count(&self) -> usize {
        self.shared.lock().requests.len()
    }

    /// Forgets the recorded requests and the in-flight high-water mark (requests being answered
    /// now still count as in flight).
    pub fn clear(&self) {
        let mut inner = self.shared.lock();
        inner.requests.clear();
        inner.max_in_flight = inner.in_flight;
        self.shared.count.send_replace(0);
    }

    /// How many requests are being answered right now (arrived, answer not yet handed back).
    pub fn in_flight(&self) -> usize {
        self.shared.lock().in_flight
    }

    /// The largest number of requests that were being answered at the same time since the start
    /// (or the last [`Receiver::clear`]). With a [`Behaviour::with_delay`] long enough for the
    /// client to send all it can, this is the client's real concurrency.
    pub fn max_in_flight(&self) -> usize {
        self.shared.lock().max_in_flight
    }

    /// Waits until at least `n` requests were recorded and returns all recorded so far (at least
    /// `n`, in arrival order). Wakes up on each recorded request; no fixed sleeps.
    ///
    /// Needs a tokio runtime with the time driver (any `#[tokio::test]`).
    ///
    /// # Panics
    /// When `timeout` passes first; the message lists what did arrive.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        let mut count = self.shared.count.subscribe();
        let reached = tokio::time::timeout(timeout, count.wait_for(|c| *c >= n)).await;
        if reached.is_err() {
            self.panic_timed_out(n, timeout);
        }
        self.requests()
    }

    /// [`Receiver::wait_for_requests`] for sync code: blocks the calling thread (never call it
    /// on an async runtime's thread).
    ///
    /// # Panics
    /// When `timeout` passes first; the message lists what did arrive.
    pub fn wait_for_requests_blocking(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        let inner = self.shared.lock();
        let (inner, result) = self
            .shared
            .recorded
            .wait_timeout_while(inner, timeout, |inner| inner.requests.len() < n)
            .unwrap_or_else(PoisonError::into_inner);
        if result.timed_out() && inner.requests.len() < n {
            drop(inner);
            self.panic_timed_out(n, timeout);
        }
        inner.requests.clone()
    }

    fn panic_timed_out(&self, n: usize, timeout: Duration) -> ! {
        let seen: Vec<String> = self
            .requests()
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect();
        panic!(
            "receiver at {} got {} of {n} requests within {timeout:?}: {seen:?}",
            self.shared.addr,
            seen.len()
        );
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            // The thread only drops its runtime after the stop signal; it never blocks for long.
            let _ = thread.join();
        }
    }
}

/// A URL on loopback where nothing listens (a port that was just bound and released), for
/// "connection refused" tests. Another process could take the port in between; that is unlikely
/// within a test.
///
/// # Panics
/// When no loopback port can be bound.
pub fn unused_local_url(path: &str) -> String {
    let listener = StdTcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener
        .local_addr()
        .expect("local address of the listener");
    drop(listener);
    format!("http://{addr}{}", normalize_path(path))
}

fn normalize_path(path: &str) -> String {
    if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    }
}

/// The server thread: its own current-thread runtime, stopped (with every connection task) when
/// `stopped` fires or the [`Receiver`] is dropped.
fn serve(listener: StdTcpListener, shared: Arc<Shared>, stopped: oneshot::Receiver<()>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => panic!("building the receiver runtime failed: {e}"),
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(listener) => listener,
            Err(e) => panic!("registering the receiver listener failed: {e}"),
        };
        let app = Router::new().fallback(handle).with_state(shared);
        tokio::select! {
            result = axum::serve(listener, app) => {
                if let Err(e) = result {
                    panic!("the receiver stopped serving: {e}");
                }
            }
            _ = stopped => {}
        }
    });
    // Dropping the runtime here cancels the connection tasks still running.
}

/// Keeps the in-flight count right even when the client goes away mid-request.
struct InFlight(Arc<Shared>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut inner = self.0.lock();
        inner.in_flight = inner.in_flight.saturating_sub(1);
    }
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let received_at = Instant::now();
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(body) => body,
        Err(e) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("reading the body failed: {e}"),
            );
        }
    };
    let recorded = RecordedRequest {
        method: parts.method.as_str().to_owned(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
            .collect(),
        body: body.to_vec(),
        received_at,
    };
    let path = recorded.path.clone();

    // Record, count in flight and pick the answer in one step, so scripts follow arrival order.
    let (behaviour, position, count) = {
        let mut inner = shared.lock();
        inner.requests.push(recorded);
        inner.in_flight += 1;
        inner.max_in_flight = inner.max_in_flight.max(inner.in_flight);
        let position = inner.answered;
        inner.answered += 1;
        (inner.behaviour.clone(), position, inner.requests.len())
    };
    let _in_flight = InFlight(Arc::clone(&shared));
    shared.count.send_replace(count);
    shared.recorded.notify_all();

    if !behaviour.delay.is_zero() {
        tokio::time::sleep(behaviour.delay).await;
    }

    let mut response = match &behaviour.answer {
        Answer::Fixed(status) => with_body(*status, &behaviour.body),
        Answer::Script(statuses) => {
            let status = statuses
                .get(position)
                .or(statuses.last())
                .copied()
                .unwrap_or(200);
            with_body(status, &behaviour.body)
        }
        Answer::Redirect(to_path) if *to_path == path => with_body(200, &behaviour.body),
        Answer::Redirect(to_path) => {
            let mut response = with_body(302, &behaviour.body);
            let location = format!("http://{}{to_path}", shared.addr);
            if let Ok(value) = HeaderValue::from_str(&location) {
                response.headers_mut().insert(header::LOCATION, value);
            }
            response
        }
    };
    if !behaviour.body.is_empty() {
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    for (name, value) in &behaviour.headers {
        if let (Ok(name), Ok(value)) = (
            header::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

fn with_body(status: u16, body: &Bytes) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = Response::new(Body::from(body.clone()));
    *response.status_mut() = status;
    response
}

fn plain(status: StatusCode, text: String) -> Response {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    use super::*;

    /// Sends `request` (with `Connection: close`) and returns (status, head, body).
    fn raw(addr: SocketAddr, request: &[u8]) -> (u16, String, Vec<u8>) {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(request).unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).unwrap();
        let split = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8(answer[..split].to_vec()).unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, head, answer[split + 4..].to_vec())
    }

    fn post(addr: SocketAddr, path: &str, body: &str) -> u16 {
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        raw(addr, request.as_bytes()).0
    }

    #[test]
    fn records_requests_byte_exact() {
        let receiver = Receiver::start(Behaviour::ok());
        let body = "{\"a\":\"ü\"}";
        let mut request = format!(
            "PUT /p/q?x=1&y=2 HTTP/1.1\r\nhost: {}\r\nconnection: close\r\nX-Name: ",
            receiver.addr()
        )
        .into_bytes();
        request.extend_from_slice("Zoë ✓".as_bytes());
        request.extend_from_slice(
            format!("\r\ncontent-length: {}\r\n\r\n{body}", body.len()).as_bytes(),
        );

        assert_eq!(raw(receiver.addr(), &request).0, 200);

        let requests = receiver.wait_for_requests_blocking(1, Duration::from_secs(5));
        let r = &requests[0];
        assert_eq!(r.method, "PUT");
        assert_eq!(r.path, "/p/q");
        assert_eq!(r.query.as_deref(), Some("x=1&y=2"));
        assert_eq!(r.header("x-name"), Some("Zoë ✓".as_bytes()));
        assert_eq!(r.header_str("X-NAME"), Some("Zoë ✓"));
        assert_eq!(r.body, body.as_bytes());
        assert_eq!(r.body_json(), serde_json::json!({"a": "ü"}));
        assert!(r.received_at <= Instant::now());
        assert_eq!(receiver.requests_to("p/q").len(), 1);
    }

    #[test]
    fn script_runs_then_repeats_its_last_status_and_resets_on_change() {
        let receiver = Receiver::start(Behaviour::statuses([500, 503, 201]));
        let statuses: Vec<u16> = (0..5).map(|_| post(receiver.addr(), "/s", "{}")).collect();
        assert_eq!(statuses, [500, 503, 201, 201, 201]);

        receiver.set_behaviour(Behaviour::statuses([429, 200]));
        assert_eq!(post(receiver.addr(), "/s", "{}"), 429);
        assert_eq!(post(receiver.addr(), "/s", "{}"), 200);

        receiver.set_behaviour(Behaviour::status(418).with_body("teapot"));
        let request = "GET /t HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
        let (status, head, body) = raw(receiver.addr(), request.as_bytes());
        assert_eq!(status, 418);
        assert!(head.contains("text/plain"), "{head}");
        assert_eq!(body, b"teapot");
        assert_eq!(receiver.request_count(), 8);

        receiver.clear();
        assert!(receiver.requests().is_empty());
    }

    #[test]
    fn redirect_points_at_the_same_receiver() {
        let receiver = Receiver::start(Behaviour::redirect("target"));
        let request =
            "POST /hook HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        let (status, head, _) = raw(receiver.addr(), request.as_bytes());
        assert_eq!(status, 302);
        let location = format!("location: {}", receiver.url("/target"));
        assert!(head.to_lowercase().contains(&location), "{head}");
        assert_eq!(post(receiver.addr(), "/target", ""), 200);
        assert_eq!(receiver.requests_to("/hook").len(), 1);
        assert_eq!(receiver.requests_to("/target").len(), 1);
    }

    #[test]
    fn delayed_requests_are_recorded_at_once_and_counted_in_flight() {
        let receiver = Receiver::start(Behaviour::delayed(Duration::from_secs(1)));
        let addr = receiver.addr();
        let clients: Vec<_> = (0..3)
            .map(|_| std::thread::spawn(move || post(addr, "/slow", "x")))
            .collect();
        receiver.wait_for_requests_blocking(3, Duration::from_secs(5));
        assert_eq!(receiver.in_flight(), 3);
        for client in clients {
            assert_eq!(client.join().unwrap(), 200);
        }
        assert_eq!(receiver.in_flight(), 0);
        assert_eq!(receiver.max_in_flight(), 3);
    }

    #[tokio::test]
    async fn async_wait_wakes_on_arrival() {
        let receiver = Receiver::start(Behaviour::ok());
        let addr = receiver.addr();
        let client = std::thread::spawn(move || post(addr, "/a", "1"));
        let requests = receiver.wait_for_requests(1, Duration::from_secs(5)).await;
        assert_eq!(requests[0].path, "/a");
        assert_eq!(client.join().unwrap(), 200);
    }

    #[tokio::test]
    #[should_panic(expected = "got 0 of 1 requests")]
    async fn wait_panics_after_the_timeout() {
        let receiver = Receiver::start(Behaviour::ok());
        receiver
            .wait_for_requests(1, Duration::from_millis(50))
            .await;
    }

    #[test]
    fn unused_url_refuses_connections() {
        let url = unused_local_url("/x");
        let addr: SocketAddr = url
            .trim_start_matches("http://")
            .trim_end_matches("/x")
            .parse()
            .unwrap();
        assert!(TcpStream::connect(addr).is_err());
    }
}
