//! Every value the encoding accepts comes back from PostgreSQL (`jsonb`) exactly as encoded
//! (seed 001 § OutboxJsonEncoding; issue: property tests against the database).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use hare_outbox_core::{Outbox, OutboxMessage, OutboxTable};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use proptest::prelude::*;
use serde::Serialize;
use serde_json::json;

/// A JSON-like tree of the kinds Rust values encode to.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
enum Tree {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Tree>),
    Map(BTreeMap<String, Tree>),
}

fn tree() -> impl Strategy<Value = Tree> {
    let leaf = prop_oneof![
        Just(Tree::Null),
        any::<bool>().prop_map(Tree::Bool),
        any::<i64>().prop_map(Tree::Int),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Tree::Float),
        any::<String>().prop_map(Tree::Str),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Tree::List),
            prop::collection::btree_map(any::<String>(), inner, 0..5).prop_map(Tree::Map),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn accepted_values_come_back_exactly(payload in tree(), header in tree()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let schema = TestSchema::new(2).await;
            let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), OutboxTable::parse("outbox").unwrap());
            outbox.migrate().await.unwrap();
            let encoded = hare_outbox_core::message::encoding::encode(&payload).unwrap();
            let header_encoded = hare_outbox_core::message::encoding::encode(&header).unwrap();
            let mut conn = schema.pool.acquire().await.unwrap();
            let stored = outbox
                .enqueue(&mut conn, OutboxMessage::new("t", &payload).header("h", &header))
                .await
                .unwrap();
            drop(conn);
            let read = outbox.get(stored.id).await.unwrap().unwrap();
            schema.drop_schema().await;
            assert!(json_eq(&read.payload, &encoded), "{:?} != {:?}", read.payload, encoded);
            assert!(json_eq(&read.headers["h"], &header_encoded), "{:?} != {:?}", read.headers["h"], header_encoded);
        });
    }
}

/// Equal as JSON: numbers by value. jsonb keeps numbers as exact decimals, so an integral float of
/// 1e16 or more (e.g. 8.30149143027902e16) is printed back without a fraction, as an integer of the
/// same value; everything else comes back identical.
fn json_eq(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value::*;
    match (a, b) {
        (Number(x), Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Array(x), Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_eq(x, y)),
        (Object(x), Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

#[test]
fn integral_floats_compare_by_value() {
    assert!(json_eq(
        &json!(8.30149143027902e16),
        &json!(83014914302790200u64)
    ));
    assert!(!json_eq(&json!(1.5), &json!(1)));
    assert!(!json_eq(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
}
