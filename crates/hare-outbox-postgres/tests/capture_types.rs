//! The JSON form of every column type in captured events, one test per type, each with the exact
//! JSON expected, on a real PostgreSQL server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::capture::{ChangeCapture, ChangePayload};
use hare_outbox_core::{Outbox, OutboxTable};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Row};

/// Creates `t (id int PRIMARY KEY, v <sql_type>)` after `setup`, captures it with the AFTER
/// payload, inserts one row per literal and returns each row's `after.v`.
async fn forms(setup: &str, sql_type: &str, literals: &[&str]) -> Vec<Value> {
    let db = TestSchema::new(2).await;
    let outbox = Outbox::new(PgBackend::new(db.pool.clone()), OutboxTable::default());
    outbox.migrate().await.unwrap();
    if !setup.is_empty() {
        sqlx::raw_sql(AssertSqlSafe(setup.to_owned()))
            .execute(&db.pool)
            .await
            .unwrap();
    }
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE t (id int PRIMARY KEY, v {sql_type})"
    )))
    .execute(&db.pool)
    .await
    .unwrap();
    ChangeCapture::new("t")
        .with_payload(ChangePayload::After)
        .install(&outbox)
        .await
        .unwrap();
    // A session zone far from UTC: the forms must not depend on it.
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("SET LOCAL TIME ZONE 'Asia/Kathmandu'")
        .execute(&mut *tx)
        .await
        .unwrap();
    for (i, literal) in literals.iter().enumerate() {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO t VALUES ({i}, {literal})"
        )))
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    let rows = sqlx::query("SELECT payload FROM hare_outbox ORDER BY sequence")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let out = rows
        .iter()
        .map(|row| row.get::<Value, _>("payload")["after"]["v"].clone())
        .collect();
    db.drop_schema().await;
    out
}

#[tokio::test]
async fn smallint_integer_bigint_are_numbers() {
    assert_eq!(
        forms("", "smallint", &["-32768", "NULL"]).await,
        vec![json!(-32768), json!(null)]
    );
    assert_eq!(
        forms("", "integer", &["2147483647"]).await,
        vec![json!(2147483647)]
    );
    assert_eq!(
        forms("", "bigint", &["9223372036854775807"]).await,
        vec![json!(9223372036854775807_i64)]
    );
}

#[tokio::test]
async fn numeric_is_its_exact_text() {
    assert_eq!(
        forms("", "numeric(10,2)", &["12.5", "0", "-1.005"]).await,
        vec![json!("12.50"), json!("0.00"), json!("-1.01")]
    );
    assert_eq!(
        forms(
            "",
            "numeric",
            &["123456789012345678901234567890.000100", "'NaN'"]
        )
        .await,
        vec![json!("123456789012345678901234567890.000100"), json!("NaN")]
    );
}

#[tokio::test]
async fn real_is_a_number_and_nan_infinity_are_text() {
    assert_eq!(
        forms("", "real", &["1.5", "'NaN'", "'Infinity'", "'-Infinity'"]).await,
        vec![
            json!(1.5),
            json!("NaN"),
            json!("Infinity"),
            json!("-Infinity")
        ]
    );
}

#[tokio::test]
async fn double_precision_is_a_number_and_nan_infinity_are_text() {
    assert_eq!(
        forms(
            "",
            "double precision",
            &["0.1", "1e300", "'NaN'", "'Infinity'", "'-Infinity'"]
        )
        .await,
        vec![
            json!(0.1),
            json!(1e300),
            json!("NaN"),
            json!("Infinity"),
            json!("-Infinity")
        ]
    );
}

#[tokio::test]
async fn boolean_is_true_or_false() {
    assert_eq!(
        forms("", "boolean", &["true", "false"]).await,
        vec![json!(true), json!(false)]
    );
}

#[tokio::test]
async fn text_varchar_and_char_are_strings() {
    assert_eq!(
        forms("", "text", &["'Ромашка \"ООО\"\\n'", "E'tab\\t'"]).await,
        vec![json!("Ромашка \"ООО\"\\n"), json!("tab\t")]
    );
    assert_eq!(
        forms("", "varchar(10)", &["'abc'"]).await,
        vec![json!("abc")]
    );
    assert_eq!(forms("", "char(4)", &["'ab'"]).await, vec![json!("ab  ")]);
}

