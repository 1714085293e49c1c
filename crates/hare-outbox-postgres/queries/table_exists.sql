-- Whether a table exists: $1 its schema (NULL: the current schema), $2 its name.
SELECT to_regclass(quote_ident(coalesce($1, current_schema())) || '.' || quote_ident($2)) IS NOT NULL
