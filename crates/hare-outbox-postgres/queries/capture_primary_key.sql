-- The primary key's columns in key order. $1 the table's oid.
SELECT a.attname AS name
FROM pg_index i
CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = $1::int8::oid AND i.indisprimary
ORDER BY k.ord
