-- The SQLite twin of views_fill_pg.sql: ?1 events, one every 100 ms up to ?2 (Unix seconds),
-- timestamps in the backend's fixed text format.
WITH RECURSIVE
    series(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM series WHERE g < ?1),
    rows AS (
        SELECT g,
               ?2 - (?1 - g) * 0.1 AS created,
               lower(hex(randomblob(16))) AS h,
               json_extract('["sales_order", "prod_order", "purchase_order", "purchase_request"]', '$[' || ((g / 7) % 4) || ']') AS label,
               json_extract('["sales_orders", "plan_prod_orders", "wh_purchase_orders", "wh_purchase_requests"]', '$[' || ((g / 7) % 4) || ']') AS table_name
        FROM series
    )
INSERT INTO outbox (id, topic, payload, headers, ordering_key, created_at, attempts, last_error,
                    next_attempt_at, published_at, dead_lettered_at)
SELECT
    substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-4' || substr(h, 14, 3) || '-a'
        || substr(h, 18, 3) || '-' || substr(h, 21, 12),
    json_extract('["doc.updated", "doc.created", "billing.paid", "billing.refunded", "shipping.sent"]', '$[' || (g % 5) || ']'),
    json_object(
        'model', label,
        'table', table_name,
        'operation', 'updated',
        'pk', (g + g / 100) % 5000,
        'changed', json_array('status'),
        'before', json_object('status', 'confirmed'),
        'after', json_object('status', 'shipped'),
        'occurred_at', strftime('%Y-%m-%dT%H:%M:%f', created, 'unixepoch') || '000+00:00'),
    json_object('author', json_extract('["Администратор", "alice", "bob", "carol", "dave", "erin", "system"]', '$[' || (g % 7) || ']')),
    label || ':' || ((g + g / 100) % 5000),
    strftime('%Y-%m-%dT%H:%M:%f', created, 'unixepoch') || '000Z',
    CASE g % 100 WHEN 0 THEN 5 WHEN 1 THEN 1 ELSE 0 END,
    CASE g % 100 WHEN 0 THEN 'rejected' WHEN 1 THEN 'timeout' END,
    CASE g % 100 WHEN 1 THEN strftime('%Y-%m-%dT%H:%M:%f', ?2 + 3600, 'unixepoch') || '000Z' END,
    CASE WHEN g % 100 >= 3
        THEN strftime('%Y-%m-%dT%H:%M:%f', created + (g % 1000) / 1000.0, 'unixepoch') || '000Z' END,
    CASE g % 100 WHEN 0 THEN strftime('%Y-%m-%dT%H:%M:%f', created + 1, 'unixepoch') || '000Z' END
FROM rows
