-- One event by id. ?1 id (hyphenated UUID text).
SELECT
    {columns}
FROM {table}
WHERE id = ?1
