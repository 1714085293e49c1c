-- What the JSON form of a type depends on. $1 the type's oid. The multirange lookup goes through
-- to_jsonb so the query also runs on PostgreSQL 13, which has no multiranges.
SELECT t.typname AS name,
       n.nspname AS schema,
       t.typtype::text AS kind,
       t.typcategory::text AS category,
       t.typelem::int8 AS element,
       t.typbasetype::int8 AS base,
       t.typrelid::int8 AS relation,
       coalesce((SELECT r.rngsubtype FROM pg_range r WHERE r.rngtypid = t.oid), 0)::int8 AS range_subtype,
       coalesce((SELECT r.rngsubtype FROM pg_range r
                 WHERE (to_jsonb(r) ->> 'rngmultitypid')::oid = t.oid), 0)::int8 AS multirange_subtype
FROM pg_type t
JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE t.oid = $1::int8::oid
