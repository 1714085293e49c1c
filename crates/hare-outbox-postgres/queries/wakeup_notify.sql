SELECT pg_notify($1, t) FROM unnest($2::text[]) AS t