#[tokio::test]
async fn uuid_is_its_text() {
    assert_eq!(
        forms("", "uuid", &["'0190B5C6-7E1D-7A2B-8C3D-4E5F60718293'"]).await,
        vec![json!("0190b5c6-7e1d-7a2b-8c3d-4e5f60718293")]
    );
}

#[tokio::test]
async fn timestamptz_is_iso_8601_in_utc_whatever_the_session_zone() {
    assert_eq!(
        forms(
            "",
            "timestamptz",
            &[
                "'2026-10-06 15:00:00+03'",
                "'2026-10-06 12:00:00.25Z'",
                "'2026-10-06 12:00:00.000001Z'",
                "'infinity'"
            ]
        )
        .await,
        vec![
            json!("2026-10-06T12:00:00+00:00"),
            json!("2026-10-06T12:00:00.250000+00:00"),
            json!("2026-10-06T12:00:00.000001+00:00"),
            json!("infinity")
        ]
    );
}

#[tokio::test]
async fn timestamp_is_iso_8601_without_offset() {
    assert_eq!(
        forms(
            "",
            "timestamp",
            &["'2026-11-13 17:20:00'", "'2026-11-13 17:20:00.5'"]
        )
        .await,
        vec![
            json!("2026-11-13T17:20:00"),
            json!("2026-11-13T17:20:00.500000")
        ]
    );
}

#[tokio::test]
async fn date_is_iso_8601() {
    assert_eq!(
        forms("", "date", &["'2026-11-13'"]).await,
        vec![json!("2026-11-13")]
    );
}

#[tokio::test]
async fn time_is_iso_8601() {
    assert_eq!(
        forms("", "time", &["'17:20'", "'17:20:01.25'"]).await,
        vec![json!("17:20:00"), json!("17:20:01.250000")]
    );
}

#[tokio::test]
async fn interval_is_seconds() {
    assert_eq!(
        forms(
            "",
            "interval",
            &["'1 hour'", "'1.5 seconds'", "'-2 days'", "'1 mon'"]
        )
        .await,
        vec![json!(3600), json!(1.5), json!(-172800), json!(2592000)]
    );
}

#[tokio::test]
async fn bytea_is_base64_without_line_breaks() {
    let long = format!("'\\x{}'", "ff".repeat(100));
    let expected = "/".repeat(132) + "/w==";
    assert_eq!(
        forms("", "bytea", &["'\\x48617265'", "''", &long]).await,
        vec![json!("SGFyZQ=="), json!(""), json!(expected)]
    );
}

#[tokio::test]
async fn inet_and_cidr_are_their_text() {
    assert_eq!(
        forms("", "inet", &["'192.168.0.1'", "'10.0.0.1/24'", "'::1'"]).await,
        vec![json!("192.168.0.1"), json!("10.0.0.1/24"), json!("::1")]
    );
    assert_eq!(
        forms("", "cidr", &["'10.0.0.0/8'"]).await,
        vec![json!("10.0.0.0/8")]
    );
}

#[tokio::test]
async fn enum_is_its_label() {
    assert_eq!(
        forms(
            "CREATE TYPE status AS ENUM ('draft', 'confirmed', 'it''s done')",
            "status",
            &["'confirmed'", "'it''s done'"]
        )
        .await,
        vec![json!("confirmed"), json!("it's done")]
    );
}

#[tokio::test]
async fn arrays_are_lists_element_by_element() {
    assert_eq!(
        forms("", "integer[]", &["'{1,2,NULL}'", "'{}'"]).await,
        vec![json!([1, 2, null]), json!([])]
    );
    assert_eq!(
        forms("", "numeric(6,2)[]", &["'{1.5,NULL}'"]).await,
        vec![json!(["1.50", null])]
    );
    assert_eq!(
        forms(
            "",
            "timestamptz[]",
            &["ARRAY['2026-10-06 15:00+03'::timestamptz]"]
        )
        .await,
        vec![json!(["2026-10-06T12:00:00+00:00"])]
    );
    assert_eq!(
        forms("", "bytea[]", &["ARRAY['\\x01'::bytea, NULL]"]).await,
        vec![json!(["AQ==", null])]
    );
    assert_eq!(
        forms("", "text[][]", &["'{{a,b},{c,d}}'"]).await,
        vec![json!([["a", "b"], ["c", "d"]])]
    );
    assert_eq!(
        forms("", "float8[]", &["'{NaN,1}'"]).await,
        vec![json!(["NaN", 1])]
    );
}

