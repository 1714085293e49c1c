-- Fills the views benchmark's outbox table with $1 events in one statement, one every 100 ms up
-- to now: journal_fill_pg.sql's events as capture triggers write them now — the envelope names
-- its table (`sales_orders`) beside the capture's label (`sales_order`), and each event has the
-- default ordering key `{label}:{pk}` (four labels × 5,000 keys; the key `(g + g / 100) % 5000`
-- spreads the undelivered events over every key). Per hundred events one dead letter, one
-- retrying, one pending and 97 published, so most of the keys with undelivered events are held by
-- a dead or failing head.
INSERT INTO outbox (id, topic, payload, headers, ordering_key, created_at, attempts, last_error,
                    next_attempt_at, published_at, dead_lettered_at)
SELECT
    gen_random_uuid(),
    (ARRAY['doc.updated', 'doc.created', 'billing.paid', 'billing.refunded', 'shipping.sent'])[1 + g % 5],
    jsonb_build_object(
        'model', m.label,
        'table', m.table_name,
        'operation', 'updated',
        'pk', (g + g / 100) % 5000,
        'changed', jsonb_build_array('status'),
        'before', jsonb_build_object('status', 'confirmed'),
        'after', jsonb_build_object('status', 'shipped'),
        'occurred_at', to_char(t.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')),
    jsonb_build_object('author', (ARRAY['Администратор', 'alice', 'bob', 'carol', 'dave', 'erin', 'system'])[1 + g % 7]),
    m.label || ':' || ((g + g / 100) % 5000),
    t.created_at,
    CASE g % 100 WHEN 0 THEN 5 WHEN 1 THEN 1 ELSE 0 END,
    CASE g % 100 WHEN 0 THEN 'rejected' WHEN 1 THEN 'timeout' END,
    CASE g % 100 WHEN 1 THEN now() + interval '1 hour' END,
    CASE WHEN g % 100 >= 3 THEN t.created_at + (g % 1000) * interval '1 millisecond' END,
    CASE g % 100 WHEN 0 THEN t.created_at + interval '1 second' END
FROM generate_series(1, $1::bigint) AS g
CROSS JOIN LATERAL (SELECT now() - ($1::bigint - g) * interval '100 milliseconds' AS created_at) AS t
CROSS JOIN LATERAL (
    SELECT (ARRAY['sales_order', 'prod_order', 'purchase_order', 'purchase_request'])[1 + (g / 7) % 4] AS label,
           (ARRAY['sales_orders', 'plan_prod_orders', 'wh_purchase_orders', 'wh_purchase_requests'])[1 + (g / 7) % 4] AS table_name
) AS m
