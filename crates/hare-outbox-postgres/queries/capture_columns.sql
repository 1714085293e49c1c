-- The live columns of a table or composite type, in order. $1 the relation's oid.
SELECT a.attname AS name,
       a.atttypid::int8 AS type_oid,
       format_type(a.atttypid, a.atttypmod) AS type_name
FROM pg_attribute a
WHERE a.attrelid = $1::int8::oid AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