#[tokio::test]
async fn json_and_jsonb_are_as_is() {
    assert_eq!(
        forms(
            "",
            "json",
            &["'{\"a\": [1, \"x\", null], \"b\": {\"c\": true}}'"]
        )
        .await,
        vec![json!({"a": [1, "x", null], "b": {"c": true}})]
    );
    assert_eq!(
        forms("", "jsonb", &["'\"text\"'", "'12.50'", "'null'"]).await,
        vec![json!("text"), json!(12.50), json!(null)]
    );
}

#[tokio::test]
async fn ranges_are_objects_with_bounds_in_their_form() {
    assert_eq!(
        forms("", "int4range", &["'[1,10)'", "'empty'", "'(,5]'"]).await,
        vec![
            json!({"lower": 1, "upper": 10, "lower_inc": true, "upper_inc": false, "is_empty": false}),
            json!({"lower": null, "upper": null, "lower_inc": false, "upper_inc": false, "is_empty": true}),
            json!({"lower": null, "upper": 6, "lower_inc": false, "upper_inc": false, "is_empty": false}),
        ]
    );
    assert_eq!(
        forms("", "numrange", &["'[1.50,2.5]'"]).await,
        vec![
            json!({"lower": "1.50", "upper": "2.5", "lower_inc": true, "upper_inc": true, "is_empty": false})
        ]
    );
    assert_eq!(
        forms(
            "",
            "tstzrange",
            &["'[2026-10-06 15:00+03,2026-10-07 00:00Z)'"]
        )
        .await,
        vec![json!({
            "lower": "2026-10-06T12:00:00+00:00",
            "upper": "2026-10-07T00:00:00+00:00",
            "lower_inc": true,
            "upper_inc": false,
            "is_empty": false
        })]
    );
    assert_eq!(
        forms("", "daterange", &["'[2026-10-06,2026-10-08]'"]).await,
        vec![
            json!({"lower": "2026-10-06", "upper": "2026-10-09", "lower_inc": true, "upper_inc": false, "is_empty": false})
        ]
    );
}

#[tokio::test]
async fn multiranges_are_lists_of_range_objects() {
    assert_eq!(
        forms("", "int4multirange", &["'{[1,3), [5,7)}'", "'{}'"]).await,
        vec![
            json!([
                {"lower": 1, "upper": 3, "lower_inc": true, "upper_inc": false, "is_empty": false},
                {"lower": 5, "upper": 7, "lower_inc": true, "upper_inc": false, "is_empty": false}
            ]),
            json!([])
        ]
    );
    assert_eq!(
        forms("", "nummultirange", &["'{[0.10,1)}'"]).await,
        vec![
            json!([{"lower": "0.10", "upper": "1", "lower_inc": true, "upper_inc": false, "is_empty": false}])
        ]
    );
}

#[tokio::test]
async fn composite_types_are_objects_of_their_attributes() {
    assert_eq!(
        forms(
            "CREATE TYPE money_amount AS (amount numeric(10,2), currency text, at timestamptz)",
            "money_amount",
            &[
                "ROW(12.5, 'EUR', '2026-10-06 15:00+03')",
                "ROW(NULL, NULL, NULL)",
                "NULL"
            ]
        )
        .await,
        vec![
            json!({"amount": "12.50", "currency": "EUR", "at": "2026-10-06T12:00:00+00:00"}),
            json!({"amount": null, "currency": null, "at": null}),
            json!(null)
        ]
    );
    assert_eq!(
        forms(
            "CREATE TYPE point2 AS (x int, y int)",
            "point2[]",
            &["ARRAY[ROW(1,2)::point2, ROW(3,4)::point2]"]
        )
        .await,
        vec![json!([{"x": 1, "y": 2}, {"x": 3, "y": 4}])]
    );
}

#[tokio::test]
async fn domains_use_their_base_type() {
    assert_eq!(
        forms(
            "CREATE DOMAIN price AS numeric(8,2) CHECK (VALUE >= 0)",
            "price",
            &["3"]
        )
        .await,
        vec![json!("3.00")]
    );
}
