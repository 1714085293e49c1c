//! One MQTT session: an [`AsyncClient`] and its [`EventLoop`] polled by a background task that
//! matches every `PUBACK` to the publish it acknowledges.
//!
//! rumqttc 0.25 tells about acks only through its event loop: it assigns the packet id when it
//! takes a publish request from its channel, reports `Outgoing::Publish(pkid)` (requests are taken
//! strictly in channel order, one `Outgoing::Publish` each, even after a packet-id collision), and
//! later `Incoming::PubAck { pkid }`. So a waiter is queued, under a lock, in the order requests
//! enter the channel; `Outgoing::Publish(pkid)` moves the oldest waiter to the in-flight map under
//! `pkid`, and the `PUBACK` resolves it.
//!
//! A session is never resumed: on any connection error every waiter fails and the session is dead;
//! the next call opens a new one (rumqttc would otherwise resend unacked publishes on its own, with
//! new packet ids, which the relay already retries).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, Outgoing, Packet, QoS};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// What a waiter learns: acknowledged, or why not.
pub(crate) type Ack = Result<(), String>;

#[derive(Default)]
struct Waiters {
    /// Publishes sent into the request channel, not yet given a packet id, oldest first.
    queued: VecDeque<oneshot::Sender<Ack>>,
    /// Publishes on the wire, by packet id, waiting for their `PUBACK`.
    in_flight: HashMap<u16, oneshot::Sender<Ack>>,
    /// Why the session ended, once it has.
    dead: Option<String>,
}

impl Waiters {
    /// Ends the session: every waiter fails with `reason`.
    fn fail_all(&mut self, reason: &str) {
        if self.dead.is_none() {
            self.dead = Some(reason.to_owned());
        }
        for waiter in self
            .queued
            .drain(..)
            .chain(self.in_flight.drain().map(|(_, w)| w))
        {
            let _ = waiter.send(Err(reason.to_owned()));
        }
    }
}

/// A live (or dead) session.
pub(crate) struct Session {
    client: AsyncClient,
    waiters: Arc<Mutex<Waiters>>,
    /// Keeps requests in the same order as their waiters.
    send_order: tokio::sync::Mutex<()>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Session {
    /// Starts a session: the event loop connects on its first poll, in the background.
    pub(crate) fn open(options: MqttOptions, server: String) -> Session {
        let (client, event_loop) = AsyncClient::new(options, 128);
        let waiters = Arc::new(Mutex::new(Waiters::default()));
        let task = tokio::spawn(run(event_loop, Arc::clone(&waiters), server));
        Session {
            client,
            waiters,
            send_order: tokio::sync::Mutex::new(()),
            task: Mutex::new(Some(task)),
        }
    }

    fn waiters(&self) -> MutexGuard<'_, Waiters> {
        lock(&self.waiters)
    }

    /// Whether the session ended (a connection error, or [`Session::shut_down`]).
    pub(crate) fn is_dead(&self) -> bool {
        self.waiters().dead.is_some()
    }

    /// Hands a QoS 1 publish to the event loop; the receiver resolves on its `PUBACK`.
    ///
    /// Dropped midway (a caller's timeout), the queued waiter may have no request behind it, so
    /// waiters and packet ids could no longer line up: the session is then ended (its waiters
    /// fail) and the next call opens a new one.
    pub(crate) async fn publish(
        &self,
        topic: String,
        payload: Vec<u8>,
    ) -> Result<oneshot::Receiver<Ack>, String> {
        let _order = self.send_order.lock().await;
        let (tx, rx) = oneshot::channel();
        {
            let mut waiters = self.waiters();
            if let Some(reason) = &waiters.dead {
                return Err(reason.clone());
            }
            waiters.queued.push_back(tx);
        }
        let cancelled = EndOnDrop(Some(&self.waiters));
        let sent = self
            .client
            .publish(topic, QoS::AtLeastOnce, false, payload)
            .await;
        cancelled.disarm();
        if let Err(e) = sent {
            // Nothing entered the channel: take back the waiter just queued (the newest, since
            // `send_order` is held).
            self.waiters().queued.pop_back();
            return Err(format!("the MQTT client refused the publish: {e}"));
        }
        Ok(rx)
    }

    /// Ends the session: every waiter fails with `reason` and the event loop stops. With
    /// `graceful`, a `DISCONNECT` is sent first (waiting up to a second for it to go out).
    pub(crate) async fn shut_down(&self, reason: &str, graceful: bool) {
        self.waiters().fail_all(reason);
        let task = lock(&self.task).take();
        if let Some(mut task) = task {
            if graceful && self.client.try_disconnect().is_ok() {
                let _ = tokio::time::timeout(std::time::Duration::from_secs(1), &mut task).await;
            }
            task.abort();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.waiters().fail_all("the MQTT delivery was dropped");
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }
}

/// Ends the session when dropped armed: a publish was cancelled between queueing its waiter and
/// handing over its request.
struct EndOnDrop<'a>(Option<&'a Mutex<Waiters>>);

impl EndOnDrop<'_> {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for EndOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(waiters) = self.0 {
            lock(waiters).fail_all("a publish was cancelled midway; the MQTT session was reset");
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Polls the event loop until the connection fails, resolving waiters on the way.
async fn run(mut event_loop: EventLoop, waiters: Arc<Mutex<Waiters>>, server: String) {
    loop {
        match event_loop.poll().await {
            Ok(Event::Outgoing(Outgoing::Publish(pkid))) => {
                let mut waiters = lock(&waiters);
                if let Some(waiter) = waiters.queued.pop_front() {
                    waiters.in_flight.insert(pkid, waiter);
                } else if waiters.dead.is_none() {
                    tracing::warn!(%server, pkid, "MQTT publish with no waiter");
                }
            }
            Ok(Event::Incoming(Packet::PubAck(ack))) => {
                if let Some(waiter) = lock(&waiters).in_flight.remove(&ack.pkid) {
                    let _ = waiter.send(Ok(()));
                }
            }
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                tracing::debug!(%server, "MQTT connected");
            }
            Ok(_) => {}
            Err(error) => {
                let reason = format!("MQTT connection to {server} failed: {error}");
                tracing::warn!(%server, %error, "MQTT connection lost; the next delivery reconnects");
                lock(&waiters).fail_all(&reason);
                return;
            }
        }
    }
}
