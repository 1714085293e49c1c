-- Whether a table exists. ?1 the table. {schema} the quoted database name.
SELECT type FROM {schema}.sqlite_master WHERE name = ?1 AND type = 'table'
