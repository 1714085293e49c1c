//! Wake-ups: a signal after commit tells relays to poll now instead of waiting for the poll
//! interval. A wake-up is a hint: a lost signal only delays delivery until
//! the next poll.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::broadcast;

use crate::error::Result;

pub mod listener;

/// The topics one signal names. An empty list means "poll now, whatever the topic" (sent after a
/// reconnect that may have lost signals).
pub type Topics = Arc<[String]>;

/// Sends and receives wake-up signals. One object serves both sides: the outbox signals after a
/// commit, relays subscribe.
#[async_trait]
pub trait Wakeup: Send + Sync + 'static {
    /// Sends one signal naming `topics`. Called after the writing transaction committed; never for
    /// a rollback.
    ///
    /// # Errors
    /// A transport error; callers log it and go on (polling delivers anyway).
    async fn signal(&self, topics: &[String]) -> Result<()>;

    /// Subscribes to every signal sent from now on.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) or a transport error; the relay then
    /// only polls.
    async fn subscribe(&self) -> Result<WakeupSubscription>;

    /// Releases what `signal` and `subscribe` opened. Defaults to nothing.
    ///
    /// # Errors
    /// A transport error while closing.
    async fn close(&self) -> Result<()> {
        Ok(())
    }

    /// The channel to notify inside the writing transaction, for wake-ups that ride the database
    /// transaction (PostgreSQL NOTIFY delivered at commit). `None` (the default): the outbox
    /// signals after commit through [`Wakeup::signal`] instead.
    fn in_transaction_channel(&self) -> Option<&str> {
        None
    }

    /// Refuses a backend this wake-up cannot signal on (e.g. LISTEN/NOTIFY on SQLite, which
    /// lacks [`Capabilities::notify_in_transaction`](crate::backend::Capabilities)), before
    /// anything is written. Defaults to accepting every backend.
    ///
    /// # Errors
    /// [`Error::Configuration`](crate::Error::Configuration) naming the backend.
    fn check_supported(&self, backend: &crate::backend::Capabilities) -> Result<()> {
        let _ = backend;
        Ok(())
    }
}

/// A stream of signals for one subscriber.
pub struct WakeupSubscription {
    rx: broadcast::Receiver<Topics>,
}

impl WakeupSubscription {
    /// Wraps a broadcast receiver fed by the wake-up's transport.
    pub fn new(rx: broadcast::Receiver<Topics>) -> Self {
        WakeupSubscription { rx }
    }

    /// Waits for the next signal. `Some(None)` means signals were missed (the subscriber lagged):
    /// treat it as naming every topic. `None` means the wake-up closed.
    pub async fn recv(&mut self) -> Option<Option<Topics>> {
        match self.rx.recv().await {
            Ok(topics) => Some(Some(topics)),
            Err(broadcast::error::RecvError::Lagged(_)) => Some(None),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// Discards the signals already queued, without waiting; returns `false` when the wake-up
    /// closed. A relay calls it right before a poll: the commits those signals announce happened
    /// before the poll's lease, which will see their events, so waking up for them again would
    /// only cost an empty poll.
    pub fn discard_queued(&mut self) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) => {}
                Err(broadcast::error::TryRecvError::Empty) => return true,
                Err(broadcast::error::TryRecvError::Closed) => return false,
            }
        }
    }
}

/// Relays of this process, woken right after a commit — also for a write from another thread or
/// runtime. Cheap to clone; clones share the channel.
#[derive(Debug, Clone)]
pub struct InProcessWakeup {
    tx: broadcast::Sender<Topics>,
}

impl Default for InProcessWakeup {
    fn default() -> Self {
        InProcessWakeup::new()
    }
}

impl InProcessWakeup {
    /// A new channel (1024 signals of buffer per subscriber; a slower subscriber sees one
    /// "missed signals" wake-up instead).
    pub fn new() -> Self {
        InProcessWakeup {
            tx: broadcast::channel(1024).0,
        }
    }
}

#[async_trait]
impl Wakeup for InProcessWakeup {
    async fn signal(&self, topics: &[String]) -> Result<()> {
        // No subscriber is not an error: nobody is waiting.
        let _ = self.tx.send(topics.to_vec().into());
        Ok(())
    }

    async fn subscribe(&self) -> Result<WakeupSubscription> {
        Ok(WakeupSubscription::new(self.tx.subscribe()))
    }
}

/// Topics written by one transaction, coalesced: one entry per topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PendingSignals {
    topics: BTreeSet<String>,
}

impl PendingSignals {
    /// Records `topic`.
    pub fn add(&mut self, topic: &str) {
        if !self.topics.contains(topic) {
            self.topics.insert(topic.to_owned());
        }
    }

    /// The coalesced topics, sorted.
    pub fn topics(&self) -> Vec<String> {
        self.topics.iter().cloned().collect()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.topics.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn in_process_signals_reach_every_subscriber() {
        let wakeup = InProcessWakeup::new();
        let mut a = wakeup.subscribe().await.unwrap();
        let mut b = wakeup.clone().subscribe().await.unwrap();
        wakeup
            .signal(&["x".to_owned(), "y".to_owned()])
            .await
            .unwrap();
        let got = a.recv().await.unwrap().unwrap();
        assert_eq!(&*got, ["x".to_owned(), "y".to_owned()]);
        assert!(b.recv().await.unwrap().is_some());
    }

    #[tokio::test]
    async fn queued_signals_are_discarded_and_a_close_is_seen() {
        let wakeup = InProcessWakeup::new();
        let mut sub = wakeup.subscribe().await.unwrap();
        for _ in 0..3 {
            wakeup.signal(&["x".to_owned()]).await.unwrap();
        }
        assert!(sub.discard_queued());
        // Nothing is left: the next recv waits for a new signal.
        let waited = tokio::time::timeout(std::time::Duration::from_millis(20), sub.recv()).await;
        assert!(
            waited.is_err(),
            "a discarded signal was received: {waited:?}"
        );
        wakeup.signal(&["y".to_owned()]).await.unwrap();
        let got = sub.recv().await.unwrap().unwrap();
        assert_eq!(&*got, ["y".to_owned()]);
        drop(wakeup);
        assert!(!sub.discard_queued());
    }

    #[test]
    fn pending_signals_coalesce_per_topic() {
        let mut p = PendingSignals::default();
        for t in ["b", "a", "b", "a", "c"] {
            p.add(t);
        }
        assert_eq!(p.topics(), ["a", "b", "c"]);
    }
}
