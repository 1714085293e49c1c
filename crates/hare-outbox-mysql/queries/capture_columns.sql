-- The columns of a table in order: ? its database, ? its name. `type` is the column type as
-- the catalog spells it (`decimal(10,2)`, `int(11)`), `data_type` its bare type, `pk` its
-- position in the primary key (0: not part of it). MariaDB's JSON columns (LONGTEXT with a
-- json_valid check) are told apart in src/capture.rs from information_schema.check_constraints.
SELECT CAST(c.column_name AS CHAR(64)) AS name,
       CAST(c.column_type AS CHAR(1024)) AS type,
       CAST(c.data_type AS CHAR(64)) AS data_type,
       CAST(COALESCE(k.ordinal_position, 0) AS SIGNED) AS pk
FROM information_schema.columns AS c
LEFT JOIN information_schema.key_column_usage AS k
    ON k.table_schema = c.table_schema AND k.table_name = c.table_name
    AND k.column_name = c.column_name AND k.constraint_name = 'PRIMARY'
WHERE c.table_schema = ? AND c.table_name = ?
ORDER BY c.ordinal_position
